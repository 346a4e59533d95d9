"""`esnfed check-data` and `esnfed import`: bring your own per-user time series into the
processed-data contract (docs/data-contract.md) and check a processed folder against it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer

from esnfed_cli._common import EXIT_FAILURE, console, err_console, handle_errors
from esnfed_cli.main import app
from esnfed_stages import check_data as check_stage
from esnfed_stages import import_data as import_stage
from esnfed_stages.params import load_params


@app.command("check-data")
@handle_errors
def check_data(
    folder: Annotated[Path, typer.Argument(help="A processed folder: manifest.json and <user>.npz files.")],
) -> None:
    """Check a processed folder against the data contract (docs/data-contract.md).

    Prints every violation, one line each ("<file>: <problem>"), and exits 1 if there is any.

    Example: esnfed check-data data/processed/example
    """
    problems = check_stage.check_folder(folder)
    for line in problems:
        err_console.print(line, highlight=False, markup=False, soft_wrap=True)
    if problems:
        err_console.print(f"[bold red]error:[/] {len(problems)} violation(s) of the data contract in {folder}",
                          highlight=False)
        raise typer.Exit(EXIT_FAILURE)
    console.print(f"{folder}: conforms to the processed-data contract", highlight=False)


def _split(value: Optional[str]) -> Optional[list[str]]:
    return None if value is None else [v.strip() for v in value.split(",") if v.strip()]


@app.command("import")
@handle_errors
def import_(
    source: Annotated[Optional[Path], typer.Argument(
        help="CSV / Parquet file, folder of them, or .npz of 1-D arrays. Default: params.yaml "
        "imports.<dataset>.source.")] = None,
    dataset: Annotated[str, typer.Option("--dataset", help="Name of the dataset: writes <out>/<name>/.")] = ...,
    features: Annotated[Optional[str], typer.Option(
        "--features", help="Feature columns, comma-separated (required unless imports.<dataset> gives them).")] = None,
    user: Annotated[Optional[str], typer.Option("--user", help="User column (default: user).")] = None,
    time: Annotated[Optional[str], typer.Option("--time", help="Time column, a number (default: time).")] = None,
    label: Annotated[Optional[str], typer.Option("--label", help="Label column (default: label).")] = None,
    context: Annotated[Optional[str], typer.Option(
        "--context", help="Context column (continual experiences); none by default.")] = None,
    time_unit: Annotated[Optional[str], typer.Option("--time-unit", help="s, ms, us or ns (default: s).")] = None,
    rate: Annotated[Optional[float], typer.Option(
        "--rate", help="Resample to this rate (Hz); default: the rows as they are.")] = None,
    window: Annotated[Optional[int], typer.Option(
        "--window", help="Steps per window (required unless imports.<dataset> gives it).")] = None,
    classes: Annotated[Optional[str], typer.Option(
        "--classes", help="Label values in class order, comma-separated (default: sorted).")] = None,
    drop_labels: Annotated[Optional[str], typer.Option(
        "--drop-labels", help="Label values whose rows are dropped, comma-separated.")] = None,
    out: Annotated[Path, typer.Option("--out", help="Root of the processed data.")] = Path("data/processed"),
    params: Annotated[Path, typer.Option(
        "--params", help="Params file whose imports.<dataset> gives the defaults (used if it exists).")]
    = Path("params.yaml"),
) -> None:
    """Import your own per-user labelled time series into the processed-data contract.

    One row per sample with columns for user, time, label, optional context, and features. Files are read in chunks; per user the rows are resampled, windowed and z-scored; labels map to classes (the mapping is recorded in manifest.json). Options override params.yaml imports.<dataset> (docs/data-contract.md §5).

    Example, a CSV recordings.csv with the columns subject,t_ms,activity,session,ax,ay,az:

    esnfed import recordings.csv --dataset mystudy --user subject --time t_ms --time-unit ms --label activity --context session --features ax,ay,az --rate 50 --window 100

    writes data/processed/mystudy/<subject>.npz and manifest.json; check them with: esnfed check-data data/processed/mystudy

    To run it through the pipeline, declare it in params.yaml (datasets, imports.mystudy, partition.mystudy, budgets.*.space.mystudy; see the `example` dataset there) and run dvc repro.
    """
    p = load_params(params) if os.path.lexists(params) else {}  # a folder or a FIFO there: load_params names it
    declared = (p.get("imports") or {}).get(dataset, {})
    options = import_stage.import_params(
        declared, f"imports.{dataset}", source=None if source is None else str(source),
        features=_split(features), user=user, time=time, label=label, context=context,
        time_unit=time_unit, rate=rate, window=window, classes=_split(classes),
        drop_labels=_split(drop_labels))
    manifest = import_stage.run(dataset, options, out_root=out)
    n = sum(e["windows"] for e in manifest["users"].values())
    console.print(f"{dataset}: {len(manifest['users'])} users, {n} windows of {manifest['window']} x "
                  f"{manifest['n_features']}; classes {manifest['label_map']}; contexts "
                  f"{', '.join(manifest['context_names'])} -> {out / dataset}", highlight=False)
