"""The privacy table and figure of `esnfed report`: runs/privacy/<dataset>.json (stage `privacy`)
and the opt-in methods' runs/privacy/extra/<dataset>/<method>.json (stage `privacy-extra`,
``privacy.extra_methods``) -> reports/tables/privacy.md/.csv and reports/figures/privacy.png
(test accuracy against ε)."""

from __future__ import annotations

import csv
import io
import math
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from esnfed_core.errors import DataError
from esnfed_core.privacy import auto_delta
from esnfed_core.private_trial import PRIVATE_ALGOS
from esnfed_core.quote import quote
from esnfed_core.vocabulary import papers_first
from esnfed_stages.report.table_specs import dataset_label
from esnfed_core.vocabulary import DATASETS
from esnfed_stages.report import figures
from esnfed_stages import provenance
from esnfed_stages.params.privacy import CONFIG_ABSENT, CONFIG_KEY, PUBLIC, SELECT
from esnfed_stages._io import read_json
from esnfed_stages.layout import PRIVACY_DIR, extra_path, privacy_path
from esnfed_stages.report.ttest import _fractions

COLUMNS = ("dataset", "method", "epsilon", "delta", "relation", "noise_multiplier", "mean", "std",
           "n", "non_private_mean")


# The header lines every privacy table carries (privacy.md, privacy-sampling.md): how the configuration
# was chosen (privacy.config) and what ε does not cover, and that the noise is a seeded simulation.
CONFIGURATION = {
    SELECT: (
        "Not accounted (ε covers the training of the reported model only; privacy.config: select): its "
        "hyperparameters, taken from the non-private selection on the same training users, and clip / ip_clip, "
        "tuned by runs on them (docs/privacy.md; privacy.config: public chooses them on the validation users alone)"),
    PUBLIC: (
        "Configuration (privacy.config: public): the hyperparameters and clip selected on the validation users "
        "alone (split by user into clients and scorers), ip_clip the largest FedIP update of the validation users; "
        "no training user's data enters them, so nothing outside ε depends on the protected users (docs/privacy.md)"),
}
SEEDED = ("Noise: simulation, seeded noise (drawn from each retrain's seed, so the tables are reproducible; "
          "a deployment must draw it from a secret source)")

# What a privacy output held at its top level before it recorded ``params`` ({params.yaml key: field}).
TOP_LEVEL = {"privacy.relation": "relation", "privacy.clip": "clip", "privacy.ip_clip": "ip_clip",
             "privacy.pct": "pct"}


def load(privacy_dir: str | Path = PRIVACY_DIR, expected: Mapping[str, Any] | None = None,
         datasets: Sequence[str] = DATASETS) -> dict[str, dict[str, Any]]:
    """{dataset: document} of the privacy stage's outputs present among ``datasets`` (params.yaml's
    declared ones; none present: {}), in :func:`ordered` order, each computed with ``expected``
    (params.yaml's values, ``PrivacyParams.record``) where it records them."""
    out = {}
    for ds in papers_first(datasets):
        path = privacy_path(privacy_dir, ds)
        if os.path.lexists(path):  # a folder or a FIFO there is named by read_json, not skipped
            doc = read_json(path)
            if not isinstance(doc, dict) or not isinstance(doc.get("methods"), dict):
                raise DataError(f"{path}: not a privacy stage output (no 'methods' object)")
            _check(path, doc)
            provenance.check(path, configured(doc), expected or {}, f"`esnfed privacy --dataset {ds}`", TOP_LEVEL)
            out[ds] = doc
    return out


