"""`esnfed check-data` and `esnfed import`: bring your own per-user time series into the
processed-data contract (docs/data-contract.md) and check a processed folder against it."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Literal, Optional

import typer
from rich.markup import escape

# Typer (0.29, pinned) raises the usage errors of the click it vendors, not of a click installed beside it.
from typer._click.exceptions import UsageError

from esnfed_cli._common import (EXIT_FAILURE, stop_cleanly, console, dataset_option, err_console, fail,
                                handle_errors, in_range)
from esnfed_cli.data_cmds import data_progress, manifest_table
from esnfed_cli.app import _Command, app
from esnfed_core.data.import_options import MISSING, TIME_UNITS
from esnfed_stages import layout


# Exit code of a usage error, as click's own.
EXIT_USAGE = 2


class _OneLineUsage(_Command):
    """A usage error (a bad or missing option or argument) as one line ``error: ...`` and exit 2,
    in the style of the command's other failures, instead of click's boxed usage text."""

    def make_context(self, info_name, args, parent=None, **extra):
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except UsageError as exc:
            _usage_line(exc, info_name)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except UsageError as exc:
            _usage_line(exc, ctx.info_name)


def _usage_line(exc: UsageError, command: str | None) -> None:
    message = " ".join(exc.format_message().split())
    usage = " ".join(exc.ctx.get_usage().split()).removeprefix("Usage: ") if exc.ctx is not None else ""
    err_console.print(f"[bold red]error:[/] {escape(message)} ({escape(usage) + '; ' if usage else ''}"
                      f"see `esnfed {command} --help`)", highlight=False, soft_wrap=True)
    raise typer.Exit(EXIT_USAGE)


@app.command("check-data", cls=_OneLineUsage)
@handle_errors
def check_data(
    folder: Annotated[Path, typer.Argument(help="A processed folder: manifest.json and <user>.npz files.")],
) -> None:
    """Check a processed folder against the data contract (docs/data-contract.md).

    Prints every violation, one line each ("<file>: <problem>"), and exits 1 if there is any.

    Example: esnfed check-data data/processed/example
    """
    from esnfed_stages.data import check_data as check_stage

    problems = check_stage.check_folder(folder)
    if len(problems) == 1:
        fail(problems[0])
    for line in problems:
        err_console.print(line, highlight=False, markup=False, soft_wrap=True)
    if problems:
        err_console.print(f"[bold red]error:[/] {len(problems)} violation(s) of the data contract in "
                          f"{escape(str(folder))}",
                          highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_FAILURE)
    console.print(f"{folder}: conforms to the processed-data contract", highlight=False, markup=False, soft_wrap=True)


def _split(value: Optional[str]) -> Optional[list[str]]:
    return None if value is None else [v.strip() for v in value.split(",") if v.strip()]


@app.command("import", cls=_OneLineUsage)
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
    time_unit: Annotated[Optional[Literal[tuple(TIME_UNITS)]], typer.Option(  # type: ignore[misc]
        "--time-unit", help="Unit of the time column: s, ms, us or ns (default: s).")] = None,
    rate: Annotated[Optional[float], typer.Option(
        "--rate", callback=in_range(0.0, low_open=True, finite=True),
        help="Resample to this rate (Hz, > 0); default: the rows as they are.")] = None,
    window: Annotated[Optional[int], typer.Option(
        "--window", min=1, help="Steps per window (required unless imports.<dataset> gives it).")] = None,
    max_gap: Annotated[Optional[float], typer.Option(
        "--max-gap", callback=in_range(0.0, low_open=True, finite=True),
        help="Seconds between two rows of one context beyond which the recording is cut there, not filled "
        "in (default: 5 sampling intervals, at least 1 s).")] = None,
    missing: Annotated[Optional[Literal[tuple(MISSING)]], typer.Option(  # type: ignore[misc]
        "--missing", help="A missing (empty or NaN) feature value: refuse it (the default), interpolate it "
        "linearly in time where its run of missing values spans at most --max-gap (a longer run cuts the "
        "recording, as a gap does; none at a recording's start or end), or drop its row.")] = None,
    classes: Annotated[Optional[str], typer.Option(
        "--classes", help="Label values in class order, comma-separated (default: sorted).")] = None,
    contexts: Annotated[Optional[str], typer.Option(
        "--contexts", help="Context values in the order the continual methods meet them, comma-separated, "
        "e.g. the recording order (default: sorted).")] = None,
    drop_labels: Annotated[Optional[str], typer.Option(
        "--drop-labels", help="Label values whose rows are dropped, comma-separated (default: none).")] = None,
    unlabelled: Annotated[bool, typer.Option(
        "--unlabelled", help="New recordings without a label column, for `esnfed predict` only: no label is "
        "read (imports.<dataset>'s label, classes and drop_labels are left out), the folder lists no classes, "
        "and the pipeline's stages refuse it. Give --out another root than the training data's (an unlabelled "
        "import never replaces a labelled folder).")] = False,
    out: Annotated[Path, typer.Option("--out", "--out-dir", help="Root of the processed data.")] = layout.PROCESSED_DIR,
    params: Annotated[Path, typer.Option(
        "--params", help="Params file whose imports.<dataset> gives the defaults (the default params.yaml is "
        "used if it exists; a file named here must exist).")]
    = Path("params.yaml"),
) -> None:
    """Import your own per-user labelled time series into the processed-data contract.

    One row per sample with columns for user, time, label, optional context, and features. Files
    are read in chunks; per user the rows are cut at context changes and at gaps in time
    (--max-gap: nothing is filled in across a gap; --missing: what a missing feature value does),
    resampled, windowed and z-scored; labels map to classes (the mapping is recorded in
    manifest.json). Options override params.yaml imports.<dataset> (docs/data-contract.md §5).

    Example, a CSV recordings.csv with the columns subject,t_ms,activity,session,ax,ay,az:

    esnfed import recordings.csv --dataset mystudy --user subject --time t_ms --time-unit ms
    --label activity --context session --features ax,ay,az --rate 50 --window 100

    writes data/processed/mystudy/<subject>.npz and manifest.json; check them with:
    esnfed check-data data/processed/mystudy

    To run it through the pipeline, declare it in params.yaml (datasets, imports.mystudy,
    partition.mystudy, budgets.*.space.mystudy; see the `example` dataset there) and run dvc repro.

    New recordings without labels, to predict with a trained model, under mystudy's settings:

    esnfed import new-session.csv --dataset mystudy --unlabelled --out data/new

    then: esnfed predict runs/models/mystudy/fedip/100/seed-0.json data/new/mystudy
    """
    with stop_cleanly("import"):  # a stopped import leaves no scratch folder behind
        _import(source, dataset, features, user, time, label, context, time_unit, rate, window, max_gap, missing,
                classes, contexts, drop_labels, unlabelled, out, params)


def _import(source, dataset, features, user, time, label, context, time_unit, rate, window, max_gap, missing,
            classes, contexts, drop_labels, unlabelled, out, params) -> None:
    from esnfed_stages.data import import_data as import_stage
    from esnfed_stages.data._datasets import check_own_name
    from esnfed_stages.params.imports import import_params
    from esnfed_stages.params.load import load_params

    dataset_option(check_own_name, "--dataset", dataset)  # before imports.<dataset> is read (run checks it too)
    # the default params.yaml may be absent; a file given by --params, or anything at the path (a
    # folder, a FIFO: load_params names it), is read
    p = load_params(params) if os.path.lexists(params) or params != layout.PARAMS_FILE else {}
    declared = (p.get("imports") or {}).get(dataset, {})
    for name, value in (("source", source), ("--features", features), ("--window", window)):
        key = name.lower().lstrip("-")
        if value is None and not (isinstance(declared, dict) and key in declared):
            raise typer.BadParameter(f"required: give it, or set imports.{dataset}.{key} in {params}",
                                     param_hint=name)
    options = import_params(
        declared, f"imports.{dataset}", source=None if source is None else str(source),
        features=_split(features), user=user, time=time, label=label, context=context,
        time_unit=time_unit, rate=rate, window=window, max_gap=max_gap, missing=missing, classes=_split(classes),
        contexts=_split(contexts), drop_labels=_split(drop_labels), labelled=False if unlabelled else None)
    warnings: list[str] = []
    with data_progress() as bar:
        task = bar.add_task(f"import {dataset}", total=None, item="")
        manifest = import_stage.run(
            dataset, options, out_root=out,
            on_read=lambda file, rows: bar.update(task, item=f"{file.name}: {rows:,} rows read"),
            on_user=lambda user, data: bar.update(task, advance=1, item=f"user {user} written"),
            warn=warnings.append)
    console.print(manifest_table(manifest, out / dataset))
    if options.context is not None and options.contexts is None:
        console.print(f"contexts in sorted order ({', '.join(manifest['context_names'])}): the continual methods "
                      f"meet them in this order; to give another (the recording order), set --contexts or "
                      f"imports.{dataset}.contexts", highlight=False, markup=False, soft_wrap=True)
    for line in warnings:
        err_console.print(f"[bold yellow]warning:[/] {escape(line)}", highlight=False, soft_wrap=True)
