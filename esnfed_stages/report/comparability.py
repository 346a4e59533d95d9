"""What a report's numbers were run on, said where they stand beside the published values: every
paper table's header and the report's index (reports/README.md) carry one line naming the data
source and the budget (its trials, retrains and reservoir units) and whether they are that table's
paper's protocol: the real recordings (data.source: raw) under budget `paper` (PROTOCOL §6, every
table) or under the budget of the paper the table is taken from (`esann`: the ESANN 2022 tables,
`ijcnn`: the IJCNN 2021 ones; protocol_tables.PROTOCOLS). Anything else (the embedded synthetic
data, a smaller budget, another paper's budget) makes the absolute numbers incomparable with the
'paper' columns, and the line says so, so that a cell is not read as a failed reproduction.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from esnfed_core.vocabulary import DATASETS
from esnfed_stages.report.protocol_tables import PROTOCOLS, Protocol

if TYPE_CHECKING:
    from esnfed_stages.params.experiment import BudgetSpec

PAPER_BUDGET = "paper"  # params.yaml budgets.paper: the papers' protocol (PROTOCOL §6)
REAL_SOURCE = "raw"     # an assess file's `source` when it was made from the real files
# a paper's own budget (docs/protocol-variants.md "ESANN 2022 protocol variant", "IJCNN 2021 ..."): budget name -> its paper
PAPER_OWN_BUDGETS: dict[str, Protocol] = {p.budget: p for p in PROTOCOLS.values()}


@dataclass(frozen=True)
class BudgetScale:
    """params.yaml budgets.<budget> as a reader needs it: trials, retrains and the units range of
    each paper dataset (None / absent where params.yaml does not say)."""

    name: str
    trials: int | None = None
    retrains: int | None = None
    units: tuple[tuple[str, str], ...] = ()  # (dataset, "20–40")

    def text(self, datasets: Sequence[str] = DATASETS) -> str:
        """'3 trials, 2 retrains, units 20–40' (units per dataset where they differ)."""
        parts = [f"{self.trials} trials"] if self.trials is not None else []
        parts += [f"{self.retrains} retrains"] if self.retrains is not None else []
        units = [(ds, r) for ds, r in self.units if ds in datasets]
        if units and len({r for _, r in units}) == 1:
            parts.append(f"units {units[0][1]}")
        elif units:
            parts.append("units " + ", ".join(f"{r} ({ds.upper()})" for ds, r in units))
        return ", ".join(parts)


def _range(v: Any) -> str:
    """A search-space entry of units as 'low–high' (a list: its smallest and largest choice)."""
    if isinstance(v, Mapping) and "low" in v and "high" in v:
        low, high = v["low"], v["high"]
    elif isinstance(v, (list, tuple)) and v and all(isinstance(x, (int, float)) for x in v):
        low, high = min(v), max(v)
    else:
        return str(v)
    return f"{low:g}" if low == high else f"{low:g}–{high:g}"


def budget_scale(spec: "BudgetSpec | None") -> BudgetScale | None:
    """The scale of params.yaml's budget as the report reads it (experiment_params.budget_spec:
    unvalidated, so anything unexpected is left out); None without a budget."""
    if spec is None or not isinstance(spec.name, str):
        return None
    space = spec.space if isinstance(spec.space, Mapping) else {}
    units = tuple((ds, _range(space[ds]["units"])) for ds in DATASETS
                  if isinstance(space.get(ds), Mapping) and "units" in space[ds])
    return BudgetScale(spec.name, _count(spec.trials), _count(spec.retrains), units)


def _count(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def _distinct(values: Iterable[Any]) -> list[str]:
    return sorted({str(v) for v in values if v is not None})


def table_budgets(table: str | None = None) -> tuple[str, ...]:
    """The budgets under which a run on the real recordings is ``table``'s paper's protocol: `paper`
    for every table (PROTOCOL §6), then the own budget of the paper it is taken from (`esann` for
    esann and esann-protocol, `ijcnn` for the IJCNN 2021 tables); None (a line over several
    tables): `paper` alone."""
    return (PAPER_BUDGET,) + tuple(p.budget for p in PROTOCOLS.values() if table in p.all_table_ids)


def papers_protocol(sources: Iterable[Any], budgets: Iterable[Any], table: str | None = None) -> bool:
    """Whether every input shown was made from the real recordings under one budget that is
    ``table``'s paper's protocol (table_budgets): the only run whose numbers can be set against the
    published ones."""
    buds = _distinct(budgets)
    return _distinct(sources) == [REAL_SOURCE] and len(buds) == 1 and buds[0] in table_budgets(table)


def _ran(buds: list[str], scale: BudgetScale | None, datasets: Sequence[str]) -> str:
    """'budget `paper` (100 trials, 5 retrains, ...)': the scale only where it is the files' budget's."""
    scale_text = scale.text(datasets) if scale is not None and buds == [scale.name] else ""
    return f"budget `{', '.join(buds) or 'unknown'}`" + (f" ({scale_text})" if scale_text else "")


def _own(protocol: Protocol) -> str:
    """'the ESANN 2022 paper's (docs/protocol.md, "ESANN 2022 protocol variant")'."""
    return f"the {protocol.paper} paper's (docs/protocol.md, \"{protocol.section}\")"