def add_extras(privacy_dir: str | Path, docs: Mapping[str, Mapping[str, Any]], methods: Sequence[str],
               expected: Mapping[str, Any] | None = None, allow_missing: bool = False
               ) -> tuple[dict[str, dict[str, Any]], list[Path]]:
    """``docs`` with the opt-in ``methods`` (params.yaml privacy.extra_methods) of each dataset's
    runs/privacy/extra/<dataset>/<method>.json merged into its ``methods`` (and its ``fedavg_clip``),
    each checked as :func:`load` checks and computed with ``expected``; and the paths of those not
    there: an error naming the first and its command unless ``allow_missing`` (their rows left out)."""
    out, absent = {ds: dict(doc) for ds, doc in docs.items()}, []
    for ds, doc in out.items():
        for m in methods:
            path = extra_path(privacy_dir, ds, m)
            command = f"`esnfed privacy --dataset {ds} --extra {m}`"
            extra = read_opt_in(path, command, absent, allow_missing)
            if extra is None:
                continue
            if not isinstance(extra, dict) or not isinstance(extra.get("methods"), dict) or set(extra["methods"]) != {m}:
                raise DataError(f"{path}: not a privacy stage output of {m} (no 'methods' object with {m} alone)")
            _check(path, extra)
            if not _number(extra.get("fedavg_clip")) or extra["fedavg_clip"] <= 0:
                raise DataError(f"{path}: fedavg_clip: expected a finite number > 0, got {quote(extra.get('fedavg_clip'))} "
                                f"(rerun {command})")
            provenance.check(path, configured(extra), expected or {}, command, TOP_LEVEL)
            doc["methods"] = {**doc["methods"], **extra["methods"]}
            doc["fedavg_clip"] = extra["fedavg_clip"]
    return out, absent


def configured(doc: Mapping[str, Any]) -> Mapping[str, Any]:
    """``doc`` as the checks read it: one whose ``params`` do not record ``privacy.config`` was
    computed before the key existed, from the select stage's configs (CONFIG_ABSENT)."""
    rec = doc.get(provenance.KEY, {})
    if not isinstance(rec, Mapping) or CONFIG_KEY in rec:
        return doc
    return {**doc, provenance.KEY: {**rec, CONFIG_KEY: CONFIG_ABSENT}}


def configuration(docs: Iterable[Mapping[str, Any]]) -> str:
    """The header's clause on how the documents' configurations were chosen (CONFIGURATION), one
    per ``privacy.config`` they were computed under."""
    modes = dict.fromkeys(configured(d).get(provenance.KEY, {}).get(CONFIG_KEY) for d in docs)
    return "; ".join(CONFIGURATION.get(m, f"privacy.config: {quote(m)}") for m in modes)


def read_opt_in(path: Path, command: str, absent: list[Path], allow_missing: bool = False) -> Any:
    """An opt-in stage's document at ``path`` (privacy-extra, privacy-sampling), as read from JSON;
    when it is not there, None with ``path`` appended to ``absent`` if ``allow_missing``, else an
    error naming it and ``command`` (what writes it)."""
    if not os.path.lexists(path):  # a folder or a FIFO there is named by read_json, not skipped
        if not allow_missing:
            raise DataError(f"{path}: not found: run {command} first, or pass --allow-missing")
        absent.append(path)
        return None
    return read_json(path)


def missing(privacy_dir: str | Path, datasets: Sequence[str], docs: Mapping[str, Any],
            allow_missing: bool = False) -> dict[str, Path]:
    """{dataset: path} of the declared datasets whose document is not there, as the assess files:
    an error naming the first and the command that writes it unless ``allow_missing`` (their rows
    then read n/a and the header lists them). When none is there the stage did not run: no table,
    nothing missing (`esnfed report` without `esnfed privacy`)."""
    if not docs:
        return {}
    absent = {ds: privacy_path(privacy_dir, ds) for ds in papers_first(datasets) if ds not in docs}
    if absent and not allow_missing:
        (ds, path), more = next(iter(absent.items())), len(absent) - 1
        raise DataError(f"{path}: not found: run `esnfed privacy --dataset {ds}` first, or pass --allow-missing"
                        + (f" ({more} more privacy file(s) missing)" if more else ""))
    return absent


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _check(path: Path, doc: Mapping[str, Any]) -> None:
    """The fields the table and figure read, each of its type: else a DataError naming the key."""
    def bad(key: str, expected: str, value: Any) -> DataError:
        return DataError(f"{path}: {key}: expected {expected}, got {quote(value)} (rerun `esnfed privacy`)")

    for key in ("mechanism", "accountant"):
        if not isinstance(doc.get(key), str):
            raise bad(key, "a string", doc.get(key))
    if doc.get("relation") != "user":  # window level is refused (esnfed_core.privacy.WINDOW_REFUSED)
        raise bad("relation", "'user'", doc.get("relation"))
    for key in ("delta", "clip", "ip_clip"):
        if not _number(doc.get(key)) or doc[key] <= 0:
            raise bad(key, "a finite number > 0", doc.get(key))
    n = doc.get("n_units", doc.get("n_users"))
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise bad("n_units" if "n_units" in doc else "n_users", "an integer >= 1", n)
    if is_auto_delta(doc) and doc["delta"] != auto_delta(n):  # e.g. written under the former rule δ = 1/n²
        raise bad("delta", f"min(1e-5, 1/(10·{n})) = {auto_delta(n):g} of privacy.delta: auto", doc["delta"])
    if not doc["methods"]:
        raise bad("methods", "at least one method", doc["methods"])
    for m, res in doc["methods"].items():
        check_epsilons(path, f"methods.{m}.epsilons", res.get("epsilons") if isinstance(res, dict) else None, bad)


