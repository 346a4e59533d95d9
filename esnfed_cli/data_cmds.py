"""`esnfed synthesize`, `esnfed preprocess` and `esnfed partition`: the data stages (embedded raw
files, windows per user plus manifest, fixed user splits) with progress bars and summaries."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from esnfed_cli._common import console, dataset_option, declared_dataset, handle_errors, progress_bar
from esnfed_cli.app import app
from esnfed_core.vocabulary import Dataset, Source
from esnfed_stages import layout


DatasetOpt = Annotated[Dataset, typer.Option("--dataset", help="Which dataset: wesad or hhar.",
                                             case_sensitive=False)]
ParamsOpt = Annotated[Path, typer.Option("--params", help="The params file to read.")]
# Stages that run on any dataset params.yaml declares take a plain name, checked there.
DeclaredOpt = Annotated[str, typer.Option(
    "--dataset", help="A dataset declared in params.yaml datasets (wesad, hhar, or your own).")]
# preprocess: the papers' datasets, or a protocol variant of one (params.yaml preprocess.<name>.base)
PreprocessOpt = Annotated[str, typer.Option(
    "--dataset", help="wesad, hhar, or a variant of one declared in params.yaml preprocess.<name> with "
    "base: wesad|hhar (e.g. the ESANN 2022 protocol's hhar_esann, docs/protocol.md).")]
SynthOpt = Annotated[str, typer.Option(
    "--dataset", help="Which embedded dataset: wesad, hhar, or example (a plain CSV for `esnfed import`).")]


def data_progress() -> Progress:
    """Steps done of synthesize, preprocess or import, the current item in the last column (``item``)."""
    return progress_bar(SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(),
                        MofNCompleteColumn(), TextColumn("{task.fields[item]}"), TimeElapsedColumn())


def _size(n: float) -> str:
    unit = "B"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            break
        n /= 1024
    return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"


def _natural(text: str) -> list:
    """Sort key putting S2 before S10."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", text)]


@app.command()
@handle_errors
def synthesize(
    dataset: SynthOpt,
    out: Annotated[Optional[Path], typer.Option(
        "--out", "--out-dir", help="Root folder for the raw files (<out>/WESAD, <out>/HHAR or <out>/EXAMPLE). "
        "Default: params.yaml data.synthetic_dir.")] = None,
    seed: Annotated[Optional[int], typer.Option(
        "--seed", min=0, help="Seed of the generator (same seed, same bytes). "
        "Default: params.yaml synthetic.<dataset>.seed.")] = None,
    params: ParamsOpt = Path("params.yaml"),
) -> None:
    """Write the embedded synthetic dataset in the original file layout (the default input).

    Size and seed come from params.yaml synthetic.<dataset>; the folder is replaced only once complete.
    """
    from esnfed_stages.data import synthesize as synthesize_stage
    from esnfed_stages.data._datasets import check_synthesized
    from esnfed_stages.params.load import load_params

    dataset_option(check_synthesized, dataset)  # a usage error (exit 2), before params.yaml is read
    options = synthesize_stage.synthesize_params(load_params(params), dataset, seed, out)
    with data_progress() as bar:
        task = bar.add_task(f"synthesize {dataset}", total=options.steps, item="")
        result = synthesize_stage.run(
            options, progress=lambda *what: bar.update(task, advance=1, item=str(what[0]) if what else ""))
    table = Table(title=f"synthetic {dataset} -> {escape(str(result.folder))}")
    table.add_column("folder")
    table.add_column("files", justify="right")
    table.add_column("size", justify="right")
    groups: dict[str, list[Path]] = {}
    for f in result.files:
        groups.setdefault(f.parent.relative_to(result.folder.parent).as_posix(), []).append(f)
    for folder, files in sorted(groups.items(), key=lambda kv: _natural(kv[0])):
        table.add_row(folder, str(len(files)), _size(sum(f.stat().st_size for f in files)))
    console.print(table)