def _alternatives(table: str | None) -> str:
    """This table's protocol budgets, as the line names them: "budget `paper`, PROTOCOL §6" (and
    "or `esann`, the ESANN 2022 paper's")."""
    own = [f"`{b}`, the {PAPER_OWN_BUDGETS[b].paper} paper's" for b in table_budgets(table) if b != PAPER_BUDGET]
    return ", or ".join([f"budget `{PAPER_BUDGET}`, PROTOCOL §6"] + own)


def _budget_part(buds: list[str], ran: str, table: str | None) -> str:
    """What the notice says of a budget: the papers', a paper's own (this table's or another
    paper's: then which tables it is the protocol of), or none of them."""
    if buds == [PAPER_BUDGET]:
        return f"the papers' {ran}"
    own = PAPER_OWN_BUDGETS.get(buds[0]) if len(buds) == 1 else None
    if own is None:
        return f"{ran}, not the papers' protocol (budget `{PAPER_BUDGET}`, PROTOCOL §6)"
    if buds[0] in table_budgets(table):
        return f"{ran}, the {own.paper} paper's protocol"
    whose = "this table's paper's" if table is not None else "the papers' protocol"
    return (f"{ran}, the {own.paper} paper's protocol for tables {', '.join(own.all_table_ids)} alone, not {whose} "
            f"({_alternatives(table)})")


def notice(sources: Iterable[Any], budgets: Iterable[Any], scale: BudgetScale | None,
           datasets: Sequence[str] = DATASETS, columns: str = "The 'paper' columns",
           elsewhere: str | None = None, table: str | None = None) -> str:
    """One line: what the run was (data source, budget and its scale) against the protocol of
    ``table``'s paper (table_budgets; None: the papers' protocol, budget `paper`).
    ``sources`` / ``budgets``: those of the assess files shown; ``columns``: how the sentence names
    the published values ("The 'paper' columns", or the index's "The tables' 'paper' columns");
    ``elsewhere``: a table without a paper column (privacy.md) says instead, in this sentence, where
    its published counterparts are."""
    srcs, buds = _distinct(sources), _distinct(budgets)
    ran = _ran(buds, scale, datasets)
    published = elsewhere or f"{columns} are the published values beside ours"
    if papers_protocol(srcs, buds, table):
        whose = "the papers' (PROTOCOL §6)" if buds == [PAPER_BUDGET] else _own(PAPER_OWN_BUDGETS[buds[0]])
        return f"Protocol: {whose}: the real recordings (data.source: {REAL_SOURCE}) under {ran}. {published}."
    if srcs == [REAL_SOURCE]:
        data = f"the real recordings (data.source: {REAL_SOURCE})"
    elif srcs == ["synthetic"]:
        data = "the embedded synthetic data (data.source: synthetic), not the real recordings,"
    else:
        data = f"data source {', '.join(srcs) or 'unknown'}, not the real recordings,"
    published = elsewhere or f"{columns} are the published values, shown for reference, not a target for this run"
    return (f"**Not comparable with the published values:** this run used {data} and "
            f"{_budget_part(buds, ran, table)}. {published}: absolute accuracies differ with the data and "
            "the budget; compare the methods within this run.")


def index_notice(sources: Iterable[Any], budgets: Iterable[Any], scale: BudgetScale | None,
                 tables: Sequence[str], datasets: Sequence[str] = DATASETS,
                 columns: str = "The tables' 'paper' columns") -> str:
    """The index's line over the paper tables ``tables`` (ids) and their assess files' sources and
    budgets: the notice where they all are, or none is, their paper's protocol; where some are (the
    real recordings under one paper's own budget), which tables are comparable and which not."""
    srcs, buds = _distinct(sources), _distinct(budgets)
    comparable = [t for t in tables if papers_protocol(srcs, buds, t)]
    if len(comparable) in (0, len(tables)):
        return notice(srcs, buds, scale, datasets, columns, table=comparable[0] if comparable else None)
    others = [t for t in tables if t not in comparable]
    return (f"Protocol: {_own(PAPER_OWN_BUDGETS[buds[0]])} in tables {', '.join(comparable)} alone: the real "
            f"recordings (data.source: {REAL_SOURCE}) under {_ran(buds, scale, datasets)}. **Not comparable** with "
            f"the published values in tables {', '.join(others)}: not their paper's protocol (each header says why). "
            f"{columns} are the published values, beside ours in the comparable tables.")
