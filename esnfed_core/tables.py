"""The papers' tables (PROTOCOL §7) as data: which methods each compares, and pure assembly of
cells (mean ± population std ×100, marks, published values), metrics and communication rows.

Numbers only: callers pass the scores, the t-test comparisons and the published values in; the
stages render the cells and rows as Markdown and CSV (esnfed_stages/report/tables.py). Scores are
fractions in [0, 1]; cells are in percent.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any, Iterable, Iterator, Mapping, Sequence

import numpy as np

from esnfed_core.method import CONTINUAL_METHODS as CONTINUAL_NAMES
from esnfed_core.errors import DataError
from esnfed_core.quote import quote
from esnfed_core.sampling import CLIENT_FRACTION, FULL, sample_size
from esnfed_core.stats import Mark, TestResult, pair_marks
from esnfed_core.validation import ParameterError
from esnfed_core.validation_traffic import (
    ValidationPlan, analytic_lambda_selection, analytic_validation, lambda_selection_formula,
    lambda_selection_ledger, validation_formulas, validation_ledger,
)
from esnfed_core.vocabulary import DATASETS, PCTS

DATASET_LABELS = {"wesad": "WESAD", "hhar": "HHAR"}  # as the papers name them (titles, headers)


def dataset_label(ds: str) -> str:
    """A dataset's name in titles and headers: WESAD and HHAR as the papers write them, a user's own
    dataset as declared in params.yaml (``example``, not ``EXAMPLE``)."""
    return DATASET_LABELS.get(ds, ds)


def papers_first(datasets: Sequence[str]) -> list[str]:
    """A table's and figure's order of datasets: the papers' first, then the others as given
    (params.yaml ``datasets`` or ``study_datasets``)."""
    return [d for d in DATASETS if d in datasets] + [d for d in dict.fromkeys(datasets) if d not in DATASETS]


# (dataset, method, pct, column) -> retrain scores; a missing key is a method not (yet) assessed.
ScoreKey = tuple[str, str, str, str]
Scores = Mapping[ScoreKey, Sequence[float]]

OTHER_PREPROCESSING = (
    "The {paper} paper used its own preprocessing ({what}); its published numbers are shown for "
    "reference and are not directly comparable: under this single protocol (PROTOCOL §1) the table "
    "is recomputed."
)


@dataclass(frozen=True)
class TableSpec:
    """One table of PROTOCOL §7: its datasets, the compared methods (id, paper label), columns.

    ``published`` formats the column name of a cell in paper_results.yaml; ``tested`` lists the
    columns that carry t-test marks (the IncFed tables mark the test column only). ``pairs`` are
    the (proposed, baseline) method pairs the paper compares, the only ones tested (PROTOCOL §6).
    A family is one proposed method and its baselines (a paper table has one; deep and a user's
    continual table have two); each family is marked on its own (``families``), and no method is
    in two families, so a cell's one mark compares it within its family only.
    """

    id: str
    title: str
    datasets: tuple[str, ...]
    methods: tuple[tuple[str, str], ...]
    columns: tuple[str, ...] = ("test",)
    tested: tuple[str, ...] = ("test",)
    published: str = "{dataset}/{label}"
    note: str = ""
    pairs: tuple[tuple[str, str], ...] = ()
    # False: a table with no published values and no paper column (this project's own, e.g. deep,
    # or a user dataset's generic table)
    has_published: bool = True
    # a protocol table (protocol_table): the paper table whose published values it shows, and the
    # paper dataset each of its datasets stands for there ((variant, base) pairs)
    published_table: str = ""
    published_as: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        for a, b in self.pairs:
            if a not in self.method_ids or b not in self.method_ids or a == b:
                raise ValueError(f"table {self.id}: pair ({a}, {b}) is not two of its methods")

    @property
    def families(self) -> tuple[tuple[tuple[str, str], ...], ...]:
        """The pairs grouped by proposed method (a family: it and its baselines), in pair order.

        ValueError when a method is in two families: a cell holds one bold/italic mark (the
        heterogeneous table, which marks each pair with ▲/▼ instead, does not ask for them)."""
        by_proposed: dict[str, list[tuple[str, str]]] = {}
        for a, b in self.pairs:
            by_proposed.setdefault(a, []).append((a, b))
        seen: set[str] = set()
        for family in by_proposed.values():
            members = {m for pair in family for m in pair}
            if members & seen:
                raise ValueError(f"table {self.id}: {', '.join(sorted(members & seen))} is in the pairs "
                                 "of two proposed methods; mark them in separate tables")
            seen |= members
        return tuple(tuple(family) for family in by_proposed.values())

    def pairs_text(self) -> str:
        labels = dict(self.methods)
        return "; ".join(f"{labels[a]} vs {labels[b]}" for a, b in self.pairs)

    @property
    def method_ids(self) -> tuple[str, ...]:
        return tuple(m for m, _ in self.methods)

    def published_column(self, dataset: str, label: str, column: str) -> str:
        return self.published.format(dataset=dict(self.published_as).get(dataset, dataset), label=label, column=column)


_IJCNN_METHODS = (("random", "random"), ("ridge", "centralized"), ("fedavg", "fedavg"),
                  ("incfed", "incfed"))
_IJCNN_NOTE = OTHER_PREPROCESSING.format(
    paper="IncFed (IJCNN 2021)",
    what="WESAD windows of 350 samples; HAR as HHAR with 32 engineered features, sequences of 500; "
    "its ± values look like fractions and are copied as printed")

TABLES: tuple[TableSpec, ...] = tuple(
    [
        TableSpec(f"ijcnn-{ds}", f"IncFed (IJCNN 2021), Table {'V' if ds == 'wesad' else 'VI'}: "
                  f"train and test accuracy on {DATASET_LABELS[ds]}",
                  (ds,), _IJCNN_METHODS, columns=("train", "test"), published="{label}/{column}",
                  note=_IJCNN_NOTE, pairs=(("incfed", "fedavg"),))
        for ds in DATASETS
    ]
    + [
        TableSpec("esann", "ESANN 2022, Table 2: IncFed vs FedIP (+IncFed readout)", DATASETS,
                  (("incfed", "incfed"), ("fedip", "fedip")),
                  note=OTHER_PREPROCESSING.format(
                      paper="ESANN 2022", what="HHAR Nexus4 only, windows of 400 steps"),
                  pairs=(("fedip", "incfed"),)),
        TableSpec("fedip", "Decentralized Plasticity, Table 1: federated stationary, without vs "
                  "with FedIP (IncFed readout)", DATASETS,
                  (("incfed", "without-fedip"), ("fedip", "with-fedip")),
                  pairs=(("fedip", "incfed"),)),
        TableSpec("fedclip", "Decentralized Plasticity, Table 2: federated continual (FedCLIP), "
                  "stream accuracy after the last context", DATASETS,
                  (("fedclip-naive", "naive"), ("fedclip-replay", "replay"),
                   ("fedclip-joint", "joint")),
                  pairs=(("fedclip-replay", "fedclip-naive"), ("fedclip-replay", "fedclip-joint"))),
        TableSpec("ip-centralized", "Decentralized Plasticity, Table 4: centralised stationary, "
                  "without vs with IP", DATASETS, (("ridge", "without-ip"), ("ip", "with-ip")),
                  pairs=(("ip", "ridge"),)),
        TableSpec("clip-centralized", "Decentralized Plasticity, Table 5: centralised continual "
                  "(CLIP), stream accuracy after the last context", DATASETS,
                  (("clip-naive", "naive"), ("clip-replay", "replay"), ("clip-joint", "joint")),
                  pairs=(("clip-replay", "clip-naive"), ("clip-replay", "clip-joint"))),
    ]
    # deep reservoirs (docs/deep.md): not in the papers
    + [
        TableSpec("deep", "Deep vs shallow reservoirs at the same total units: IncFed "
                  "readout (= centralised ridge), without and with FedIP", DATASETS,
                  (("incfed", "shallow-incfed"), ("deep-incfed", "deep-incfed"),
                   ("fedip", "shallow-fedip"), ("deep-fedip", "deep-fedip")),
                  note="Same total units: each deep method has the units selected for its shallow "
                  "counterpart in that share (runs/select/*/<incfed|fedip>/*/best.json), split over "
                  "`layers` stacked reservoirs sharing ρ, leak and input scaling (docs/deep.md); trial i "
                  "of a deep and of a shallow method draws the same ρ, leak and scaling, and each keeps "
                  "its best trial on the validation users; marks compare deep with shallow within "
                  "IncFed and within FedIP, separately.",
                  pairs=(("deep-incfed", "incfed"), ("deep-fedip", "fedip")), has_published=False),
    ]
)
TABLE_IDS: tuple[str, ...] = tuple(t.id for t in TABLES)
DEEP_TABLE = "deep"  # the deep reservoirs' table: on params.yaml study_datasets (table_specs)


# ---------------------------------------------------------------------------------------------
# Generic tables of a user's own dataset

CONTINUAL_METHODS = tuple((m, m.replace("-", " ")) for m in CONTINUAL_NAMES)  # (name, label)


def generic_tables(dataset: str, continual: bool) -> tuple[TableSpec, ...]:
    """A user dataset's tables, each marked as the papers' tables are (their comparisons, no
    other): IncFed vs FedAvg (as IncFed, IJCNN 2021, with random for reference), FedIP vs IncFed
    (as Decentralized Plasticity, Table 1) and IP vs ridge (its Table 4), the stationary methods'
    test accuracy; with contexts, CLIP and FedCLIP side by side (replay vs naive and joint, as
    its Tables 5 and 2), stream accuracy after the last context, each setting marked on its own.
    Three stationary tables, not one: IncFed is in two of their comparisons, and one cell holds
    one mark."""
    def stationary(name: str, what: str, methods: tuple[tuple[str, str], ...], pair: tuple[str, str],
                   note: str = "") -> TableSpec:
        return TableSpec(f"{dataset}-stationary-{name}", f"{dataset}: {what}, test accuracy", (dataset,),
                         methods, has_published=False, pairs=(pair,), note=note)

    specs = [
        stationary("incfed", "federated readouts, IncFed vs FedAvg",
                   (("random", "random"), ("fedavg", "fedavg"), ("incfed", "incfed")), ("incfed", "fedavg"),
                   note=f"random (chance level) is shown for reference and not tested; centralised ridge "
                   f"is in {dataset}-stationary-ip."),
        stationary("fedip", "federated, without vs with FedIP (IncFed readout)",
                   (("incfed", "incfed"), ("fedip", "fedip")), ("fedip", "incfed")),
        stationary("ip", "centralised, without vs with IP (ridge readout)",
                   (("ridge", "centralised"), ("ip", "ip")), ("ip", "ridge")),
    ]
    if continual:
        specs.append(TableSpec(
            f"{dataset}-continual", f"{dataset}: continual methods (CLIP centralised, FedCLIP federated), "
            "stream accuracy after the last context", (dataset,), CONTINUAL_METHODS, has_published=False,
            pairs=tuple((f"{a}-replay", f"{a}-{b}") for a in ("clip", "fedclip") for b in ("naive", "joint")),
            note="Marks compare CLIP methods among themselves and FedCLIP methods among themselves, "
            "separately (as the papers' Tables 5 and 2)."))
    return tuple(specs)


def table_specs(datasets: Sequence[str] = DATASETS, continual: Sequence[str] = DATASETS,
                studies: Sequence[str] | None = None) -> tuple[TableSpec, ...]:
    """The tables of the declared datasets: each paper table whose datasets are all declared, the
    deep table on the declared datasets of ``studies`` (params.yaml study_datasets, where the deep
    reservoirs run, the papers' or your own, papers' first; None: the declared papers' datasets;
    none: no deep table), then the generic tables of every other declared dataset (in declaration
    order)."""
    studies = tuple(d for d in papers_first(DATASETS if studies is None else studies) if d in datasets)
    papers = tuple(t for t in TABLES if t.id != DEEP_TABLE and set(t.datasets) <= set(datasets))
    deep = replace(table_spec(DEEP_TABLE), datasets=studies)
    if len(studies) == 1:  # a table of one dataset has no dataset column: its title names it
        deep = replace(deep, title=f"{deep.title} ({dataset_label(studies[0])})")
    return papers + ((deep,) if studies else ()) + tuple(spec for ds in datasets if ds not in DATASETS
                                                         for spec in generic_tables(ds, ds in continual))



# ---------------------------------------------------------------------------------------------
# A paper table recomputed under that paper's own protocol (docs/protocol.md, "ESANN 2022 protocol
# variant", "IJCNN 2021 protocol variant"): its columns on protocol variants of the papers' datasets
# (params.yaml report.<paper>_protocol)

def protocol_table(table_id: str, sources: Mapping[str, str], protocol: str, protocol_id: str) -> TableSpec:
    """Paper table ``table_id`` with each paper dataset's columns computed on ``sources[dataset]``
    (itself, or a variant preprocessed as that paper did), the paper's published values beside;
    ``protocol``: the line saying which protocol it used; ``protocol_id``: its id (esann-protocol, ...)."""
    spec = table_spec(table_id)
    datasets = tuple(sources.get(ds, ds) for ds in spec.datasets)
    return replace(spec, id=protocol_id, title=f"{spec.title}, under that paper's protocol",
                   datasets=datasets, note=protocol, published_table=table_id,
                   published_as=tuple((sources.get(ds, ds), ds) for ds in spec.datasets))


def borrowed_comparisons(spec: TableSpec, comparisons: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The t-tests a protocol table shows, taken from the tables the ttest stage ran: a test depends
    on the two methods' scores alone (dataset, share, column), whichever table it was run for, so
    the same pair on the same dataset tested for another table (the paper table, a variant's
    generic table) is this table's test; each once, relabelled ``spec.id``."""
    out: dict[tuple, dict[str, Any]] = {}
    for c in comparisons:
        key = (c["dataset"], str(c["pct"]), c.get("column", "test"), c["a"], c["b"])
        if c["dataset"] in spec.datasets and (c["a"], c["b"]) in spec.pairs and key[2] in spec.tested:
            out.setdefault(key, {**c, "table": spec.id})
    return list(out.values())


