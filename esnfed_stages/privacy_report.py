"""The privacy table and figure of `esnfed report`: runs/privacy/<dataset>.json (stage `privacy`)
-> reports/tables/privacy.md/.csv and reports/figures/privacy.png (test accuracy against ε)."""

from __future__ import annotations

import csv
import io
import math
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from esnfed_core.errors import DataError
from esnfed_core.private_trial import PRIVATE_ALGOS
from esnfed_core.quote import quote
from esnfed_core.tables import dataset_label
from esnfed_stages import figures, provenance
from esnfed_stages._io import read_json
from esnfed_stages.privacy import PRIVACY_DIR
from esnfed_stages.ttest import _fractions

DATASET_ORDER = ("wesad", "hhar")
COLUMNS = ("dataset", "method", "epsilon", "delta", "relation", "noise_multiplier", "mean", "std",
           "n", "non_private_mean")


# What a privacy output held at its top level before it recorded ``params`` ({params.yaml key: field}).
TOP_LEVEL = {"privacy.relation": "relation", "privacy.clip": "clip", "privacy.ip_clip": "ip_clip",
             "privacy.pct": "pct"}


def load(privacy_dir: str | Path = PRIVACY_DIR,
         expected: Mapping[str, Any] | None = None) -> dict[str, dict[str, Any]]:
    """{dataset: document} of the privacy stage's outputs present (none: {}), each computed with
    ``expected`` (params.yaml's values, ``PrivacyParams.record``) where it records them."""
    out = {}
    for ds in DATASET_ORDER:
        path = Path(privacy_dir) / f"{ds}.json"
        if os.path.lexists(path):  # a folder or a FIFO there is named by read_json, not skipped
            doc = read_json(path)
            if not isinstance(doc, dict) or not isinstance(doc.get("methods"), dict):
                raise DataError(f"{path}: not a privacy stage output (no 'methods' object)")
            _check(path, doc)
            provenance.check(path, doc, expected or {}, f"`esnfed privacy --dataset {ds}`", TOP_LEVEL)
            out[ds] = doc
    return out


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _check(path: Path, doc: Mapping[str, Any]) -> None:
    """The fields the table and figure read, each of its type: else a DataError naming the key."""
    def bad(key: str, expected: str, value: Any) -> DataError:
        return DataError(f"{path}: {key}: expected {expected}, got {quote(value)} (rerun `esnfed privacy`)")

    for key in ("mechanism", "accountant"):
        if not isinstance(doc.get(key), str):
            raise bad(key, "a string", doc.get(key))
    if doc.get("relation") not in ("user", "window"):
        raise bad("relation", "'user' or 'window'", doc.get("relation"))
    for key in ("delta", "clip", "ip_clip"):
        if not _number(doc.get(key)) or doc[key] <= 0:
            raise bad(key, "a finite number > 0", doc.get(key))
    n = doc.get("n_units", doc.get("n_users"))
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise bad("n_units" if "n_units" in doc else "n_users", "an integer >= 1", n)
    if not doc["methods"]:
        raise bad("methods", "at least one method", doc["methods"])
    for m, res in doc["methods"].items():
        eps = res.get("epsilons") if isinstance(res, dict) else None
        if not isinstance(eps, dict) or not eps:
            raise bad(f"methods.{m}.epsilons", "an object of ε -> results", eps)
        for e, cell in eps.items():
            where = f"methods.{m}.epsilons.{e}"
            if not isinstance(cell, dict):
                raise bad(where, "an object", cell)
            _fractions(path, f"{where}.test_accuracy", cell.get("test_accuracy"))
            z = cell.get("noise_multiplier")
            if z is not None and not (_number(z) and z >= 0):
                raise bad(f"{where}.noise_multiplier", "a finite number >= 0 or null", z)