@app.command()
@handle_errors
def preprocess(
    dataset: PreprocessOpt,
    source: Annotated[Optional[Source], typer.Option(
        "--source", help="synthetic (the files of `esnfed synthesize`) or raw (the real dataset). "
        "Default: params.yaml data.source.", case_sensitive=False)] = None,
    raw_dir: Annotated[Optional[Path], typer.Option(
        "--raw-dir", help="Root folder holding WESAD/ or HHAR/. Default: params.yaml "
        "data.synthetic_dir or data.raw_dir, by source.")] = None,
    out: Annotated[Path, typer.Option(
        "--out", "--out-dir", help="Root of the processed data; writes <out>/<dataset>/.")] = layout.PROCESSED_DIR,
    params: ParamsOpt = Path("params.yaml"),
) -> None:
    """Windows, labels, contexts and per-user z-scores -> <out>/<dataset>/<user>.npz + manifest.json.

    Follows PROTOCOL §1 with params.yaml preprocess.<dataset>. Users are processed one at a time;
    the output folder is replaced only when every user succeeded.
    """
    from esnfed_stages.data import preprocess as preprocess_stage
    from esnfed_stages.params.load import load_params

    p = load_params(params)
    total = preprocess_stage.expected_users(p.get("preprocess", {}).get(dataset))
    dataset_option(preprocess_stage.reader_for, p, dataset)  # a usage error (exit 2) naming --dataset
    options = preprocess_stage.preprocess_params(p, dataset, source.value if source else None, raw_dir)
    with data_progress() as bar:
        task = bar.add_task(f"preprocess {dataset}", total=total, item="")
        manifest = preprocess_stage.run(options, out_root=out,
                                        on_user=lambda user, data: bar.update(task, advance=1, item=user))
    console.print(manifest_table(manifest, out / dataset))


# Users the summary lists one row each (the rest in one line; "all" counts every user): tens of
# thousands of rows took longer to print than to import.
TABLE_USERS = 50


def manifest_table(manifest: dict, folder: Path) -> Table:
    """The summary of a processed folder (preprocess, import): windows per user and context, class shares."""
    classes = manifest["classes"]
    table = Table(title=escape(f"{manifest['dataset']} ({manifest['source']}): {len(manifest['users'])} users, windows "
                               f"of {manifest['window']} steps x {manifest['n_features']} features -> {folder}"))
    table.add_column("user")
    table.add_column("windows", justify="right")
    # class and context names are the user's own labels (import): never markup
    table.add_column(escape("per context (" + ", ".join(manifest["context_names"]) + ")"), justify="right")
    table.add_column(escape("class shares (" + ", ".join(classes) + ")" if classes else "class shares (unlabelled)"),
                     justify="right")
    totals = [0] * len(classes)
    for i, (user, entry) in enumerate(manifest["users"].items()):
        counts = entry["class_counts"]
        totals = [a + b for a, b in zip(totals, counts)]
        if i < TABLE_USERS:
            table.add_row(user, str(entry["windows"]), " ".join(map(str, entry["windows_per_context"])),
                          " ".join(f"{c / max(sum(counts), 1):.0%}" for c in counts))
    if len(manifest["users"]) > TABLE_USERS:
        table.add_row(f"... {len(manifest['users']) - TABLE_USERS} more", "", "", "")
    all_windows = sum(e["windows"] for e in manifest["users"].values())
    table.add_row("[bold]all", f"[bold]{all_windows}", "",
                  " ".join(f"{c / max(sum(totals), 1):.0%}" for c in totals))
    return table


@app.command()
@handle_errors
def partition(
    dataset: DeclaredOpt,
    processed_dir: Annotated[Path, typer.Option(
        "--processed-dir", help="Root of the processed data (reads <dir>/<dataset>/manifest.json).")]
    = layout.PROCESSED_DIR,
    out: Annotated[Path, typer.Option(
        "--out", "--out-dir", help="Folder of the partition files; writes <out>/<dataset>.json.")] = layout.PARTITIONS_DIR,
    params: ParamsOpt = Path("params.yaml"),
) -> None:
    """User splits (nested training subsets, validation, test) -> <out>/<dataset>.json.

    The splits are params.yaml partition.<dataset> (PROTOCOL §1): fixed lists, or fractions with a
    seed drawn from the manifest's users; every user must be in the manifest.
    """
    from esnfed_stages.data import partition as partition_stage
    from esnfed_stages.params.load import load_params

    p = load_params(params)
    options = partition_stage.partition_params(p, declared_dataset(p, dataset))
    doc = partition_stage.run(options, processed_root=processed_dir, out_root=out)
    table = Table(title=f"{dataset} partition -> {escape(str(out / (dataset + '.json')))}")
    table.add_column("split")
    table.add_column("users", justify="right")
    table.add_column("names")
    for pct, users in doc["train"].items():
        table.add_row(f"train {pct}%", str(len(users)), " ".join(users))
    table.add_row("validation", str(len(doc["validation"])), " ".join(doc["validation"]))
    table.add_row("test", str(len(doc["test"])), " ".join(doc["test"]))
    console.print(table)
    console.print(f"contexts: {', '.join(doc['context_names'])}", highlight=False, markup=False, soft_wrap=True)