def table_spec(table_id: str) -> TableSpec:
    for spec in TABLES:
        if spec.id == table_id:
            return spec
    raise KeyError(table_id)


def required_inputs(specs: Iterable[TableSpec] = TABLES) -> list[tuple[str, str]]:
    """Every (dataset, method) the tables need, in first-use order."""
    seen: dict[tuple[str, str], None] = {}
    for spec in specs:
        for ds in spec.datasets:
            for m in spec.method_ids:
                seen.setdefault((ds, m), None)
    return list(seen)


def comparison_groups(spec: TableSpec, scores: Scores
                      ) -> Iterator[tuple[str, str, str, dict[str, Sequence[float]]]]:
    """(dataset, pct, column, {method: scores}) for every marked group, methods in table order.

    Methods without scores are left out (so a partial report still compares what it has).
    """
    for ds in spec.datasets:
        for pct in PCTS:
            for col in spec.tested:
                group = {m: scores[(ds, m, pct, col)] for m in spec.method_ids
                         if (ds, m, pct, col) in scores}
                if len(group) >= 2:
                    yield ds, pct, col, group


# ---------------------------------------------------------------------------------------------
# Published values

Published = dict[str, dict[tuple[str, str], tuple[float, float | None, str]]]


def parse_published(doc: Mapping[str, Any], source: str = "paper_results.yaml") -> Published:
    """{table: {(pct, column name): (mean, std | None, mark)}} from the paper-results document."""
    out: Published = {}
    for spec in TABLES:
        if not spec.has_published:
            continue
        entry = doc.get(spec.id)
        if not isinstance(entry, Mapping) or "columns" not in entry or "rows" not in entry:
            raise DataError(f"{source}: table '{spec.id}' missing or without columns/rows")
        columns = list(entry["columns"])
        table: dict[tuple[str, str], tuple[float, float | None, str]] = {}
        for pct, row in entry["rows"].items():
            if len(row) != len(columns):
                raise DataError(f"{source}: {spec.id} row {pct} has {len(row)} cells for "
                                f"{len(columns)} columns")
            for name, cell in zip(columns, row):
                mean, std, mark = cell
                table[(str(pct), name)] = (float(mean), None if std is None else float(std),
                                           str(mark or ""))
        out[spec.id] = table
    return out