def check_epsilons(path: Path, where: str, cells: Any, bad: Callable[[str, str, Any], DataError],
                   required: Sequence[str] = ()) -> None:
    """``cells`` (at ``where`` in ``path``): a non-empty object ε -> {test_accuracy, noise_multiplier,
    ...}, each cell's accuracies fractions, its noise multiplier a finite number >= 0 or null, and each
    key of ``required`` a finite number >= 0; else the DataError of ``bad(key, expected, value)``."""
    if not isinstance(cells, dict) or not cells:
        raise bad(where, "an object of ε -> results", cells)
    for e, cell in cells.items():
        at = f"{where}.{e}"
        if not isinstance(cell, dict):
            raise bad(at, "an object", cell)
        _fractions(path, f"{at}.test_accuracy", cell.get("test_accuracy"))
        for key in dict.fromkeys(("noise_multiplier", *required)):
            value = cell.get(key)
            if (value is not None or key in required) and not (_number(value) and value >= 0):
                raise bad(f"{at}.{key}", "a finite number >= 0" + ("" if key in required else " or null"), value)


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


def published(docs: Sequence[Mapping[str, Any]]) -> str:
    """The comparability line's sentence on published values (comparability.notice ``elsewhere``):
    this table has none; its ε = inf cells are the runs the IncFed and FedIP tables show beside theirs."""
    return ("This table has no 'paper' column (the papers publish no private results); its ε=inf cells are the "
            f"non-private runs that the IncFed and FedIP tables (ijcnn-*.md, fedip.md) show at {_shares(docs)} "
            "beside the published values")


def _shares(docs: Iterable[Mapping[str, Any]]) -> str:
    """The documents' share(s) of the training users ('100% training users'; privacy.pct)."""
    pcts = sorted({str(d["pct"]) for d in docs if "pct" in d}, key=int) or ["100"]
    return ", ".join(f"{p}%" for p in pcts) + " training users"


METHOD_LABELS = {"incfed": "IncFed", "fedip": "FedIP", "fedavg": "FedAvg", "fedclip-naive": "FedCLIP (naive)",
                 "fedclip-replay": "FedCLIP (replay)"}


def recorded_budget(doc: Mapping[str, Any]) -> Any:
    """The budget a document was computed under (its ``params``), None where it does not say."""
    rec = doc.get(provenance.KEY)
    return rec.get("budget") if isinstance(rec, Mapping) else None


def run_facts(docs: Mapping[str, Mapping[str, Any]]) -> dict[str, list[Any]]:
    """What the header's run line reads from the documents: their data sources (each with its
    datasets where they differ: "import (example)", "synthetic (WESAD, HHAR)") and budgets (None
    where a document does not record it), seeds per dataset and retrains per cell."""
    return {"sources": _sources(docs),
            "budgets": [recorded_budget(d) for d in docs.values()],
            "seeds": [tuple(d.get("seeds") or ()) for d in docs.values()],
            "counts": [len(c["test_accuracy"]) for d in docs.values() for r in d["methods"].values()
                       for c in r["epsilons"].values()]}


def _sources(docs: Mapping[str, Mapping[str, Any]]) -> list[Any]:
    """Each document's data source; where they differ, each named with its datasets, so that the run
    line agrees with the comparability line below it (which speaks of the papers' datasets alone)."""
    sources = [d.get("source") for d in docs.values()]
    if len(set(sources)) < 2:
        return sources
    return [f"{src or 'unknown'} ({', '.join(dataset_label(ds) for ds, d in docs.items() if d.get('source') == src)})"
            for src in sources]


