"""reports/tables/continual-metrics.md/.csv: what the continual methods' accuracy matrices say
about forgetting and transfer (esnfed_core.metrics.continual_metrics: ACC, mean forgetting, BWT,
FWT), per dataset, method and share, mean ± population std over the retrains (PROTOCOL §6)."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np

from esnfed_core.method import CONTINUAL_METHODS
from esnfed_core.metrics import CONTINUAL_METRICS, continual_metrics
from esnfed_stages.report.cells import mean_std_percent
from esnfed_stages.report.table_specs import dataset_label
from esnfed_core.vocabulary import PCTS
from esnfed_stages.report.report_figures import matrices, method_label
from esnfed_stages.report.tables import format_value, to_csv
from esnfed_stages.report.ttest import Inputs

TABLE = "continual-metrics"
TITLE = "forgetting and transfer of the continual methods over the contexts"
COLUMNS = {"acc": "ACC", "forgetting": "forgetting", "bwt": "BWT", "fwt": "FWT"}
CSV_COLUMNS = ("dataset", "pct", "method", "metric", "n", "mean", "std")
DEFINITIONS = [
    "R[i, j] = accuracy of the model after context i on the test data of context j (the accuracy "
    "matrix of the assess file, contexts from 0 to T−1); a metric per retrain, then mean ± population "
    "std over the retrains, ×100 (percentage points), two decimals",
    "ACC = mean over j of R[T−1, j]: the final model's accuracy, each context weighing the same "
    "(Lopez-Paz & Ranzato 2017; the fedclip and clip-centralized tables pool the contexts' time steps "
    "instead: stream accuracy)",
    "forgetting = mean over j < T−1 of max(R[j..T−2, j]) − R[T−1, j]: the best accuracy a context had "
    "before the last minus its final one (Chaudhry et al. 2018); positive = forgotten",
    "BWT = mean over j < T−1 of R[T−1, j] − R[j, j]: the final accuracy on a context minus that right "
    "after learning it (Lopez-Paz & Ranzato 2017); negative = forgotten; unlike forgetting it counts "
    "a later gain on a context as transfer",
    "FWT = mean over i ≥ 1 of R[i−1, i] − 1/C: the accuracy on a context of the model that has not "
    "yet trained on it, against chance (C classes: the expected accuracy of the random baseline of "
    "PROTOCOL §3, a model that learnt nothing); n/a where C is unknown",
    "A context without test data is left out of each mean; one context: only ACC",
]


def rows(inputs: Inputs, datasets: Sequence[str], classes: Mapping[str, int | None]) -> list[dict[str, Any]]:
    """A row per dataset of ``datasets``, continual method and share: n (retrains) and each metric's
    (mean, std) in percent, None where the method has no matrices there (or a metric is undefined);
    ``classes``: each dataset's C (FWT's chance level; None: unknown)."""
    out = []
    for ds in datasets:
        c = classes.get(ds)
        chance = 1.0 / c if c else float("nan")
        for method in CONTINUAL_METHODS:
            for pct in PCTS:
                stack = matrices(inputs, ds, method, pct)
                per = [continual_metrics(r, chance) for r in stack] if stack is not None else []
                row: dict[str, Any] = {"dataset": ds, "method": method, "pct": pct, "n": len(per)}
                for metric in CONTINUAL_METRICS:
                    values = [p[metric] for p in per]
                    row[metric] = mean_std_percent(values) if values and not np.isnan(values).any() else None
                out.append(row)
    return out


def table_name(dataset: str | None = None) -> str:
    """continual-metrics (the papers' datasets) or <dataset>-continual-metrics (one of your own, so
    the papers' table stays as it is whatever else is declared, as <dataset>-continual beside fedclip)."""
    return TABLE if dataset is None else f"{dataset}-{TABLE}"


def markdown(table: Sequence[Mapping[str, Any]], header: Sequence[str], classes: Mapping[str, int | None],
             dataset: str | None = None) -> str:
    """The table: a row per dataset, method and share, a column per metric (COLUMNS); ``dataset``:
    the table of one of your own (table_name)."""
    shown = list(dict.fromkeys(r["dataset"] for r in table))
    chance = "; ".join(f"{dataset_label(ds)} C = {classes[ds]}, chance {100.0 / classes[ds]:.2f}%"
                       for ds in shown if classes.get(ds))
    notes = [header[0], *DEFINITIONS, *([f"FWT's chance level: {chance}"] if chance else []), *header[1:]]
    title = TITLE if dataset is None else f"{dataset_label(dataset)}: {TITLE}"
    lines = [f"# {table_name(dataset)}: {title}", "", *(f"- {h}" for h in notes)]
    lines += ["", "| dataset | method | train users | " + " | ".join(COLUMNS.values()) + " |",
              "|---|---|---|" + "---:|" * len(COLUMNS)]
    for r in table:
        cells = [format_value(*(r[m] or (None, None))) for m in COLUMNS]
        lines.append(f"| {dataset_label(r['dataset'])} | {method_label(r['method'])} | {r['pct']}% | "
                     + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def csv(table: Sequence[Mapping[str, Any]]) -> str:
    """One line per row and metric: mean and std in percentage points, empty where n/a."""
    return to_csv(({"dataset": r["dataset"], "pct": r["pct"], "method": r["method"], "metric": m, "n": r["n"],
                    "mean": r[m][0] if r[m] else None, "std": r[m][1] if r[m] else None}
                   for r in table for m in CONTINUAL_METRICS), CSV_COLUMNS)