# ---------------------------------------------------------------------------------------------
# Cells

@dataclass(frozen=True)
class Cell:
    """One table cell: our mean ± population std (percent), the test's p and mark, the paper's."""

    table: str
    dataset: str
    pct: str
    method: str
    label: str
    column: str
    n: int
    mean: float | None
    std: float | None
    p_value: float | None
    mark: str
    published_mean: float | None
    published_std: float | None
    published_mark: str = ""

    @property
    def delta(self) -> float | None:
        """Our mean minus the published mean, in percentage points; None without either."""
        if self.mean is None or self.published_mean is None:
            return None
        return self.mean - self.published_mean


def mean_std_percent(scores: Sequence[float]) -> tuple[float, float]:
    """Mean and population std (ddof=0) of fractions, in percent."""
    x = np.asarray(scores, dtype=np.float64)
    return float(x.mean() * 100.0), float(x.std(ddof=0) * 100.0)


def _result(comp: Mapping[str, Any]) -> TestResult:
    return TestResult(float(comp["mean_a"]), float(comp["mean_b"]), int(comp.get("n_a", 0)),
                      int(comp.get("n_b", 0)), comp.get("t"), comp.get("p"),
                      bool(comp["significant"]))


def group_marks(comparisons: Iterable[Mapping[str, Any]], methods: Sequence[str] = ()
                ) -> dict[tuple[str, str, str, str], tuple[dict[str, Mark], dict[str, float | None]]]:
    """Per (table, dataset, pct, column): the marks and the p-value shown beside each method.

    Each comparison tests a pair (``a`` = the proposed method, ``b`` = a baseline); the marks
    follow esnfed_core.stats.pair_marks (``methods`` = table order, for ties). A baseline shows
    the p of its test against the proposed method; the proposed method shows its largest p, so
    that a bold mark reads as "p <= alpha" against every baseline.
    """
    by_group: dict[tuple[str, str, str, str], list[Mapping[str, Any]]] = {}
    for comp in comparisons:
        key = (comp["table"], comp["dataset"], str(comp["pct"]), comp.get("column", "test"))
        by_group.setdefault(key, []).append(comp)
    out = {}
    for key, comps in by_group.items():
        tests = [(c["a"], c["b"], _result(c)) for c in comps]
        ps: dict[str, float | None] = {}
        for c in comps:
            ps.setdefault(c["b"], c.get("p"))
        for a in dict.fromkeys(c["a"] for c in comps):
            defined = [c.get("p") for c in comps if c["a"] == a and c.get("p") is not None]
            ps[a] = max(defined) if defined else None
        out[key] = (pair_marks(list(methods), tests), ps)
    return out


def build_cells(spec: TableSpec, scores: Scores, comparisons: Iterable[Mapping[str, Any]],
                published: Published) -> list[Cell]:
    """Every cell of ``spec`` in layout order (dataset, method, column; then share)."""
    mine = [c for c in comparisons if c["table"] == spec.id]
    marked: dict = {}
    for family in spec.families:  # each family marked on its own, merged (they share no method)
        order = [m for m in spec.method_ids if any(m in pair for pair in family)]
        for key, (mk, ps) in group_marks((c for c in mine if (c["a"], c["b"]) in family), order).items():
            old_mk, old_ps = marked.get(key, ({}, {}))
            marked[key] = ({**old_mk, **mk}, {**old_ps, **ps})
    pub = published.get(spec.published_table or spec.id, {})
    cells = []
    for pct in PCTS:
        for ds in spec.datasets:
            for method, label in spec.methods:
                for col in spec.columns:
                    values = scores.get((ds, method, pct, col))
                    mean = std = None
                    if values is not None and len(values):
                        mean, std = mean_std_percent(values)
                    mk, ps = marked.get((spec.id, ds, pct, col), ({}, {}))
                    p_mean, p_std, p_mark = pub.get((pct, spec.published_column(ds, label, col)),
                                                    (None, None, ""))
                    cells.append(Cell(spec.id, ds, pct, method, label, col,
                                      0 if values is None else len(values), mean, std,
                                      ps.get(method), mk.get(method, ""), p_mean, p_std, p_mark))
    return cells


