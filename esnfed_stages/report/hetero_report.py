"""The heterogeneous-reservoir outputs of `esnfed report` (docs/heterogeneous.md):
reports/tables/heterogeneous.md/.csv (datasets × shares × methods, mean ± std over retrains, marks
of each method's t-test against the ensemble from reports/ttest.json), the figure of test accuracy
against α with the ensemble, local and homogeneous IncFed as horizontal bands
(reports/figures/heterogeneous-alpha.png) with its DVC plots CSV, and the communication items of
the new methods (measured from each retrain's message ledger)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from esnfed_core.errors import DataError
from esnfed_core.communication import Communication, opt_int
from esnfed_stages.report.cells import HETERO_MARKS, HETERO_REFERENCE, HETERO_TABLE, Cell, hetero_spec
from esnfed_stages.report.table_specs import TableSpec, dataset_label, required_inputs
from esnfed_core.method import Method
from esnfed_core.quote import failure
from esnfed_core.vocabulary import DATASETS, PCTS
from esnfed_stages.report import figures
from esnfed_stages.data._datasets import classes_of
from esnfed_stages.params.experiment import BudgetSpec
from esnfed_stages.report.tables import CSV_COLUMNS, NA, format_value, to_csv
from esnfed_stages.report.ttest import VARIANT_TEXT, Inputs, load_inputs
from esnfed_stages.layout import alpha_column

CSV_EXTRA = ("client_std",)


def load(assess_dir: str | Path, methods: Sequence[str], budget: BudgetSpec | None = None,
         settings: Mapping[str, Any] | None = None, datasets: Sequence[str] = DATASETS) -> Inputs:
    """The assess files of the table's methods on ``datasets`` (params.yaml study_datasets; absent
    ones listed as missing, never an error), each assessed under params.yaml's ``budget`` when given
    and, where a file records them, with its heterogeneity ``settings`` (``HeteroParams.record``:
    those the table's header prints)."""
    return load_inputs(assess_dir, required_inputs([hetero_spec(methods, datasets)]), allow_missing=True,
                       partial=True, budget=budget, expected=settings)


def run_spec(datasets: Sequence[str]) -> TableSpec:
    """What the table header's run line summarises: the reference IncFed's assess files on
    ``datasets`` (every share; the heterogeneous methods hold only their budget's shares)."""
    return TableSpec(HETERO_TABLE, "", tuple(datasets), (("incfed", "incfed"),), has_published=False)


def shares(inputs: Inputs, methods: Sequence[str]) -> list[str]:
    """The shares some heterogeneous method was assessed on (the reference incfed alone does not add rows)."""
    found = {p for (ds, m), doc in inputs.docs.items() if Method.parse(m).heterogeneous for p in doc["pcts"]}
    return [p for p in PCTS if p in found]


def client_spread(inputs: Inputs, ds: str, method: str, pct: str) -> float | None:
    """Mean over retrains of the std over clients of the clients' test accuracy (percent); None
    for the ensemble (one model serves every client: its file's client accuracies are its members'
    own, each alone, not the ensemble's) and for methods without them (incfed)."""
    if Method.parse(method).family.ensemble:
        return None
    doc = inputs.docs.get((ds, method))
    rows = (doc or {}).get("pcts", {}).get(pct, {}).get("client_test_accuracy")
    if not rows:
        return None
    try:
        return float(np.mean([np.std(np.asarray(r, np.float64)) for r in rows]) * 100.0)
    except (TypeError, ValueError):
        raise DataError(f"{inputs.paths[(ds, method)]}: pcts.{pct}.client_test_accuracy must be "
                        "retrains × clients accuracies") from None


def render(cells: Sequence[Cell], inputs: Inputs, methods: Sequence[str], pcts: Sequence[str],
           header: Sequence[str], datasets: Sequence[str] = DATASETS) -> tuple[str, str]:
    """(Markdown, CSV) of the table: a row per dataset of ``datasets`` and share, a column per method."""
    lookup = {(c.dataset, c.pct, c.method): c for c in cells}
    lines = ["# heterogeneous: when reservoirs differ (local, ensemble, structural alignment, IncFed)", ""]
    lines += [f"- {h}" for h in header]
    lines += ["", "| dataset | train users | " + " | ".join(methods) + " |",
              "|---|---|" + "|".join("---:" for _ in methods) + "|"]
    spread = ["", "Spread over clients (std of the clients' test accuracies, mean over retrains; "
              "local and align-α score each client through its own reservoir; ensemble and incfed: "
              "one model serves every client, no spread over clients, n/a):", "",
              "| dataset | train users | " + " | ".join(methods) + " |",
              "|---|---|" + "|".join("---:" for _ in methods) + "|"]
    rows = []
    for ds in datasets:
        for pct in pcts:
            cells_md, spread_md = [], []
            for m in methods:
                c = lookup[(ds, pct, m)]
                text = format_value(c.mean, c.std)
                if c.mark:
                    text += f" {HETERO_MARKS[c.mark]}"
                cells_md.append(text)
                sp = client_spread(inputs, ds, m, pct)
                spread_md.append(NA if sp is None else f"{sp:.2f}")
                rows.append({**c.__dict__, "client_std": sp})
            label = dataset_label(ds)
            lines.append(f"| {label} | {pct}% | " + " | ".join(cells_md) + " |")
            spread.append(f"| {label} | {pct}% | " + " | ".join(spread_md) + " |")
    csv_text = to_csv(rows, CSV_COLUMNS + CSV_EXTRA)
    return "\n".join(lines + spread) + "\n", csv_text


def alpha_figure_and_plot(inputs: Inputs, alphas: Sequence[float], pcts: Sequence[str],
                          datasets: Sequence[str] = DATASETS) -> tuple[bytes, str]:
    """Test accuracy against α (align, mean ± std over retrains) per dataset of ``datasets`` and
    share, with the ensemble, local and homogeneous IncFed as horizontal bands; and the DVC plots
    CSV of the means."""
    panels, rows = [], {a: {"alpha": a} for a in alphas}
    for ds in datasets:
        for pct in pcts:
            def scores(method: str) -> np.ndarray | None:
                values = inputs.scores.get((ds, method, pct, "test"))
                return None if values is None else np.asarray(values, np.float64) * 100.0

            line = [(a, scores(Method("align", alpha=a).id)) for a in alphas]
            bands = {m: scores(m) for m in (HETERO_REFERENCE, "local", "incfed")}
            panels.append((f"{dataset_label(ds)}, {pct}% training users", line, bands))
            for a, v in line:
                if v is not None:
                    rows[a][alpha_column(ds, pct)] = round(float(v.mean()), 6)
    columns = ["alpha"] + [alpha_column(ds, p) for ds in datasets for p in pcts]
    return figures.alpha_bands("Structural alignment: test accuracy against α (mean ± std over retrains)",
                               panels, cols=len(pcts)), to_csv(list(rows.values()), columns)


def communication_items(inputs: Inputs, methods: Sequence[str], datasets: Sequence[str] = DATASETS,
                        user_classes: Mapping[str, int] | None = None) -> list[Communication]:
    """The measured messages of every heterogeneous method and share on ``datasets`` (incfed is in
    the main list); C where a file does not record it: see classes_of."""
    items = []
    for ds in datasets:
        for method in methods:
            doc = inputs.docs.get((ds, method))
            if doc is None or not Method.parse(method).heterogeneous:
                continue
            for pct in (p for p in PCTS if p in doc["pcts"]):  # the shares ttest.load_assess checked
                entry = doc["pcts"][pct]
                comm = entry["communication"]  # a federated method's counts
                try:
                    items.append(Communication(
                        ds, pct, method, int(comm["up_floats"]), int(comm["down_floats"]),
                        int(comm["up_bytes"]), int(comm["down_bytes"]), int(comm["rounds"]),
                        int(comm["clients"]), units=int((entry.get("config") or {})["units"]),
                        classes=opt_int(comm["classes"] if "classes" in comm else classes_of(ds, user_classes)),
                        inputs=opt_int(comm.get("inputs")),
                        readout_bias=comm.get("readout_bias") is True))  # readout.bias: N+1 columns
                except (KeyError, TypeError, ValueError) as exc:
                    raise DataError(f"{inputs.paths[(ds, method)]}: pcts.{pct}.communication is "
                                    f"malformed ({failure(exc)})") from None
    return items


COMMUNICATION_NOTE = (
    "Heterogeneous methods (docs/heterogeneous.md): local sends nothing; ensemble: each client "
    "uploads its own model once, reservoir N·U+N²+2N+1 (W_in, Ŵ, g, b, leak) and readout N·C, and "
    "downloads nothing (the combination runs where the models are; inference traffic is not "
    "counted); align-α: IncFed over the aligned reservoirs, N²+N·C up and N·C down (the target "
    "reservoir's one-off broadcast is excluded, as every method's)")


def header(base: Sequence[str], ttest_doc: Mapping[str, Any], hp_text: str) -> list[str]:
    return list(base[:1]) + [
        hp_text,
        "Cells: mean ± population std over the retrains of the test accuracy, ×100; ensemble = "
        "the ensemble's accuracy; local and align-α = the mean over clients, each client through "
        "its own reservoir; incfed = homogeneous IncFed, the reference where every client shares one "
        "broadcast reservoir",
        f"Significance: every method against the ensemble, {VARIANT_TEXT[ttest_doc['variant']]}, two-sided, "
        f"p <= {ttest_doc.get('alpha')}: ▲ significantly better, ▼ significantly worse, no mark: "
        "not significantly different (or not tested)",
    ] + list(base[3:])
