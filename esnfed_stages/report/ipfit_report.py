"""reports/tables/ip-fit.md/.csv: how close the IP methods bring the reservoir's activations to the
IP target N(μ, σ²) (the DP paper's first assessment, §3), against the same reservoir without IP:
the KL divergences assess records in each activation entry (esnfed_stages/experiment/assess.py), mean ±
population std over the retrains (PROTOCOL §6)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from esnfed_core.errors import DataError
from esnfed_core.method import CONTINUAL_METHODS
from esnfed_stages.report.table_specs import dataset_label
from esnfed_core.vocabulary import PCTS
from esnfed_stages.report.report_figures import ip_target, method_label
from esnfed_stages.report.tables import NA, to_csv
from esnfed_stages.report.ttest import Inputs

TABLE = "ip-fit"
TITLE = "fit of the reservoir's activations to the IP target N(μ, σ²), with and without IP"
METHODS = ("ip", "fedip", *CONTINUAL_METHODS, "deep-fedip")  # the methods that train IP
# The KL divergences of an activation entry, as the columns name them: the trained reservoir's
# (a continual method's after the last context) and the plain one's (g = 1, b = 0).
COLUMNS = {"kl": "KL with IP", "no_ip_kl": "KL without IP", "unit_kl": "per-unit KL with IP",
           "no_ip_unit_kl": "per-unit KL without IP"}
CSV_COLUMNS = ("dataset", "pct", "method", "mu", "sigma", "column", "n", "mean", "std")
DEFINITIONS = [
    "KL(q ‖ N(μ, σ²)) in nats, q the post-leak states x(t) on every test user and context (PROTOCOL §6, the "
    "values the activation figures draw, each context weighing by its time steps), σ the method's "
    "selected target std, μ params.yaml plasticity.mu; q binned on assess.activation_bins bins over "
    "[−1, 1], against the Gaussian's mass in each bin (esnfed_core.metrics.gaussian_kl)",
    "KL: all units' values together (the density the figures draw); per-unit KL: each unit's KL "
    "averaged over the units, what IP minimises unit by unit (DP eq. 3); with IP: the trained "
    "reservoir (a continual method's after the last context); without IP: the same weights and leak "
    "with g = 1, b = 0, the plain ESN of the selected config",
    "IP fits h(t) = tanh(g·x_net + b) to the target; x(t) is its leaky average, narrower where the leak "
    "is below 1, so a KL of x does not reach 0 even for a perfect fit of h: read the two columns against "
    "each other; a KL with IP below the one without = IP moved the activations toward the target",
    "Mean ± population std over the retrains, three decimals",
]


def _fit(inputs: Inputs, ds: str, method: str, pct: str) -> dict[str, Any] | None:
    """The fit of one share's activation entry: ``mu``, ``sigma``, n and each COLUMNS key's values
    over the retrains (None where the file does not record it: written before it was recorded);
    None without an activation entry. A malformed entry is a DataError naming the file and key."""
    doc = inputs.docs.get((ds, method))
    act = (doc["pcts"].get(pct) or {}).get("activation") if doc else None
    if not act:
        return None
    where = f"{inputs.paths[(ds, method)]}: pcts.{pct}.activation"
    target = ip_target(act, where)
    out: dict[str, Any] = {"mu": None, "sigma": None, "n": 0} if target is None else \
        {"mu": target[0], "sigma": target[1], "n": 0}
    for key in COLUMNS:
        if act.get(key) is None or target is None:
            out[key] = None
            continue
        try:
            values = np.asarray(act[key], dtype=np.float64)  # null (no data) -> NaN
        except (TypeError, ValueError):
            values = np.zeros((0, 0))
        per_model = not key.startswith("no_ip_")
        if values.ndim != (2 if per_model else 1) or not len(values) or (per_model and not values.shape[1]):
            raise DataError(f"{where}.{key}: expected a number per retrain{' and model' if per_model else ''}; "
                            "rerun `esnfed assess`")
        out[key] = values[:, -1] if per_model else values
        out["n"] = len(values)
    return out


def rows(inputs: Inputs, datasets: Sequence[str]) -> list[dict[str, Any]]:
    """A row per dataset with activation entries (assess.activation_datasets), IP method and share:
    the target, n and each COLUMNS key's (mean, std), None where n/a."""
    out = []
    for ds in datasets:
        fits = {(m, pct): _fit(inputs, ds, m, pct) for m in METHODS for pct in PCTS}
        if all(f is None for f in fits.values()):
            continue
        for m in METHODS:
            if (ds, m) not in inputs.docs and not any(p.stem == m and p.parent.name == ds for p in inputs.missing):
                continue  # not a method of this run's tables (deep-fedip without study_datasets)
            for pct in PCTS:
                fit = fits[(m, pct)] or {}
                row: dict[str, Any] = {"dataset": ds, "method": m, "pct": pct, "mu": fit.get("mu"),
                                       "sigma": fit.get("sigma"), "n": fit.get("n", 0)}
                for key in COLUMNS:
                    v = fit.get(key)
                    row[key] = (float(v.mean()), float(v.std())) if v is not None and not np.isnan(v).any() else None
                out.append(row)
    return out


def _value(v: tuple[float, float] | None) -> str:
    return NA if v is None else f"{v[0]:.3f} ± {v[1]:.3f}"


def markdown(table: Sequence[dict[str, Any]], header: Sequence[str]) -> str:
    lines = [f"# {TABLE}: {TITLE}", "", *(f"- {h}" for h in [header[0], *DEFINITIONS, *header[1:]]), "",
             "| dataset | method | train users | μ | σ | " + " | ".join(COLUMNS.values()) + " |",
             "|---|---|---|---:|---:|" + "---:|" * len(COLUMNS)]
    for r in table:
        target = [NA, NA] if r["sigma"] is None else [f"{r['mu']:g}", f"{r['sigma']:g}"]
        label = r["method"] if r["method"].startswith("deep-") else method_label(r["method"])  # as the deep table
        lines.append(f"| {dataset_label(r['dataset'])} | {label} | {r['pct']}% | "
                     + " | ".join(target + [_value(r[k]) for k in COLUMNS]) + " |")
    return "\n".join(lines) + "\n"


def csv(table: Sequence[dict[str, Any]]) -> str:
    """One line per row and KL column (nats), empty where n/a."""
    return to_csv(({"dataset": r["dataset"], "pct": r["pct"], "method": r["method"], "mu": r["mu"],
                    "sigma": r["sigma"], "column": k, "n": r["n"], "mean": r[k][0] if r[k] else None,
                    "std": r[k][1] if r[k] else None} for r in table for k in COLUMNS), CSV_COLUMNS)