# ---------------------------------------------------------------------------------------------
# Agreement with the published significance pattern

@dataclass(frozen=True)
class RowAgreement:
    """One marked group (dataset, share, column) of a paper table: the bold/italic marks of the
    methods its pairs test, ours and the paper's, as (label, mark) in table order, and whether they
    agree (None: not compared, a cell without our scores or without a published value)."""

    dataset: str
    pct: str
    column: str
    ours: tuple[tuple[str, str], ...]
    paper: tuple[tuple[str, str], ...]
    agrees: bool | None


def paper_marks_table(spec: TableSpec, cells: Sequence[Cell]) -> bool:
    """Whether the paper marks significance anywhere in the table (its Tables 4 and 5 print means
    and stds only)."""
    return any(c.published_mark for c in cells if c.table == spec.id and c.column in spec.tested)


def significance_agreement(spec: TableSpec, cells: Sequence[Cell]) -> list[RowAgreement]:
    """Per marked group of ``spec``, whether our significance pattern is the paper's: the marks
    (bold = best and significant, italic = not significantly different from the best) of every
    method its pairs test, ours against the published ones. Where the paper marks nothing in the
    table, the pattern compared is which tested method has the highest mean (its mark "best", the
    others "", ours by our means and the paper's by the published ones)."""
    tested = [m for m in spec.method_ids if any(m in pair for pair in spec.pairs)]
    lookup = {(c.dataset, c.pct, c.method, c.column): c for c in cells if c.table == spec.id}
    marked = paper_marks_table(spec, cells)
    out = []
    for ds in spec.datasets:
        for pct in PCTS:
            for col in spec.tested:
                row = [lookup[(ds, pct, m, col)] for m in tested if (ds, pct, m, col) in lookup]
                if len(row) < 2:
                    continue
                if any(c.mean is None or c.published_mean is None for c in row):
                    ours = tuple((c.label, c.mark) for c in row)
                    out.append(RowAgreement(ds, pct, col, ours, tuple((c.label, c.published_mark) for c in row), None))
                    continue
                if marked:
                    ours = tuple((c.label, c.mark) for c in row)
                    paper = tuple((c.label, c.published_mark) for c in row)
                else:
                    ours = _best_marks(row, lambda c: c.mean)
                    paper = _best_marks(row, lambda c: c.published_mean)
                out.append(RowAgreement(ds, pct, col, ours, paper, ours == paper))
    return out


def _best_marks(row: Sequence[Cell], mean: Any) -> tuple[tuple[str, str], ...]:
    top = max(mean(c) for c in row)
    return tuple((c.label, "best" if mean(c) == top else "") for c in row)


# ---------------------------------------------------------------------------------------------
# Claims across the papers' tables: federated against centralised, and the spread of the retrains

MEAN_CLAIM, VARIANCE_CLAIM = "mean", "variance"
NOT_WORSE, LOWER_VARIANCE, NOT_LOWER_VARIANCE = "not-worse", "lower-variance", "not-lower-variance"


@dataclass(frozen=True)
class Claim:
    """A claim of a paper that its tables support across tables or through the spread of the
    retrains, tested on every (dataset, share) where both methods of a pair have scores.

    ``test``: :data:`MEAN_CLAIM` (the two-sided t-test of ``ttest.variant``) or
    :data:`VARIANCE_CLAIM` (the test of equal variances of ``ttest.variance_test``). ``expect``,
    what the claim says of ``a`` against ``b`` in each pair: :data:`NOT_WORSE` (a's mean not
    significantly below b's: "comparable, if not greater"), :data:`LOWER_VARIANCE` (a's spread
    significantly below b's) or :data:`NOT_LOWER_VARIANCE` (not significantly below). ``tables``:
    the tables whose cells it compares (it is tested where they are rendered)."""

    id: str
    source: str
    statement: str
    test: str
    expect: str
    pairs: tuple[tuple[str, str], ...]
    tables: tuple[str, ...]
    datasets: tuple[str, ...] = DATASETS

    @property
    def column(self) -> str:
        return "test"


CLAIMS: tuple[Claim, ...] = (
    Claim("federated-stationary", "Decentralized Plasticity, Sec. 3 (Tables 1 and 4)",
          "the performance obtained in the federated setting is comparable, if not greater than the one "
          "reported for the centralized setting", MEAN_CLAIM, NOT_WORSE, (("fedip", "ip"),),
          ("fedip", "ip-centralized")),
    Claim("federated-continual", "Decentralized Plasticity, Sec. 3 (Tables 2 and 5) and Sec. 4",
          "the performances in the federated setting are consistent with the ones of the centralized "
          "baseline; ... comparable results to ... their centralized versions", MEAN_CLAIM, NOT_WORSE,
          tuple((f"fedclip-{s}", f"clip-{s}") for s in ("naive", "replay", "joint")),
          ("fedclip", "clip-centralized")),
    Claim("ip-variance", "ESANN 2022, Sec. 4 (Table 2); Decentralized Plasticity, Sec. 2.1",
          "the centralized version of IP is able to mitigate the variance of performance with respect to "
          "bad reservoir initializations", VARIANCE_CLAIM, LOWER_VARIANCE, (("ip", "ridge"),),
          ("ip-centralized",)),
    Claim("fedip-variance", "Decentralized Plasticity, Sec. 3 (Table 1)",
          "training the reservoir via FedIP mitigates the variance in the performance in comparison with "
          "the ESNs adapted only via FedRR", VARIANCE_CLAIM, LOWER_VARIANCE, (("fedip", "incfed"),), ("fedip",)),
    Claim("fedip-variance-esann", "ESANN 2022, Sec. 4 (Table 2)",
          "[mitigating the variance of performance is] an effect that FedIP does not produce in our "
          "scenario", VARIANCE_CLAIM, NOT_LOWER_VARIANCE, (("fedip", "incfed"),), ("esann",)),
)


def claim_specs(specs: Iterable[TableSpec]) -> tuple[Claim, ...]:
    """The claims whose tables are all among ``specs`` (table_specs: the declared datasets')."""
    ids = {s.id for s in specs}
    return tuple(c for c in CLAIMS if set(c.tables) <= ids)


