"""The sampling study's table of `esnfed report` (opt-in ``privacy.sampling_study``, stage
`privacy-sampling`): runs/privacy/sampling/<dataset>/<fraction>.json -> reports/tables/privacy-sampling.md/.csv,
a row per (dataset, ε, client fraction f, accounting) with z, σ of a round's sum and the test
accuracy, each ε's DP-FedIP row of the privacy stage's own document (runs/privacy/<dataset>.json,
the pipeline's f) first."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from esnfed_core.errors import DataError
from esnfed_core.privacy import AMPLIFICATIONS, auto_delta
from esnfed_core.quote import quote
from esnfed_core.sampling import sample_size
from esnfed_stages.report.table_specs import dataset_label
from esnfed_stages import provenance
from esnfed_stages.params.privacy import STUDY_METHOD
from esnfed_stages.layout import fraction_name, sampling_path
from esnfed_stages.report.privacy_report import (SEEDED, TOP_LEVEL, configuration, configured, is_auto_delta,
                                                 check_epsilons, delta_text, read_opt_in)

NAME = "privacy-sampling"
COLUMNS = ("dataset", "epsilon", "client_fraction", "sample_size", "n_users", "accounting", "from",
           "noise_multiplier", "sigma_round", "mean", "std", "n")
MAIN = "privacy stage"   # the row read from runs/privacy/<dataset>.json
STUDY = "sampling study"  # a row read from runs/privacy/sampling/<dataset>/<fraction>.json
NO_MECHANISM = "–"  # the accounting of an ε = inf row
Study = dict[tuple[str, str], dict[str, Any]]  # (dataset, fraction name) -> document


def load(privacy_dir: str | Path, datasets: Sequence[str], fractions: Sequence[float | int],
         expected: Mapping[str, Any] | None = None, allow_missing: bool = False) -> tuple[Study, list[Path]]:
    """{(dataset, fraction name): document} of ``datasets`` at each of ``fractions`` (params.yaml
    privacy.sampling_study.fractions), each checked (:func:`_check`) and computed with ``expected``
    (``PrivacyParams.record(..., study=True)``); and the paths not there: an error naming the first
    and its command unless ``allow_missing`` (their rows left out, listed in the header)."""
    docs: Study = {}
    absent: list[Path] = []
    for ds in datasets:
        for f in fractions:
            name = fraction_name(f)
            path = sampling_path(privacy_dir, ds, name)
            command = f"`esnfed privacy --dataset {ds} --sampling {name}`"
            doc = read_opt_in(path, command, absent, allow_missing)
            if doc is None:
                continue
            _check(path, doc, ds, f, command)
            provenance.check(path, configured(doc), expected or {}, command, TOP_LEVEL)
            docs[(ds, name)] = doc
    return docs, absent


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _check(path: Path, doc: Any, dataset: str, fraction: float | int, command: str) -> None:
    """The fields the table reads, each of its type and of this file's dataset and fraction: else a
    DataError naming the key and ``command``."""
    def bad(key: str, expected: str, value: Any) -> DataError:
        return DataError(f"{path}: {key}: expected {expected}, got {quote(value)} (rerun {command})")

    if not isinstance(doc, dict) or not isinstance(doc.get("accountings"), dict) or not doc["accountings"]:
        raise DataError(f"{path}: not a sampling study output (no 'accountings' object; rerun {command})")
    if doc.get("dataset") != dataset:
        raise bad("dataset", quote(dataset), doc.get("dataset"))
    if not _number(doc.get("client_fraction")) or float(doc["client_fraction"]) != float(fraction):
        raise bad("client_fraction", f"{fraction}", doc.get("client_fraction"))
    for key in ("sample_size", "n_users"):
        if isinstance(doc.get(key), bool) or not isinstance(doc.get(key), int) or doc[key] < 1:
            raise bad(key, "an integer >= 1", doc.get(key))
    for key in ("delta", "ip_clip"):
        if not _number(doc.get(key)) or doc[key] <= 0:
            raise bad(key, "a finite number > 0", doc.get(key))
    if is_auto_delta(doc) and doc["delta"] != auto_delta(doc["n_users"]):  # e.g. the former rule δ = 1/n²
        raise bad("delta", f"min(1e-5, 1/(10·{doc['n_users']})) = {auto_delta(doc['n_users']):g} of "
                  "privacy.delta: auto", doc["delta"])
    for acc, cells in doc["accountings"].items():
        if acc not in AMPLIFICATIONS:
            raise bad("accountings", f"keys among {', '.join(AMPLIFICATIONS)}", acc)
        check_epsilons(path, f"accountings.{acc}", cells, bad, ("noise_multiplier", "sigma_round"))


def _row(ds: str, eps: str, doc: Mapping[str, Any], fraction: Any, size: int, accounting: str, source: str,
         z: float, sigma: float, accs: Sequence[float]) -> dict[str, Any]:
    acc = 100 * np.asarray(accs, np.float64)
    return {"dataset": ds, "epsilon": eps, "client_fraction": fraction, "sample_size": size,
            "n_users": doc["n_users"], "accounting": accounting, "from": source, "noise_multiplier": z,
            "sigma_round": sigma, "mean": float(acc.mean()), "std": float(acc.std()),  # population std (PROTOCOL §6)
            "n": int(acc.size)}


def rows(main: Mapping[str, Mapping[str, Any]], study: Study) -> list[dict[str, Any]]:
    """Per dataset of ``study`` and ε: the privacy stage's DP-FedIP row (``main``, its own f and
    accounting; left out where it has no FedIP), then the study's, fraction by fraction as
    params.yaml lists them, each accounting in its document's order. ε = inf (no mechanism, the
    same trial under every accounting): one row per fraction, accounting NO_MECHANISM."""
    out = []
    for ds in dict.fromkeys(ds for ds, _ in study):
        docs = [d for (name, _), d in study.items() if name == ds]
        own = main.get(ds, {})
        fedip = own.get("methods", {}).get(STUDY_METHOD, {}).get("epsilons", {})
        for eps in sorted({e for d in docs for cells in d["accountings"].values() for e in cells}, key=float):
            finite = math.isfinite(float(eps))
            if eps in fedip:
                z = fedip[eps]["noise_multiplier"]
                f = own.get("client_fraction", 1)
                out.append(_row(ds, eps, own, f, sample_size(own["n_users"], f),
                                own.get("amplification", "none") if finite else NO_MECHANISM, MAIN, z,
                                z * own["ip_clip"] if z is not None else None, fedip[eps]["test_accuracy"]))
            for d in docs:
                cells = [(acc, c[eps]) for acc, c in d["accountings"].items() if eps in c]
                for acc, c in cells if finite else [(NO_MECHANISM, cells[0][1])] if cells else []:
                    out.append(_row(ds, eps, d, d["client_fraction"], d["sample_size"], acc, STUDY,
                                    c["noise_multiplier"], c["sigma_round"], c["test_accuracy"]))
    return out


def render(main: Mapping[str, Mapping[str, Any]], study: Study, run: Sequence[str] = (), stamp: str = "",
           absent: Sequence[Path] = ()) -> dict[str, bytes]:
    """{"privacy-sampling.md", "privacy-sampling.csv"}; empty without study documents (nor missing
    ones). ``main``: the privacy stage's documents by dataset (privacy_report.load), whose FedIP
    row each ε shows first; ``run``: the header's lines on what was run; ``stamp``: its date and
    versions line; ``absent``: study documents not there (:func:`load` with allow_missing)."""
    if not study and not absent:
        return {}
    table = rows(main, study)
    first = next(iter(study.values()), {})
    accountants = {acc: text for d in study.values() for acc, text in d.get("accountants", {}).items()}
    lines = [
        "# Test accuracy (%) of DP-FedIP under client sampling: the privacy stage's row and the sampling study's "
        "(privacy.sampling_study)",
        "",
        *(f"- {line}" for line in run),
        "- Each round: m = max(1, ⌊f·K⌋) of the K training clients drawn without replacement, their (Δg, Δb) "
        "clipped to ip_clip (L2), N(0, σ²) added to the sum, divided by the public m (f = 1: every client, / K); "
        "the IncFed release on every client (σ_release in the study's JSON); ε = inf: no mechanism",
        f"- From: `{MAIN}` = runs/privacy/<dataset>.json's FedIP (the pipeline's federated.client_fraction), "
        f"`{STUDY}` = runs/privacy/sampling/<dataset>/<f>.json; the selected FedIP config of "
        f"{first.get('pct', '100')}% training users (selected at the pipeline's fraction) retrained at each f",
        "- Neighbouring relation: user-level (accounting `none`: add/remove one user = one client; `sampling`: "
        "replace-one user)",
        *(f"- Accounting `{acc}`: {text}" for acc, text in accountants.items()),
        f"- ε: the rows' (ε = inf: no mechanism); {configuration(study.values())}",
        f"- {SEEDED}",
        "- z = noise multiplier (σ / clip), σ_round = z·ip_clip; f = 1 has no sampled round (accounting none alone)",
        "- δ = " + ", ".join(f"{dataset_label(ds)} {delta_text(d['delta'])}"
                             for ds, d in {ds: d for (ds, _), d in study.items()}.items()),
        "- Cells: test accuracy, mean ± population std over the retrains (PROTOCOL §6), ×100, two decimals",
        *([f"- {stamp}"] if stamp else []),
        "- Missing inputs: " + (", ".join(map(str, absent)) or "none"),
        "",
        "| dataset | ε | f | m / K | accounting | from | z | σ_round | test accuracy |",
        "|---|---:|---:|---:|---|---|---:|---:|---:|",
    ]
    for r in table:
        finite = math.isfinite(float(r["epsilon"]))
        z = f"{r['noise_multiplier']:.3f}" if finite and r["noise_multiplier"] is not None else "–"
        sigma = f"{r['sigma_round']:.4g}" if finite and r["sigma_round"] is not None else "–"
        lines.append(f"| {dataset_label(r['dataset'])} | {r['epsilon']} | {r['client_fraction']} | "
                     f"{r['sample_size']} / {r['n_users']} | {r['accounting']} | {r['from']} | {z} | {sigma} | "
                     f"{r['mean']:.2f} ± {r['std']:.2f} |")
    buf = io.StringIO()
    w = csv.DictWriter(buf, COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(table)
    return {f"{NAME}.md": ("\n".join(lines) + "\n").encode(), f"{NAME}.csv": buf.getvalue().encode()}


def run_facts(study: Study) -> dict[str, list[Any]]:
    """What the header's run line reads from the study's documents (as privacy_report.run_facts)."""
    docs = list(study.values())
    return {"sources": [d.get("source") for d in docs],
            "budgets": [(d.get(provenance.KEY) or {}).get("budget") for d in docs],
            "seeds": [tuple(d.get("seeds") or ()) for d in docs],
            "counts": [len(c["test_accuracy"]) for d in docs for cells in d["accountings"].values()
                       for c in cells.values()]}
