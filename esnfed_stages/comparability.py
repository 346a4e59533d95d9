"""What a report's numbers were run on, said where they stand beside the published values: every
paper table's header and the report's index (reports/README.md) carry one line naming the data
source and the budget (its trials, retrains and reservoir units) and whether they are the papers'
protocol: the real recordings (data.source: raw) under budget `paper` (PROTOCOL §6). Anything else
(the embedded synthetic data, a smaller budget) makes the absolute numbers incomparable with the
'paper' columns, and the line says so, so that a cell is not read as a failed reproduction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterable, Mapping, Sequence

from esnfed_core.vocabulary import DATASETS

if TYPE_CHECKING:
    from esnfed_stages.experiment_params import BudgetSpec

PAPER_BUDGET = "paper"  # params.yaml budgets.paper: the papers' protocol (PROTOCOL §6)
REAL_SOURCE = "raw"     # an assess file's `source` when it was made from the real files


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


def papers_protocol(sources: Iterable[Any], budgets: Iterable[Any]) -> bool:
    """Whether every input shown was made from the real recordings under budget `paper`: the only
    run whose numbers can be set against the published ones."""
    return _distinct(sources) == [REAL_SOURCE] and _distinct(budgets) == [PAPER_BUDGET]


def notice(sources: Iterable[Any], budgets: Iterable[Any], scale: BudgetScale | None,
           datasets: Sequence[str] = DATASETS, columns: str = "The 'paper' columns",
           elsewhere: str | None = None) -> str:
    """One line: what the run was (data source, budget and its scale) against the papers' protocol.
    ``sources`` / ``budgets``: those of the assess files shown; ``columns``: how the sentence names
    the published values ("The 'paper' columns", or the index's "The tables' 'paper' columns");
    ``elsewhere``: a table without a paper column (privacy.md) says instead, in this sentence, where
    its published counterparts are."""
    srcs, buds = _distinct(sources), _distinct(budgets)
    budget = ", ".join(buds) or "unknown"
    scale_text = scale.text(datasets) if scale is not None and buds == [scale.name] else ""
    ran = f"budget `{budget}`" + (f" ({scale_text})" if scale_text else "")
    real, paper = srcs == [REAL_SOURCE], buds == [PAPER_BUDGET]
    if papers_protocol(srcs, buds):
        return (f"Protocol: the papers' (PROTOCOL §6): the real recordings (data.source: {REAL_SOURCE}) "
                f"under {ran}. " + (f"{elsewhere}." if elsewhere else f"{columns} are the published values beside ours."))
    if real:
        data = f"the real recordings (data.source: {REAL_SOURCE})"
    elif srcs == ["synthetic"]:
        data = "the embedded synthetic data (data.source: synthetic), not the real recordings,"
    else:
        data = f"data source {', '.join(srcs) or 'unknown'}, not the real recordings,"
    budget_part = (f"the papers' {ran}" if paper
                   else f"{ran}, not the papers' protocol (budget `{PAPER_BUDGET}`, PROTOCOL §6)")
    published = elsewhere or f"{columns} are the published values, shown for reference, not a target for this run"
    return (f"**Not comparable with the published values:** this run used {data} and {budget_part}. "
            f"{published}: absolute accuracies differ with the data and the budget; compare the methods within this run.")