def claim_groups(claim: Claim, scores: Scores) -> Iterator[tuple[str, str, str, str, Sequence[float], Sequence[float]]]:
    """(dataset, pct, a, b, scores of a, scores of b) of every pair of ``claim`` with both scores."""
    for ds in claim.datasets:
        for pct in PCTS:
            for a, b in claim.pairs:
                sa, sb = scores.get((ds, a, pct, claim.column)), scores.get((ds, b, pct, claim.column))
                if sa is not None and sb is not None:
                    yield ds, pct, a, b, sa, sb


def claim_verdict(spec: Claim, record: Mapping[str, Any]) -> str:
    """"holds", "fails" or "untested" (no test: p null) for one test record of the claim ``spec``
    (the keys mean_a, mean_b, std_a, std_b, p, significant of reports/ttest.json's ``claims``)."""
    if record.get("p") is None:
        return "untested"
    if spec.test == MEAN_CLAIM:
        worse = record["significant"] and record["mean_a"] < record["mean_b"]
        return "fails" if worse else "holds"
    lower = record["significant"] and record["std_a"] < record["std_b"]
    if spec.expect == LOWER_VARIANCE:
        return "holds" if lower else "fails"
    return "fails" if lower else "holds"


def claim(claim_id: str) -> Claim:
    """The claim of CLAIMS with this id (KeyError if none)."""
    for c in CLAIMS:
        if c.id == claim_id:
            return c
    raise KeyError(claim_id)


# ---------------------------------------------------------------------------------------------
# Metrics

def metrics(scores: Scores, column: str = "test", digits: int = 6) -> dict[str, Any]:
    """{dataset: {method: {pct: mean}}} of the mean scores, rounded so the bytes are stable."""
    out: dict[str, Any] = {}
    for (ds, m, pct, col), values in sorted(scores.items()):
        if col != column or not len(values):
            continue
        out.setdefault(ds, {}).setdefault(m, {})[pct] = round(float(np.mean(values)), digits)
    return out


# ---------------------------------------------------------------------------------------------
# Communication

COMMUNICATION_METHODS: tuple[str, ...] = ("incfed", "fedavg", "fedip", "fedclip-naive",
                                          "fedclip-replay", "fedclip-joint") + (
    "deep-incfed", "deep-fedip")  # deep reservoirs: N = the total units of the layers


@dataclass(frozen=True)
class SelectionTrial:
    """What one model-selection trial recorded (its trial-XXXX.json): the bytes of its training
    messages as counted, and the sizes its validation scoring and FedAvg's other λ rounds follow
    from: N (``units``, its own config's), K training ``clients``, the λ values it scored on the
    validation users (``lambdas``; None where it scores no λ grid: a continual trial) and
    readout.bias (``bias``: N+1 readout columns)."""

    up_bytes: int
    down_bytes: int
    units: int
    clients: int
    lambdas: int | None
    bias: bool = False


@dataclass(frozen=True)
class Communication:
    """What one retrain of a federated method sent, as counted from its messages."""

    dataset: str
    pct: str
    method: str
    up_floats: int
    down_floats: int
    up_bytes: int
    down_bytes: int
    rounds: int
    clients: int
    units: int | None = None
    classes: int | None = None
    ip_rounds: int | None = None  # FedIP rounds (FedCLIP: summed over contexts)
    readouts: int | None = None   # IncFed readouts solved (FedIP: 1; FedCLIP: see split_rounds)
    inputs: int | None = None     # U, input features (the ensemble uploads each client's W_in)
    # FedCLIP: clients that trained at each context (a client without windows there sends nothing)
    # and the IP rounds run there; None when not recorded (every client then counts in every round)
    participants: tuple[int, ...] | None = None
    context_rounds: tuple[int, ...] | None = None
    # readout.bias: the readout's statistics and weights have N+1 columns (the bias entry)
    readout_bias: bool = False
    # The validation traffic a deployment would add (esnfed_core.validation_traffic), not in the
    # totals above: V, the validation users (None: unknown), and the λ values each retrain tries on
    # them (0: λ frozen, not chosen there; None: unknown)
    validation_clients: int | None = None
    lambda_grid: int | None = None
    # Model selection: the share's trial records (runs/select/<dataset>/<method>/<pct>/trial-*.json),
    # each with its own sizes (None: unknown, no finished selection or no trial record read)
    selection: tuple[SelectionTrial, ...] | None = None
    # federated.client_fraction (esnfed_core.sampling): each FedIP/FedCLIP IP round's clients were
    # sampled, max(1, ⌊f·C⌋) of the C taking part; readouts still go to all C. 1: every client.
    client_fraction: float = FULL
    # FedCLIP with federated.sampling_pool roster: the client-rounds that sent (g, b) at each context
    # (a round draws over all clients, so how many of the drawn have windows varies); None otherwise
    ip_senders: tuple[int, ...] | None = None

    def sampled(self, clients: int) -> int:
        """Clients that send in one IP round when ``clients`` take part (all of them at f = 1)."""
        return clients if self.client_fraction == FULL else sample_size(clients, self.client_fraction)

    def ip_sends(self, t: int, clients: int, rounds: int) -> int:
        """Client-rounds that sent (g, b) at context ``t`` where ``clients`` took part in ``rounds`` IP
        rounds: the recorded ``ip_senders[t]`` (roster sampling), else sampled(clients) per round."""
        return self.ip_senders[t] if self.ip_senders is not None else self.sampled(clients) * rounds

    @property
    def participations(self) -> int:
        """Client-rounds that sent something: clients × rounds, unless ``participants`` says that
        some clients sat a context out (FedCLIP: at context t, ``participants[t]`` clients in each of
        its IP rounds and readouts) or ``client_fraction`` sampled each IP round's clients."""
        per_context = _context_messages(self)
        if per_context is None:
            if self.client_fraction != FULL and splits_rounds(self.method) and self.ip_rounds is not None \
                    and self.readouts is not None:
                return self.sampled(self.clients) * self.ip_rounds + self.clients * self.readouts
            return self.clients * self.rounds
        return sum(self.ip_sends(t, p, r) + p * s for t, (p, (r, s)) in enumerate(zip(self.participants, per_context)))


def opt_int(v: Any) -> int | None:
    """A recorded size (``communication``'s units, classes, ...): None where it is not recorded."""
    return None if v is None else int(v)


# A ``communication`` entry (a saved model's .json, an assess file's share: docs/assess-contract.md):
# a federated method's message counts (esnfed_core.trial.communication), with the sizes some methods
# add (the heterogeneous ones: inputs, classes; absent or null when not recorded); null for the
# other methods. The communication table reads every federated entry's counts.
COMMUNICATION_COUNTS = ("up_floats", "down_floats", "up_bytes", "down_bytes", "rounds", "clients")
COMMUNICATION_SIZES = ("units", "classes", "ip_rounds", "readouts", "inputs")
# FedCLIP's, one integer per context (absent or null when not recorded): the clients that trained
# at the context and the IP rounds run there (esnfed_core.trial.fit_continual)
COMMUNICATION_CONTEXTS = ("participants", "context_rounds", "ip_senders")


