"""The `esnfed flower` results read back and shown: each result file of a folder checked
(load_docs), the table `esnfed flower-table` writes (render_table), and the app labels, phase
names and mask notes that the report's SecAgg+ overhead table shares with it."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from esnfed_core.errors import DataError
from esnfed_core.quote import quote
from esnfed_core.sampling import FULL, SECAGG_MIN_SURVIVORS, SIMULATION_MIN_SURVIVORS, SURVIVORS_KEY, sample_size, secagg_threshold
from esnfed_stages import provenance
from esnfed_stages._io import read_json
from esnfed_stages.layout import FEDCLIP_APPS, FLOWER_APPS, FLOWER_DIR


def fraction_text(doc: Mapping[str, Any]) -> str:
    """A sampled run's fraction as tables and summaries show it ("f = 0.5"); "" without sampling."""
    f = doc.get("client_fraction")
    return "" if f is None else f"f = {f:g}"

# get_parameters: Flower's legacy workflow asks one client for the initial parameters (the strategy gives
# none) before the first round (esnfed_flower.common.secagg_stage).
STAGE_NAMES = {"plain": "plain", "get_parameters": "initial parameters (server asks one client)",
               "get_properties": "partition and participation (server asks every client; client sampling)",
               "setup": "SecAgg+ setup (public keys)",
               "share_keys": "SecAgg+ share keys (encrypted shares)",
               "collect_masked_vectors": "SecAgg+ masked vector", "unmask": "SecAgg+ unmask (shares)"}


def vector_entries(doc: Mapping[str, Any], phase: str) -> int:
    """Floats a client's vector holds in a phase: (g, b) = 2N, statistics C·N + N², readout C·N;
    FedCLIP joint's evaluation (down: (g, b) and the readout) 2N + C·N, its role query none. With
    readout.bias (the document's ``readout_bias``) the readout's N is N+1; (g, b) keep 2N."""
    n, c = int(doc["config"]["units"]), int(doc["n_classes"])
    r = n + int(doc.get("readout_bias") is True)  # the readout's columns
    return {"ip": 2 * n, "stats": c * r + r * r, "readout": c * r, "eval": 2 * n + c * r, "role": 0}[phase]


def app_label(doc: Mapping[str, Any]) -> str:
    """The app's table cell: its name, a sampled run's client fraction (federated.client_fraction:
    each IP round went to max(1, ⌊f·K⌋) clients) and a DP run's ε and noise (the pipeline column is
    then the private trial's)."""
    dp = doc.get("dp")
    notes = [fraction_text(doc)] + ([f"ε = {dp['epsilon']}", dp["noise"]] if isinstance(dp, dict) else [])
    notes = [n for n in notes if n]
    return doc["app"] + (f" ({', '.join(notes)})" if notes else "")


def masks_note(runs: Sequence[tuple[str, int, float]]) -> list[str]:
    """The SecAgg+ results' caveat, one bullet: ``runs`` = (dataset, K, client fraction) of each
    SecAgg+ result; those whose rounds (of K, or of max(1, ⌊f·K⌋) sampled) may complete with fewer
    than SECAGG_MIN_SURVIVORS survivors are named. [] without SecAgg+ results."""
    if not runs:
        return []
    weak = sorted({f"{name} (K = {k})" for name, k, f in runs
                   if secagg_threshold(min(k, sample_size(k, f))) < SECAGG_MIN_SURVIVORS})
    return [f"- SecAgg+ masks: Flower 1.42 expands 32-bit mask seeds, so a round that completes with K' "
            f"survivors hides each vector behind 32·(K' − 1) bits; below {SECAGG_MIN_SURVIVORS} survivors "
            f"(threshold max(2, K − 1): K ≤ {SECAGG_MIN_SURVIVORS} clients) the masks are brute-forceable. These "
            f"runs ({SURVIVORS_KEY} {SIMULATION_MIN_SURVIVORS}) are a simulation of the protocol, not a privacy "
            f"guarantee{': below the bound here: ' + ', '.join(weak) if weak else ''} (docs/flower.md)"]


