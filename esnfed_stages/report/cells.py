"""A table's cells from the retrains' scores and the t-tests: mean ± population std ×100, the
bold/italic marks of the tested pairs, the published values and whether the significance pattern
agrees with the paper's; the heterogeneous table's ▲/▼ cells; the metrics file's means. Scores are
fractions in [0, 1]; cells are in percent. Rendering is esnfed_stages/report/tables.py's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from esnfed_core.stats import Mark, TestResult, pair_marks
from esnfed_core.vocabulary import DATASETS, PCTS
from esnfed_stages.report.table_specs import Published, Scores, TableSpec


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