def check_communication(key: str, value: Any, federated: bool) -> None:
    """ParameterError("<key>...: <problem>") unless ``value`` is null (only where the method is not
    federated) or an object of integer counts >= 0."""
    if value is None:
        if federated:
            raise ParameterError(f"{key}: missing (a federated method records its messages)")
        return
    if not isinstance(value, dict):
        raise ParameterError(f"{key}: expected an object of message counts or null, got {quote(value)}")
    for name in COMMUNICATION_COUNTS + COMMUNICATION_SIZES:
        v = value.get(name)
        if v is None and name in COMMUNICATION_SIZES:
            continue
        if name not in value:
            raise ParameterError(f"{key}.{name}: missing")
        if isinstance(v, bool) or not isinstance(v, int) or v < 0:
            raise ParameterError(f"{key}.{name}: expected an integer >= 0, got {quote(v)}")
    lengths = set()
    for name in COMMUNICATION_CONTEXTS:
        v = value.get(name)
        if v is None:
            continue
        if not isinstance(v, list) or not v or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0
                                                       for i in v):
            raise ParameterError(f"{key}.{name}: expected a list of integers >= 0, one per context, got {quote(v)}")
        lengths.add(len(v))
    if "client_fraction" in value:  # federated.client_fraction < 1 (absent: 1)
        CLIENT_FRACTION.check(f"{key}.client_fraction", value["client_fraction"])
    if len(lengths) > 1:
        names = [name for name in COMMUNICATION_CONTEXTS if value.get(name) is not None]
        raise ParameterError(f"{key}: {' and '.join(names)} must have one entry per context each, got "
                             f"{' and '.join(str(len(value[name])) for name in names)}")


def _base(method: str) -> str:
    """The method a communication row sends as: a deep method as its shallow one, FedCLIP's
    strategies and align's α as one ("fedclip", "align")."""
    return method.removeprefix("deep-").split("-")[0]


def splits_rounds(method: str) -> bool:
    """Whether ``method``'s rounds split into IP rounds and IncFed readouts (FedIP, FedCLIP): the
    communication table's IP rounds and readouts apply to it alone (see split_rounds)."""
    return _base(method) in ("fedip", "fedclip")


def split_rounds(method: str, rounds: int, contexts: int | None) -> tuple[int | None, int | None]:
    """(IP rounds, IncFed readouts) from the ledger's round count of a FedIP/FedCLIP retrain.

    The ledger counts distinct rounds per algorithm and the counts are summed: FedIP = its rounds
    + 1 IncFed round; FedCLIP naive/replay = IP rounds + one readout per context; FedCLIP joint =
    one IP round and one readout per loop iteration (it re-solves the readout every round).
    """
    if method in ("fedip", "deep-fedip"):
        return rounds - 1, 1
    if method == "fedclip-joint":
        return rounds // 2, rounds // 2
    if method.startswith("fedclip") and contexts is not None:
        return rounds - contexts, contexts
    return None, None


def _context_messages(c: Communication) -> list[tuple[int, int]] | None:
    """FedCLIP's (IP rounds, readouts) at each context from the recorded ``context_rounds`` (naive
    and replay: one readout per context; joint: one per IP round, it re-solves every round), or
    None when ``participants`` or ``context_rounds`` is not recorded (or they disagree in length)."""
    if c.participants is None or c.context_rounds is None or len(c.participants) != len(c.context_rounds):
        return None
    joint = c.method == "fedclip-joint"
    return [(r, r if joint else 1) for r in c.context_rounds]


def analytic_floats(c: Communication) -> tuple[str, str, int | None, int | None]:
    """PROTOCOL §3 and §5 formulas: (per-client text up, down, total up, total down).

    IncFed: up N² + N·C, down N·C, one round. FedAvg: N·C each way. FedIP and FedCLIP: 2N each
    way per IP round, plus an IncFed readout (up N² + N·C, down N·C) per readout solved. Each
    client sends in every round, except FedCLIP's where ``participants`` is recorded: at context t
    only the ``participants[t]`` clients with windows there send, in each of its rounds.
    Totals are None when a size they need (N, C, rounds, readouts) is unknown. With
    ``readout_bias`` the readout's N is N+1 (the bias entry); the IP messages keep 2N.
    """
    n, k, ncls = c.units, c.clients, c.classes
    ks = c.sampled(k)  # clients per IP round (federated.client_fraction; k at 1)
    r = None if n is None else n + int(c.readout_bias)  # the readout's columns
    rt = "(N+1)" if c.readout_bias else "N"
    base = _base(c.method)  # a deep method sends as its shallow one
    known = n is not None and ncls is not None
    if base == "local":  # heterogeneous: each client alone, nothing crosses the network
        return ("0", "0", 0, 0)
    if base == "ensemble":  # each client uploads its model once: reservoir + readout; no download
        ok = known and c.inputs is not None
        return (f"N·U+N²+2N+1 (own reservoir) + {rt}·C (readout)", "0",
                k * (n * c.inputs + n * n + 2 * n + 1 + r * ncls) if ok else None, 0 if ok else None)
    if base in ("incfed", "align"):  # align-α: IncFed over the aligned reservoirs
        return (f"{rt}²+{rt}·C", f"{rt}·C", k * (r * r + r * ncls) if known else None,
                k * r * ncls if known else None)
    if base == "fedavg":
        return (f"{rt}·C", f"{rt}·C", k * r * ncls if known else None, k * r * ncls if known else None)
    if base in ("fedip", "fedclip"):
        ip = "2N per IP round" if c.client_fraction == FULL else \
            f"2N per sampled IP round (max(1, ⌊{c.client_fraction:g}·clients⌋) per round)"
        texts = (f"{ip} + ({rt}²+{rt}·C) per readout", f"{ip} + {rt}·C per readout")
        per_context = _context_messages(c) if base == "fedclip" else None
        if per_context is not None and known:  # the clients that took part at each context
            up = sum(c.ip_sends(t, p, ip) * 2 * n + p * s * (r * r + r * ncls)
                     for t, (p, (ip, s)) in enumerate(zip(c.participants, per_context)))
            down = sum(c.ip_sends(t, p, ip) * 2 * n + p * s * r * ncls
                       for t, (p, (ip, s)) in enumerate(zip(c.participants, per_context)))
            return (*texts, up, down)
        ok = known and c.ip_rounds is not None and c.readouts is not None
        up = ks * 2 * n * c.ip_rounds + k * c.readouts * (r * r + r * ncls) if ok else None
        down = ks * 2 * n * c.ip_rounds + k * c.readouts * r * ncls if ok else None
        return (*texts, up, down)
    return ("", "", None, None)