def render_table(docs: list[Mapping[str, Any]]) -> str:
    """`esnfed flower` results as Markdown: accuracy beside the pipeline's, bytes per client beside the
    ledger's, and each round's bytes by phase and stage; the masked vector beside its formula
    8·(d + 1) (int64 entries after the modulus, plus SecAgg+'s weight entry)."""
    runs = [(d["dataset"], int(d["n_clients"]), float(d.get("client_fraction", FULL))) for d in docs if d["secagg"]]
    note = masks_note(runs)
    lines = ["# Flower apps: accuracy and bytes per client (esnfed flower)", "", *note, *([""] if note else []),
             "| dataset | app | SecAgg+ | K | N | λ | test acc. Flower | test acc. pipeline | readout rel. diff. "
             "| ledger up / down B | Flower up / down B |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for d in docs:
        f, p = d["flower"], d["pipeline"]
        comm, k = p["communication"], d["n_clients"]
        lines.append(f"| {d['dataset']} | {app_label(d)} | {'yes' if d['secagg'] else 'no'} | {k} | {d['config']['units']} "
                     f"| {d['lambda']:g} | {100 * f['test_accuracy']:.2f} | {100 * p['test_accuracy']:.2f} "
                     f"| {f['readout_relative_difference']:.2g} | {comm['up_bytes'] / k:.0f} / "
                     f"{comm['down_bytes'] / k:.0f} | {f['bytes']['up_per_client']['mean']:.0f} / "
                     f"{f['bytes']['down_per_client']['mean']:.0f} |")
    lines += ["", "Per round and client, by phase (FedIP's IP rounds, the readout's round) and stage:", "",
              "| dataset | app | SecAgg+ | phase | rounds | stage | up B | down B | d | 8·(d+1) |",
              "|---|---|---|---|---|---|---|---|---|---|"]
    for d in docs:
        for r in d["flower"]["bytes"]["rows"]:
            masked = r["stage"] == "collect_masked_vectors"
            dd = vector_entries(d, r["phase"])
            lines.append(f"| {d['dataset']} | {app_label(d)} | {'yes' if d['secagg'] else 'no'} | {r['phase']} "
                         f"| {r['rounds']} | {STAGE_NAMES.get(r['stage'], r['stage'])} "
                         f"| {r['up_per_client_round']:.0f} | {r['down_per_client_round']:.0f} | {dd} "
                         f"| {8 * (dd + 1) if masked else ''} |")
    return "\n".join(lines) + "\n"


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _count(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v >= 0

_STR = (lambda v: isinstance(v, str), "a string")

_NUM = (_number, "a finite number")

_BYTES = (lambda v: _number(v) and v >= 0, "a finite number >= 0")  # a byte count, as the assess files' (>= 0)

_COUNT = (_count, "an integer >= 0")

# What the report's SecAgg+ section reads of a result, then what `esnfed flower-table` adds.
_DOC_FIELDS = {"dataset": _STR, "app": (lambda v: v in FLOWER_APPS + FEDCLIP_APPS, "an esnfed flower app"),
               "secagg": (lambda v: isinstance(v, bool), "true or false"), "pct": _STR, "n_clients": _COUNT,
               "flower.bytes.rows": (lambda v: isinstance(v, list), "a list")}

_ROW_FIELDS = {"phase": _STR, "stage": _STR, "rounds": _COUNT, "up_per_client_round": _BYTES,
               "down_per_client_round": _BYTES}

_TABLE_FIELDS = {"n_classes": _COUNT, "config.units": _COUNT, "lambda": _NUM, "flower.test_accuracy": _NUM,
                 "flower.readout_relative_difference": _NUM, "flower.bytes.up_per_client.mean": _BYTES,
                 "flower.bytes.down_per_client.mean": _BYTES, "pipeline.test_accuracy": _NUM,
                 "pipeline.communication.up_bytes": _BYTES, "pipeline.communication.down_bytes": _BYTES}


def _check_fields(path: Path, doc: Any, fields: Mapping[str, tuple[Any, str]], where: str = "") -> None:
    """DataError naming ``path`` and the dotted key of the first field missing or of the wrong type."""
    for key, (ok, expected) in fields.items():
        value = doc
        for part in key.split("."):
            if not isinstance(value, dict) or part not in value:
                raise DataError(f"{path}: {where}{key} missing (not an esnfed flower result? rerun `esnfed flower`)")
            value = value[part]
        if not ok(value):
            raise DataError(f"{path}: {where}{key}: expected {expected}, got {quote(value)}")


def rerun_command(doc: Mapping[str, Any], out_dir: Path) -> str:
    """The `esnfed flower` command that writes ``doc`` again into ``out_dir``."""
    dp = f" --epsilon {doc['dp']['epsilon']}" if isinstance(doc.get("dp"), dict) else ""
    return (f"`esnfed flower --dataset {doc['dataset']} --app {doc['app']}{' --secagg' if doc['secagg'] else ''}"
            f"{dp}{'' if doc['pct'] == '100' else ' --pct ' + doc['pct']} --out-dir {out_dir}`")


def load_docs(out_dir: Path = FLOWER_DIR, *, table: bool = True,
              expected: Mapping[str, Any] | None = None, nested: bool = False) -> list[dict[str, Any]]:
    """Every <out_dir>/*.json (``nested``: and <out_dir>/*/*.json, the flower stage's per-dataset
    folders), sorted by dataset, app, SecAgg+; each checked for the fields the report reads (and,
    with ``table``, those of `esnfed flower-table`): DataError naming the file and key; and computed
    with ``expected`` (params.yaml's values, e.g. {"budget": ...}) where it records them."""
    docs = []
    for path in sorted(Path(out_dir).glob("*.json")) + (sorted(Path(out_dir).glob("*/*.json")) if nested else []):
        doc = read_json(path)  # DataError naming the file when it is not JSON
        if not isinstance(doc, dict) or "flower" not in doc:
            raise DataError(f"{path}: not an esnfed flower result")
        _check_fields(path, doc, _DOC_FIELDS | (_TABLE_FIELDS if table else {}))
        for i, row in enumerate(doc["flower"]["bytes"]["rows"]):
            if not isinstance(row, dict):
                raise DataError(f"{path}: flower.bytes.rows[{i}]: expected an object, got {quote(row)}")
            _check_fields(path, row, _ROW_FIELDS, f"flower.bytes.rows[{i}].")
        if "client_fraction" in doc and not (_number(doc["client_fraction"]) and 0 < doc["client_fraction"] < 1):
            raise DataError(f"{path}: client_fraction: expected a number in (0, 1) (recorded only when sampling), "
                            f"got {quote(doc['client_fraction'])}")
        provenance.check(path, doc, expected or {}, rerun_command(doc, path.parent))
        docs.append(doc)
    apps = FLOWER_APPS + FEDCLIP_APPS
    # every client first, then the sampled runs by falling fraction
    return sorted(docs, key=lambda d: (d["dataset"], apps.index(d["app"]), d["secagg"], d["pct"],
                                       -d.get("client_fraction", 1.0), _dp_order(d)))


def _dp_order(doc: Mapping[str, Any]) -> float:
    """Sorts a run without DP first, then DP runs by ε (∞ last)."""
    dp = doc.get("dp")
    try:
        return float(dp["epsilon"]) if isinstance(dp, dict) else -1.0
    except (KeyError, TypeError, ValueError):
        return -1.0