def render(docs: Mapping[str, Mapping[str, Any]], run: Sequence[str] = (), stamp: str = "",
           absent: Mapping[str, Path] | None = None, absent_extra: Sequence[Path] = ()) -> dict[str, bytes]:
    """{"privacy.md", "privacy.csv"}; empty without inputs. ``run``: the header's lines on what was
    run (data source, budget, retrains, comparability: report.py builds them as every table's);
    ``stamp``: its date and versions line; ``absent``: the declared datasets without a document
    (:func:`missing`), their rows n/a; ``absent_extra``: opt-in methods' documents not there
    (:func:`add_extras`), listed with them."""
    if not docs:
        return {}
    absent = absent or {}
    rows = _rows(docs)
    first = next(iter(docs.values()))
    methods = list(dict.fromkeys(m for d in docs.values() for m, _ in _methods(d)))
    eps = _eps_order(rows)
    lines = [
        f"# Test accuracy (%) under differential privacy, {_shares(docs.values())}: "
        + " and ".join(METHOD_LABELS.get(m, m) for m in methods),
        "",
        *(f"- {line}" for line in run),
        f"- Mechanism: {first['mechanism']}: per-unit per-step means (Ā, B̄) clipped to "
        f"{_clip_bound(docs)} (clip = {_per_dataset(docs, 'clip')}), summed, N(0, (z·C)²) added to A and B's upper "
        f"triangle; FedIP (Δg, Δb) per client and round clipped to {_per_dataset(docs, 'ip_clip')} (L2), noised sum / K"
        + _sampling(docs) + _fedavg_mechanism(docs),
        "- Neighbouring relation: user-level (add/remove one user = one client); L2 sensitivity = the clipping norm",
        "- δ = " + ", ".join(f"{dataset_label(ds)} {delta_text(d['delta'])} ({_delta_source(d)})"
                             for ds, d in docs.items()),
        f"- Accountant: {first['accountant']}; z = noise multiplier (σ / sensitivity)",
        f"- ε: {', '.join(eps)} (columns); {configuration(docs.values())}",
        f"- {SEEDED}",
        "- ε = inf: no mechanism (the non-private trial, bit for bit), so no z; cells: mean ± population std over "
        f"the {_retrains(rows)} retrains (as every table, PROTOCOL §6), ×100, two decimals",
        *([f"- {stamp}"] if stamp else []),
        "- Missing inputs (n/a cells): " + (", ".join(map(str, [*absent.values(), *absent_extra])) or "none"),
        "",
        "| dataset | method | " + " | ".join(f"ε={e}" for e in eps) + " |",
        "|---|---|" + "---:|" * len(eps),
    ]
    for ds in papers_first([*docs, *absent]):
        for m in [m for m, _ in _methods(docs[ds])] if ds in docs else methods:
            cells = {r["epsilon"]: r for r in rows if r["dataset"] == ds and r["method"] == m}
            lines.append(f"| {dataset_label(ds)} | {m} | " + " | ".join(
                f"{cells[e]['mean']:.2f} ± {cells[e]['std']:.2f}{_z(e, cells[e]['noise_multiplier'])}"
                if e in cells else "n/a" for e in eps) + " |")
    buf = io.StringIO()
    w = csv.DictWriter(buf, COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return {"privacy.md": ("\n".join(lines) + "\n").encode(), "privacy.csv": buf.getvalue().encode()}


def _clip_bound(docs: Mapping[str, Mapping[str, Any]]) -> str:
    """The clipping norm's formula: N+1 columns where a document was run with readout.bias."""
    flags = {d.get("readout_bias") is True for d in docs.values()}
    if flags == {True}:
        return "clip·√((N+1)+(N+1)²) (readout.bias)"
    if True in flags:
        return "clip·√(N+N²) (with readout.bias: N+1 for N, " + ", ".join(
            dataset_label(ds) for ds, d in docs.items() if d.get("readout_bias") is True) + ")"
    return "clip·√(N+N²)"


def _sampling(docs: Mapping[str, Mapping[str, Any]]) -> str:
    """The mechanism line's clause for documents run with federated.client_fraction < 1 (the stage
    records ``client_fraction``, absent at 1, and ``amplification``: none or sampling), else nothing."""
    sampled = {ds: d for ds, d in docs.items() if "client_fraction" in d}
    if not sampled:
        return ""
    amplified = [dataset_label(ds) for ds, d in sampled.items() if d.get("amplification") == "sampling"]
    accounting = ("accounted as without sampling: no amplification" if not amplified else
                  "accounted with amplification by sampling without replacement (RDP, replace-one neighbours: "
                  "sensitivity 2·clip)" + ("" if len(amplified) == len(sampled) else f" for {', '.join(amplified)}, "
                                           "the others without amplification"))
    return (f" (federated.client_fraction {_per_dataset(sampled, 'client_fraction')}: each round's m = "
            f"max(1, ⌊fraction·K⌋) sampled clients, noised sum / m, {accounting}"
            + ("" if len(sampled) == len(docs) else
               f"; {', '.join(dataset_label(ds) for ds in sampled)} only") + ")")


def _fedavg_mechanism(docs: Mapping[str, Mapping[str, Any]]) -> str:
    """The mechanism line's clauses of the opt-in methods some document has, else nothing."""
    with_fedavg = {ds: d for ds, d in docs.items() if "fedavg" in d["methods"]}
    out = ""
    if with_fedavg:
        out += (f"; DP-FedAvg: each client's local readout (at the selected config's λ) clipped to "
                f"{_per_dataset(with_fedavg, 'fedavg_clip')} (Frobenius), noised sum / K, one release "
                "(its ε = inf: FedAvg at that λ)")
    strategies = sorted({m.split("-", 1)[1] for d in docs.values() for m in d["methods"] if m.startswith("fedclip-")})
    if strategies:
        roster = [dataset_label(ds) for ds, d in docs.items() if d.get("sampling_pool") == "roster"]
        k = "K: all training clients" + (f"; {', '.join(roster)}: each round m of them drawn over the roster, / m "
                                         "(federated.sampling_pool roster)" if roster else "")
        out += (f"; DP-FedCLIP ({', '.join(strategies)}): at every context the FedIP rounds and the IncFed release "
                f"above ({k}), contexts × (budget + 1) releases under one z, λ on the validation "
                "users' windows of the context (its ε = inf: FedCLIP at continual.lambda); accuracy of the last "
                "context's model on all test windows")
    return out


def _z(eps: str, value: float | None) -> str:
    """A cell's noise multiplier after its accuracy: none at ε = inf (no mechanism, z = 0)."""
    if not math.isfinite(float(eps)):
        return ""
    return " (z n/a)" if value is None else f" (z={value:.2f})"


def _per_dataset(docs: Mapping[str, Mapping[str, Any]], key: str) -> str:
    """A field's value, once when every document has the same, else per dataset (privacy.clip and
    privacy.ip_clip may be a mapping dataset -> number)."""
    values = {ds: d[key] for ds, d in docs.items()}
    if len(set(values.values())) == 1:
        return f"{next(iter(values.values()))}"
    return ", ".join(f"{dataset_label(ds)} {v}" for ds, v in values.items())


def is_auto_delta(doc: Mapping[str, Any]) -> bool:
    """Whether a document's δ is ``privacy.delta: auto``'s (the default, and what a document
    recorded before ``params`` was) rather than a number params.yaml gave."""
    rec = doc.get(provenance.KEY)
    return not (isinstance(rec, Mapping) and rec.get("privacy.delta", "auto") != "auto")


def _delta_source(doc: Mapping[str, Any]) -> str:
    """Where a document's δ came from: min(1e-5, 1/(10·n)) of ``privacy.delta: auto``, or the
    number params.yaml gave."""
    if not is_auto_delta(doc):
        return "privacy.delta"
    return f"min(1e-5, 1/(10·n)), n = {doc.get('n_units', doc['n_users'])} users"


def _retrains(rows: Sequence[Mapping[str, Any]]) -> str:
    """The retrains per cell: 'N', or 'N-M' when the cells differ."""
    counts = sorted({r["n"] for r in rows})
    return str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"


def _eps_order(rows) -> list[str]:
    return sorted({r["epsilon"] for r in rows}, key=float)


# Each method one colour and marker in every panel; its line without DP dashed (IncFed) or dotted
# (FedIP) in the same colour, so two nearly equal ε = ∞ accuracies stay told apart where they overlap.
METHOD_STYLE = {"incfed": ("tab:blue", "o", "--"), "fedip": ("tab:orange", "s", ":"),
                "fedavg": ("tab:green", "D", (0, (5, 1, 1, 1))), "fedclip-naive": ("tab:red", "v", (0, (3, 1))),
                "fedclip-replay": ("tab:purple", "P", (0, (1, 2)))}
_OTHER_STYLE = ("tab:gray", "^", "-.")
INF_GAP = 2.5  # ε = ∞ is drawn this factor right of the largest finite ε (its tick reads ∞)
DODGE = 0.05   # the methods' points shifted apart by this share of a decade (overlapping error bars)


def delta_text(delta: float) -> str:
    """δ as the table and the figure print it (four significant digits: 0.01235)."""
    return f"{delta:.4g}"


def draw(docs: Mapping[str, Mapping[str, Any]]) -> "figures.Figure | None":
    """The figure of :func:`figure`, not yet rendered (tests read its artists)."""
    if not docs:
        return None
    rows = _rows(docs)
    fig = figures._figure(figsize=(4.2 * len(docs), 4.0), layout="constrained")
    axes = fig.subplots(1, len(docs), squeeze=False)[0]
    for ax, (ds, doc) in zip(axes, docs.items()):
        finite = sorted({float(r["epsilon"]) for r in rows if r["dataset"] == ds
                         and math.isfinite(float(r["epsilon"]))})
        x_inf = (max(finite) if finite else 1.0) * INF_GAP
        methods = [m for m, _ in _methods(doc)]
        for k, m in enumerate(methods):
            colour, marker, dashes = METHOD_STYLE.get(m, _OTHER_STYLE)
            shift = 10 ** (DODGE * (k - (len(methods) - 1) / 2))
            label = METHOD_LABELS.get(m, m)
            mine = [r for r in rows if r["dataset"] == ds and r["method"] == m]
            pts = sorted((float(r["epsilon"]), r["mean"], r["std"]) for r in mine
                         if math.isfinite(float(r["epsilon"])))
            if pts:
                e, mu, sd = map(np.asarray, zip(*pts))
                ax.errorbar(e * shift, mu, yerr=sd, marker=marker, capsize=3, color=colour, label=f"{label} (DP)")
            inf = next((r for r in mine if not math.isfinite(float(r["epsilon"]))), None)
            if inf is not None:
                ax.axhline(inf["mean"], color=colour, linestyle=dashes, linewidth=1.2,
                           label=f"{label} without DP (ε = ∞)")
                ax.errorbar([x_inf * shift], [inf["mean"]], yerr=[inf["std"]], marker=marker, capsize=3,
                            color=colour, linestyle="none")
        ax.set_xscale("log")
        ax.set_xticks([*finite, x_inf], [*(f"{v:g}" for v in finite), "∞"])
        ax.minorticks_off()
        ax.set_xlim((min(finite) if finite else x_inf) / 1.6, x_inf * 1.6)
        if finite:
            ax.axvline(max(finite) * INF_GAP ** 0.5, color="0.8", linewidth=0.8)  # finite ε | ∞
        ax.set_xlabel("ε")
        ax.set_ylabel("test accuracy (%)")
        ax.set_title(f"{dataset_label(ds)} ({doc['relation']}-level, δ = {delta_text(doc['delta'])})")
    # One legend for every panel (a method has one style throughout), below them: inside a panel
    # it covered the ε = ∞ lines at the top.
    handles, labels = max((ax.get_legend_handles_labels() for ax in axes), key=lambda hl: len(hl[1]))
    order = sorted(range(len(labels)), key=lambda i: ("without DP" in labels[i], i))  # DP first
    handles, labels = [handles[i] for i in order], [labels[i] for i in order]
    fig.legend(handles, labels, loc="outside lower center", ncol=min(4, len(labels)), fontsize="small")
    figures.suptitle(fig, f"Differential privacy, {_shares(docs.values())}: test accuracy against ε (mean ± "
                     "population std over retrains; ε = ∞: without DP)")
    return fig


def figure(docs: Mapping[str, Mapping[str, Any]]) -> bytes | None:
    """Accuracy against ε per dataset (log axis; ε = ∞, without DP, at the right end and as a
    line across) and method: PNG bytes, None without inputs."""
    fig = draw(docs)
    return None if fig is None else figures._png(fig)