# Methods whose validation traffic is modelled: the shared-reservoir ones (the heterogeneous methods'
# validation clients would need the clients' own reservoirs: not counted, n/a)
_VALIDATION_COUNTED = ("incfed", "fedavg", "fedip", "fedclip")


def validation_plan(c: Communication) -> ValidationPlan | None:
    """What one retrain of ``c.method`` scores on the validation users (esnfed_core.validation_traffic):
    IncFed, FedAvg and FedIP choose λ there (one evaluation of ``lambda_grid`` readouts; FedIP's
    with its (g, b)) unless λ is frozen; FedCLIP joint evaluates (g, b) and the readout after every
    IP round (its early stopping); naive and replay send nothing there. None: no validation traffic."""
    base = _base(c.method)
    if base in ("incfed", "fedavg", "fedip") and c.lambda_grid:
        return ValidationPlan(1, c.lambda_grid, base == "fedip", c.readout_bias)
    if c.method == "fedclip-joint" and c.ip_rounds is not None:
        return ValidationPlan(c.ip_rounds, 1, True, c.readout_bias)
    return None


def validation_columns(c: Communication) -> dict[str, Any]:
    """The validation-traffic columns of ``c``'s row: counted from the messages of
    :func:`esnfed_core.validation_traffic.validation_ledger` beside the formula, ``validation_match``
    whether they agree. ``validation_traffic``: True where counted, False where the retrain sends
    nothing to validation users (the cells do not apply), None where unknown (V, N, C, the λ grid or
    the rounds not recorded, or a method whose validation traffic is not modelled)."""
    out: dict[str, Any] = {k: None for k in VALIDATION_COLUMNS}
    out["validation_clients"] = c.validation_clients
    base = _base(c.method)
    known_grid = c.lambda_grid is not None or base == "fedclip"
    if base not in _VALIDATION_COUNTED or not known_grid or (c.method == "fedclip-joint" and c.ip_rounds is None):
        return {**out, "validation_traffic": None}
    plan = validation_plan(c)
    if plan is None:
        return {**out, "validation_traffic": False}
    if c.validation_clients is None or c.units is None or c.classes is None:
        return {**out, "validation_traffic": None}
    totals = validation_ledger(plan, c.validation_clients, c.units, c.classes).totals()
    a_down, a_up = analytic_validation(plan, c.validation_clients, c.units, c.classes)
    f_down, f_up = validation_formulas(plan)
    return {**out, "validation_traffic": True, "validation_evaluations": plan.evaluations,
            "validation_readouts": plan.readouts,
            "validation_down_floats": totals["down_floats"], "validation_down_bytes": totals["down_bytes"],
            "validation_up_floats": totals["up_floats"], "validation_up_bytes": totals["up_bytes"],
            "validation_formula_down": f_down, "validation_formula_up": f_up,
            "validation_analytic_down_floats": a_down, "validation_analytic_up_bytes": a_up,
            "validation_match": a_down == totals["down_floats"] and a_up == totals["up_bytes"]
            and totals["up_floats"] == 0}


def lambda_selection_columns(c: Communication) -> dict[str, Any]:
    """FedAvg's λ selection (retrain.lambda: select): the rounds of the L − 1 λ values the training
    totals leave out (esnfed_core.validation_traffic.lambda_selection_ledger), counted beside the
    formula, ``validation_lambda_match`` whether they agree. ``validation_lambda_traffic``: True where
    counted, False where the training clients send nothing per λ (every method but FedAvg, whose
    clients send statistics or (g, b) once; FedAvg with λ frozen), None where unknown."""
    out: dict[str, Any] = {k: None for k in LAMBDA_SELECTION_COLUMNS}
    base = _base(c.method)
    if base not in _VALIDATION_COUNTED or (base == "fedavg" and c.lambda_grid is None):
        return {**out, "validation_lambda_traffic": None}
    if base != "fedavg" or c.lambda_grid == 0:
        return {**out, "validation_lambda_traffic": False}
    if c.units is None or c.classes is None:
        return {**out, "validation_lambda_traffic": None}
    extra = c.lambda_grid - 1
    totals = lambda_selection_ledger(extra, c.clients, c.units, c.classes, c.readout_bias).totals()
    analytic = analytic_lambda_selection(extra, c.clients, c.units, c.classes, c.readout_bias)
    return {"validation_lambda_traffic": True, "validation_lambda_rounds": extra,
            "validation_lambda_up_floats": totals["up_floats"], "validation_lambda_down_floats": totals["down_floats"],
            "validation_lambda_up_bytes": totals["up_bytes"], "validation_lambda_down_bytes": totals["down_bytes"],
            "validation_lambda_formula": lambda_selection_formula(extra, c.readout_bias),
            "validation_lambda_analytic_floats": analytic,
            "validation_lambda_match": totals["up_floats"] == analytic == totals["down_floats"]}


# The model selection the communication table totals: IncFed, FedAvg and FedIP (deep ones too); a
# FedCLIP trial's scoring on the validation users is not modelled (esnfed_core.validation_traffic), so
# its trials are counted and their bytes not totalled (None)
_SELECTION_COUNTED = ("incfed", "fedavg", "fedip")


def trial_bytes(method: str, t: SelectionTrial, validation_clients: int, classes: int) -> int:
    """What one selection trial of ``method`` sent, up and down, at its own sizes: its training
    messages as recorded, the ``validation_clients``' scoring of its ``t.lambdas`` readouts
    (:func:`esnfed_core.validation_traffic.validation_ledger`, one evaluation; FedIP's with its (g, b))
    and FedAvg's rounds for its other λ values (``lambda_selection_ledger``: the trial's training
    totals keep the chosen λ's round only)."""
    base = _base(method)
    plan = ValidationPlan(1, t.lambdas, base == "fedip", t.bias)
    val = validation_ledger(plan, validation_clients, t.units, classes).totals()
    lam = lambda_selection_ledger(t.lambdas - 1 if base == "fedavg" else 0, t.clients, t.units, classes,
                                  t.bias).totals()
    return sum(x["up_bytes"] + x["down_bytes"] for x in (val, lam)) + t.up_bytes + t.down_bytes


def selection_columns(c: Communication) -> dict[str, Any]:
    """``selection_trials``, the share's trial records, and ``selection_bytes``, the sum over them of
    :func:`trial_bytes`, each trial at its own N, K, λ values and bias (a selection trial always
    scores λ on the validation users, whatever retrain.lambda says). None where unknown (no trial
    records, V or C unknown) or not modelled (FedCLIP's bytes, heterogeneous methods)."""
    trials = None if c.selection is None else len(c.selection)
    if not counts_selection(c.method) or c.selection is None or c.validation_clients is None or c.classes is None:
        return {"selection_trials": trials, "selection_bytes": None}
    return {"selection_trials": trials,
            "selection_bytes": sum(trial_bytes(c.method, t, c.validation_clients, c.classes) for t in c.selection)}