def _methods(doc: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """(method, results) of a document, IncFed then FedIP (the JSON keeps them sorted by name)."""
    order = {m: i for i, m in enumerate(PRIVATE_ALGOS)}
    return sorted(doc["methods"].items(), key=lambda kv: (order.get(kv[0], len(order)), kv[0]))


def _rows(docs: Mapping[str, Mapping[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for ds, doc in docs.items():
        for m, res in _methods(doc):
            plain = res["epsilons"].get("inf", {}).get("test_accuracy")
            for eps, cell in res["epsilons"].items():
                acc = 100 * np.asarray(cell["test_accuracy"], np.float64)
                rows.append({"dataset": ds, "method": m, "epsilon": eps, "delta": doc["delta"],
                             "relation": doc["relation"], "noise_multiplier": cell["noise_multiplier"],
                             "mean": float(acc.mean()), "std": float(acc.std()),  # population std (PROTOCOL §6)
                             "n": int(acc.size),
                             "non_private_mean": float(100 * np.mean(plain)) if plain else None})
    return rows


# The comparability line (comparability.notice) names the published values this table stands beside.
PUBLISHED = "The 'paper' columns of the IncFed and FedIP tables (the papers publish no private results)"
METHOD_LABELS = {"incfed": "IncFed", "fedip": "FedIP"}


def recorded_budget(doc: Mapping[str, Any]) -> Any:
    """The budget a document was computed under (its ``params``), None where it does not say."""
    rec = doc.get(provenance.KEY)
    return rec.get("budget") if isinstance(rec, Mapping) else None


def run_facts(docs: Mapping[str, Mapping[str, Any]]) -> dict[str, list[Any]]:
    """What the header's run line reads from the documents: their data sources and budgets (None
    where a document does not record it), seeds per dataset and retrains per cell."""
    return {"sources": [d.get("source") for d in docs.values()],
            "budgets": [recorded_budget(d) for d in docs.values()],
            "seeds": [tuple(d.get("seeds") or ()) for d in docs.values()],
            "counts": [len(c["test_accuracy"]) for d in docs.values() for r in d["methods"].values()
                       for c in r["epsilons"].values()]}


def render(docs: Mapping[str, Mapping[str, Any]], run: Sequence[str] = (), stamp: str = "") -> dict[str, bytes]:
    """{"privacy.md", "privacy.csv"}; empty without inputs. ``run``: the header's lines on what was
    run (data source, budget, retrains, comparability: report.py builds them as every table's);
    ``stamp``: its date and versions line."""
    if not docs:
        return {}
    rows = _rows(docs)
    first = next(iter(docs.values()))
    pcts = sorted({str(d["pct"]) for d in docs.values() if "pct" in d}, key=int) or ["100"]
    methods = list(dict.fromkeys(m for d in docs.values() for m, _ in _methods(d)))
    lines = [
        f"# Test accuracy (%) under differential privacy, {', '.join(pcts)} % share: "
        + " and ".join(METHOD_LABELS.get(m, m) for m in methods),
        "",
        *(f"- {line}" for line in run),
        f"- Mechanism: {first['mechanism']}: per-unit per-step means (Ā, B̄) clipped to "
        f"clip·√(N+N²) (clip = {first['clip']}), summed, N(0, (z·C)²) added to A and B's upper "
        f"triangle; FedIP (Δg, Δb) per client and round clipped to {first['ip_clip']} (L2), noised sum / K",
        f"- Neighbouring relation: {first['relation']}-level (add/remove one "
        f"{'user = one client' if first['relation'] == 'user' else 'window'}); L2 sensitivity = the clipping norm",
        "- δ = " + ", ".join(f"{dataset_label(ds)} {d['delta']:.4g} (1/n², n = {d.get('n_units', d['n_users'])} "
                             f"{'windows' if d['relation'] == 'window' else 'users'})"
                             for ds, d in docs.items()),
        f"- Accountant: {first['accountant']}; z = noise multiplier (σ / sensitivity)",
        "- ε = inf: no mechanism (the non-private trial, bit for bit); cells: mean ± population std over "
        f"the {_retrains(rows)} retrains (as every table, PROTOCOL §6), ×100, two decimals",
        *([f"- {stamp}"] if stamp else []),
        "",
        "| dataset | method | " + " | ".join(f"ε={e}" for e in _eps_order(rows)) + " | non-private |",
        "|---|---|" + "---:|" * (len(_eps_order(rows)) + 1),
    ]
    for ds, doc in docs.items():
        for m, _ in _methods(doc):
            cells = {r["epsilon"]: r for r in rows if r["dataset"] == ds and r["method"] == m}
            plain = next(iter(cells.values()))["non_private_mean"]
            lines.append(f"| {dataset_label(ds)} | {m} | " + " | ".join(
                f"{cells[e]['mean']:.2f} ± {cells[e]['std']:.2f} (z={cells[e]['noise_multiplier']:.2f})"
                if e in cells else "n/a" for e in _eps_order(rows))
                + f" | {'n/a' if plain is None else f'{plain:.2f}'} |")
    buf = io.StringIO()
    w = csv.DictWriter(buf, COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return {"privacy.md": ("\n".join(lines) + "\n").encode(), "privacy.csv": buf.getvalue().encode()}


def _retrains(rows: Sequence[Mapping[str, Any]]) -> str:
    """The retrains per cell: 'N', or 'N-M' when the cells differ."""
    counts = sorted({r["n"] for r in rows})
    return str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"


def _eps_order(rows) -> list[str]:
    return sorted({r["epsilon"] for r in rows}, key=float)


def figure(docs: Mapping[str, Mapping[str, Any]]) -> bytes | None:
    """Accuracy against ε (log axis; ε = ∞ drawn as a dashed line) per dataset and method."""
    if not docs:
        return None
    rows = _rows(docs)
    fig = figures._figure(figsize=(4.2 * len(docs), 3.6), layout="constrained")
    axes = fig.subplots(1, len(docs), squeeze=False)[0]
    for ax, (ds, doc) in zip(axes, docs.items()):
        for k, m in enumerate(doc["methods"]):
            pts = sorted(((float(r["epsilon"]), r["mean"], r["std"]) for r in rows
                          if r["dataset"] == ds and r["method"] == m and math.isfinite(float(r["epsilon"]))))
            colour = f"C{k}"
            if pts:
                e, mu, sd = map(np.asarray, zip(*pts))
                ax.errorbar(e, mu, yerr=sd, marker="o", capsize=3, color=colour, label=f"{m} (DP)")
                ax.set_xscale("log")
                ax.set_xticks(e, [f"{v:g}" for v in e])
                ax.minorticks_off()
            plain = next(r["non_private_mean"] for r in rows if r["dataset"] == ds and r["method"] == m)
            if plain is not None:
                ax.axhline(plain, color=colour, linestyle="--", label=f"{m} (ε = ∞)")
        ax.set_xlabel("ε")
        ax.set_ylabel("test accuracy (%)")
        ax.set_title(f"{dataset_label(ds)} ({doc['relation']}-level, δ = {doc['delta']:.3g})")
        ax.legend(fontsize=7)
    fig.suptitle("Differential privacy: test accuracy against ε (mean ± std over retrains; dashed: without DP)")
    return figures._png(fig)
