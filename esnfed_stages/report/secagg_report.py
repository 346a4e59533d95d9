"""The SecAgg+ overhead part of the communication table: the `flower` stage's
runs/flower/<dataset>/*.json (esnfed flower, plain and --secagg) -> a section appended to
the communication table of each dataset (reports/tables/communication.md for the papers',
communication-<name>.md for one of your own) and reports/tables/secagg-overhead.csv.

Bytes are what Flower delivered per client per round (esnfed_flower/run.py, measure_mod), by phase
(FedIP's IP rounds, the readout's statistics round) and SecAgg+ stage; the plain reference is the
plain app's run of the same dataset, method, share and client fraction. Without the stage's outputs the section
says "not run" and the CSV holds only its header.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping, Sequence

from esnfed_core.errors import DataError
from esnfed_stages.report.table_specs import dataset_label
from esnfed_stages.report.flower_table import STAGE_NAMES, fraction_text, load_docs, masks_note
from esnfed_stages.layout import FLOWER_DIR, SECAGG_CSV, out_name
from esnfed_stages.report.tables import to_csv

# stage: Flower's SecAgg+ stage id (esnfed_flower.common.secagg_stage) or "total"; stage_label: the
# name the Markdown section gives it (esnfed_stages.report.flower_table.STAGE_NAMES)
COLUMNS = ("dataset", "method", "pct", "clients", "phase", "rounds", "stage", "stage_label", "plain_up_bytes",
           "plain_down_bytes", "secagg_up_bytes", "secagg_down_bytes", "ratio_up", "ratio_down")
SECTION_TITLE = "SecAgg+ overhead: bytes per client per round, plain against SecAgg+ (Flower)"


# The datasets dvc.yaml's `flower` stage runs (foreach params.yaml study_datasets, which the report
# passes; this is the repository's value; any declared dataset may be one): a folder the pipeline does not track is not read, so the
# cached report never depends on an untracked file.
PIPELINE_DATASETS = ("wesad", "hhar")


# What dvc.yaml's flower stage writes for each study dataset (its cmd: --app incfed --app fedip
# --plain-and-secagg, share 100; tests/test_dvc_deps checks that the two agree).
PIPELINE_APPS = ("incfed", "fedip")
PIPELINE_PCT = "100"


def missing(flower_dir: str | Path, datasets: Sequence[str], allow_missing: bool = False) -> list[Path]:
    """The flower stage's results (PIPELINE_APPS, plain and SecAgg+, share PIPELINE_PCT) of
    ``datasets`` not under ``flower_dir``/<dataset>/, as the privacy documents: an error naming the
    first and the command that writes it, unless ``allow_missing`` (the section then lists them,
    their rows left out). None of them there: the stage did not run ("not run"), nothing missing."""
    expected = [(ds, Path(flower_dir) / ds / out_name(ds, app, secagg, PIPELINE_PCT))
                for ds in datasets for app in PIPELINE_APPS for secagg in (False, True)]
    if not any(_present(p) for _, p in expected):
        return []
    absent = [(ds, p) for ds, p in expected if not _present(p)]
    if absent and not allow_missing:
        (ds, path), more = absent[0], len(absent) - 1
        apps = " ".join(f"--app {a}" for a in PIPELINE_APPS)
        raise DataError(f"{path}: not found: run `esnfed flower --dataset {ds} {apps} --plain-and-secagg "
                        f"--out-dir {Path(flower_dir) / ds}` first, or pass --allow-missing"
                        + (f" ({more} more Flower result(s) missing)" if more else ""))
    return [p for _, p in absent]


def _present(path: Path) -> bool:
    """Whether the result named ``path`` (out_name without a fraction) is there, or the same run's
    under federated.client_fraction < 1 (out_name's -f<f> before the share; a DP run's -eps<ε> is
    not the stage's)."""
    stem = path.name.removesuffix(f"-{PIPELINE_PCT}.json")
    return os.path.lexists(path) or any("-eps" not in p.name[len(stem):]
                                        for p in path.parent.glob(f"{stem}-f*-{PIPELINE_PCT}.json"))


def load(flower_dir: str | Path = FLOWER_DIR, datasets: Sequence[str] = PIPELINE_DATASETS,
         budget: str | None = None) -> list[dict[str, Any]]:
    """The documents of runs/flower/<dataset>/ for each dataset whose folder exists, each of
    params.yaml's ``budget`` where it records one."""
    docs = []
    for ds in datasets:
        folder = Path(flower_dir) / ds
        if folder.is_dir():  # the fields rows() reads, checked; a DP run (`esnfed flower --epsilon`) is not the overhead's
            docs += [d for d in load_docs(folder, table=False, expected={"budget": budget}) if "dp" not in d]
    return docs


def _ratio(num: float, den: float | None) -> float | None:
    return num / den if den else None


def rows(docs: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per SecAgg+ run and phase: each SecAgg+ stage's bytes per client per round, then their total,
    beside the plain run's bytes of that phase (None without a plain run); ratio = SecAgg+ / plain."""
    # the plain run of the same client fraction (a folder may hold runs at two: out_name's -f<f>)
    plain = {(d["dataset"], d["app"], d["pct"], d.get("client_fraction")): d for d in docs if not d["secagg"]}
    out = []
    for d in (d for d in docs if d["secagg"]):
        ref = plain.get((d["dataset"], d["app"], d["pct"], d.get("client_fraction")))
        phases = list(dict.fromkeys(r["phase"] for r in d["flower"]["bytes"]["rows"]))
        for ph in phases:
            mine = [r for r in d["flower"]["bytes"]["rows"] if r["phase"] == ph]
            theirs = [r for r in ref["flower"]["bytes"]["rows"] if r["phase"] == ph] if ref else []
            p_up = sum(r["up_per_client_round"] for r in theirs) if theirs else None
            p_down = sum(r["down_per_client_round"] for r in theirs) if theirs else None
            base = {"dataset": d["dataset"], "method": d["app"], "pct": d["pct"], "clients": d["n_clients"],
                    "phase": ph, "rounds": max(r["rounds"] for r in mine), "sampled": fraction_text(d)}
            for r in mine:
                out.append({**base, "stage": r["stage"], "stage_label": STAGE_NAMES.get(r["stage"], r["stage"]),
                            "plain_up_bytes": None, "plain_down_bytes": None,
                            "secagg_up_bytes": r["up_per_client_round"],
                            "secagg_down_bytes": r["down_per_client_round"],
                            "ratio_up": _ratio(r["up_per_client_round"], p_up),
                            "ratio_down": _ratio(r["down_per_client_round"], p_down)})
            up = sum(r["up_per_client_round"] for r in mine)
            down = sum(r["down_per_client_round"] for r in mine)
            out.append({**base, "stage": "total", "stage_label": "total", "plain_up_bytes": p_up,
                        "plain_down_bytes": p_down,
                        "secagg_up_bytes": up, "secagg_down_bytes": down,
                        "ratio_up": _ratio(up, p_up), "ratio_down": _ratio(down, p_down)})
    return out


# Whole bytes with thousands separators, as the communication table above writes its byte counts.
BYTES = ",.0f"


def _fraction(row: Mapping[str, Any]) -> float:
    """A row's client fraction from its ``sampled`` text ("f = 0.5"; "" at 1, fraction_text's)."""
    return float(str(row["sampled"]).removeprefix("f = ")) if row.get("sampled") else 1.0


def _cell(v: Any, fmt: str) -> str:
    return "n/a" if v is None else format(v, fmt)


def markdown(table: Sequence[Mapping[str, Any]], flower_dir: str | Path = FLOWER_DIR,
             absent: Sequence[Path] = ()) -> str:
    """The section appended to communication.md ("not run" without SecAgg+ runs); ``absent``: the
    stage's results missing (``missing`` with --allow-missing), listed."""
    lines = ["", f"## {SECTION_TITLE}", ""]
    if absent:
        lines += [f"- Missing results (their rows left out): {', '.join(str(p) for p in absent)}"]
    if not table:
        return "\n".join(lines + [f"Not run: no SecAgg+ results under {flower_dir}/<dataset>/ "
                                  "(dvc stage `flower`, `esnfed flower --secagg`)."]) + "\n"
    lines += ["- Measured by `esnfed flower` in Flower's simulation engine (docs/flower.md): each message's "
              "bytes as Flower delivered them, per client per round, by phase (FedIP's IP rounds, the "
              "statistics round) and SecAgg+ stage; plain = the plain app's run of the same config",
              "- ratio = SecAgg+ bytes / plain bytes of the phase (a stage's row: its share of it); "
              "n/a: no plain run",
              "- By design not the table above's bytes for the same config: that table counts the pipeline's "
              "payload (array bytes + 8 per count, esnfed_core.messages), and its download is the solved "
              "readout (N·C floats) each client receives. The Flower apps, plain and SecAgg+, never send the "
              "readout back (the server solves it and keeps it): plain down here is the request alone (its "
              "config; FedIP: also (g, b)), so a ratio down compares with a download without the readout. "
              "Every message also carries Flower's framing on top of the payload: an upload of statistics "
              "is about 1.4 KB more than the table above's (a 128-byte .npy header per array, object "
              "headers and ids; docs/flower.md)",
              *masks_note(list(dict.fromkeys((r["dataset"], int(r["clients"]), _fraction(r)) for r in table))),
              f"- {SECAGG_CSV}: these rows; its `stage` is Flower's stage id (`collect_masked_vectors`, `setup`, "
              "`share_keys`, `unmask`, ...) and `stage_label` the name used here", "",
              "| dataset | method | train users | clients | phase | rounds | stage | plain up B | plain down B "
              "| SecAgg+ up B | SecAgg+ down B | ratio up | ratio down |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in table:
        total = r["stage"] == "total"
        stage = "**total**" if total else r["stage_label"]
        plain = (f"{_cell(r['plain_up_bytes'], BYTES)} | {_cell(r['plain_down_bytes'], BYTES)}" if total
                 else " | ")  # the plain bytes: on the phase's total row
        method = f"{r['method']} ({r['sampled']})" if r.get("sampled") else r["method"]  # its client fraction
        lines.append(f"| {dataset_label(r['dataset'])} | {method} | {r['pct']}% | {r['clients']} | {r['phase']} "
                     f"| {r['rounds']} | {stage} | {plain} | {r['secagg_up_bytes']:{BYTES}} "
                     f"| {r['secagg_down_bytes']:{BYTES}} | {_cell(r['ratio_up'], '.2f')} "
                     f"| {_cell(r['ratio_down'], '.2f')} |")
    return "\n".join(lines) + "\n"


def csv(table: Sequence[Mapping[str, Any]]) -> str:
    """secagg-overhead.csv: the rows of :func:`rows`."""
    return to_csv(table, COLUMNS)


def render(flower_dir: str | Path = FLOWER_DIR, datasets: Sequence[str] = PIPELINE_DATASETS,
           budget: str | None = None) -> tuple[str, str]:
    """(Markdown section, CSV) from the flower stage's outputs present (of ``budget``: see :func:`load`)."""
    table = rows(load(flower_dir, datasets, budget))
    return markdown(table, flower_dir), csv(table)