def counts_selection(method: str) -> bool:
    """Whether ``method``'s selection trials are totalled (IncFed, FedAvg, FedIP and their deep ones):
    each trial record must then say what λ values it scored."""
    return _base(method) in _SELECTION_COUNTED


# The validation-traffic columns of a communication row, after the training ones: the validation
# clients', FedAvg's λ selection, then the model selection's total
VALIDATION_COLUMNS = (
    "validation_clients", "validation_evaluations", "validation_readouts",
    "validation_down_floats", "validation_down_bytes", "validation_up_floats", "validation_up_bytes",
    "validation_formula_down", "validation_formula_up",
    "validation_analytic_down_floats", "validation_analytic_up_bytes", "validation_match",
)
LAMBDA_SELECTION_COLUMNS = (
    "validation_lambda_rounds", "validation_lambda_up_floats", "validation_lambda_down_floats",
    "validation_lambda_up_bytes", "validation_lambda_down_bytes", "validation_lambda_formula",
    "validation_lambda_analytic_floats", "validation_lambda_match",
)
SELECTION_COLUMNS = ("selection_trials", "selection_bytes")


def communication_rows(items: Iterable[Communication]) -> list[dict[str, Any]]:
    """One row per (dataset, pct, method): measured per client per round (per client-round that
    sent: ``participations``; None where none did: local runs no round) and total, analytic, and
    whether the two agree (``match``: None when an analytic total is unknown)."""
    rows = []
    for c in items:
        per = c.participations or None
        f_up, f_down, a_up, a_down = analytic_floats(c)
        match = None if a_up is None else (a_up == c.up_floats and a_down == c.down_floats)
        rows.append({
            "dataset": c.dataset, "pct": c.pct, "method": c.method, "units": c.units,
            "classes": c.classes, "clients": c.clients, "rounds": c.rounds,
            "ip_rounds": c.ip_rounds, "readouts": c.readouts,
            "up_floats_per_client_round": c.up_floats / per if per else None,
            "down_floats_per_client_round": c.down_floats / per if per else None,
            "up_bytes_per_client_round": c.up_bytes / per if per else None,
            "down_bytes_per_client_round": c.down_bytes / per if per else None,
            "up_floats": c.up_floats, "down_floats": c.down_floats,
            "up_bytes": c.up_bytes, "down_bytes": c.down_bytes,
            "formula_up": f_up, "formula_down": f_down,
            "analytic_up_floats": a_up, "analytic_down_floats": a_down,
            "match": match,
            "participations": c.participations, "participants": c.participants,
            "client_fraction": c.client_fraction,  # not a CSV column: the header's note names it
            **validation_columns(c), **lambda_selection_columns(c), **selection_columns(c),
        })
    return rows


def participation_notes(rows: Iterable[Mapping[str, Any]]) -> list[str]:
    """Header lines for a communication table where some client sat a context out (FedCLIP, a
    client without windows there) or each IP round sampled its clients (federated.client_fraction):
    none where every client sent in every round (the papers')."""
    rows = list(rows)
    sampled = [r for r in rows if r.get("client_fraction", FULL) != FULL]
    partial = [r for r in rows if r.get("participations") != r["clients"] * r["rounds"] and r not in sampled]
    notes = [(partial, lambda r: f"clients per context {', '.join(map(str, r['participants']))}",
              "A client without windows at a context sits it out and sends nothing there, so per client per "
              "round divides by the client-rounds that sent and the analytic totals count, at each context, "
              "the clients that took part (the assess file's communication.participants)"),
             (sampled, lambda r: f"fraction {r['client_fraction']:g}",
              "federated.client_fraction < 1: each IP round went to max(1, ⌊fraction·clients⌋) clients sampled "
              "uniformly (readouts to every client), so per client per round divides by the client-rounds that "
              "sent and the analytic totals count the sampled clients")]
    return [f"{lead}: " + "; ".join(f"{dataset_label(r['dataset'])} {r['method']} {r['pct']}%: {what(r)}, "
                                    f"{r['participations']} client-rounds of {r['clients'] * r['rounds']}"
                                    for r in cases)
            for cases, what, lead in notes if cases]


# ---------------------------------------------------------------------------------------------
# Heterogeneous reservoirs: methods against the ensemble

HETERO_TABLE = "heterogeneous"
HETERO_REFERENCE = "ensemble"  # every method is t-tested against it
HETERO_MARKS = {"better": "▲", "worse": "▼"}


def hetero_spec(methods: Sequence[str], datasets: Sequence[str] = DATASETS) -> TableSpec:
    """The heterogeneous table's methods, each tested against the ensemble (which must be one), on
    ``datasets`` (params.yaml study_datasets: where the heterogeneous reservoirs run)."""
    return TableSpec(HETERO_TABLE, "Heterogeneous reservoirs: local, ensemble, structural alignment "
                     "against homogeneous IncFed", tuple(datasets), tuple((m, m) for m in methods),
                     pairs=tuple((m, HETERO_REFERENCE) for m in methods if m != HETERO_REFERENCE))


def hetero_marks(comparisons: Iterable[Mapping[str, Any]]) -> dict[tuple[str, str, str], tuple[str, float | None]]:
    """(dataset, pct, method) -> (mark, p) of each method's test against the ensemble: "better" /
    "worse" when significant (by the sign of the mean difference), "" otherwise."""
    out = {}
    for c in comparisons:
        if c.get("table") != HETERO_TABLE:
            continue
        mark = ""
        if c["significant"]:
            mark = "better" if c["mean_a"] > c["mean_b"] else "worse"
        out[(c["dataset"], str(c["pct"]), c["a"])] = (mark, c.get("p"))
    return out


def hetero_cells(scores: Scores, comparisons: Iterable[Mapping[str, Any]], datasets: Sequence[str],
                 pcts: Sequence[str], methods: Sequence[str]) -> list[Cell]:
    """One cell per (share, dataset, method): mean ± std over retrains (percent) and the mark of
    the method's t-test against the ensemble."""
    marks = hetero_marks(comparisons)
    cells = []
    for pct in pcts:
        for ds in datasets:
            for m in methods:
                values = scores.get((ds, m, pct, "test"))
                mean = std = None
                if values is not None and len(values):
                    mean, std = mean_std_percent(values)
                mark, p = marks.get((ds, pct, m), ("", None))
                cells.append(Cell(HETERO_TABLE, ds, pct, m, m, "test", 0 if values is None else len(values),
                                  mean, std, p, mark, None, None))
    return cells
