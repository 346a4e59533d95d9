"""`esnfed download`: fetch the official WESAD or HHAR archive with a progress bar, resume an
interrupted download, verify it and unpack it into the raw layout."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.progress import (BarColumn, DownloadColumn, SpinnerColumn, TextColumn,
                           TimeRemainingColumn, TransferSpeedColumn)
from rich.table import Table

from esnfed_cli._common import console, handle_errors, progress_bar
from esnfed_cli.data_cmds import DatasetOpt
from esnfed_cli.app import app
from esnfed_core.errors import ConfigError


def _default_out(params: Path) -> Path:
    """params.yaml data.raw_dir when there is a params file, else data/raw."""
    from esnfed_stages.params.load import load_params
    from esnfed_stages.params.sections import section

    if not params.is_file():
        return Path("data/raw")
    try:
        return Path(section(load_params(params), "data.raw_dir"))
    except ConfigError:
        return Path("data/raw")


@app.command()
@handle_errors
def download(
    dataset: DatasetOpt,
    out: Annotated[Optional[Path], typer.Option(
        "--out", "--out-dir", help="Raw data root; writes <out>/WESAD or <out>/HHAR. "
        "Default: params.yaml data.raw_dir (data/raw).")] = None,
    url: Annotated[Optional[str], typer.Option(
        "--url", help="Download from this address instead of the official one (a mirror).")] = None,
    sha256: Annotated[Optional[str], typer.Option(
        "--sha256", help="Expected sha256 of the archive (none is published for WESAD or HHAR; "
        "without it the digest is recorded in download.json, not checked).")] = None,
    size: Annotated[Optional[int], typer.Option(
        "--size", min=0, help="Expected archive size in bytes; 0 = do not check. Default: the known size "
        "(WESAD 2249444501; HHAR unknown, checked against the server's Content-Length).")] = None,
    cache: Annotated[Optional[Path], typer.Option(
        "--cache", help="Folder for the archive while downloading (resumable .part file). "
        "Default: <out>/.downloads.")] = None,
    unpack: Annotated[bool, typer.Option(
        "--unpack/--no-unpack", help="Unpack (nested zips too) into the raw layout, or keep the "
        "verified zip in <out>/<DATASET>/ (the HHAR reader reads the UCI zip in place).")] = True,
    keep_archive: Annotated[bool, typer.Option(
        "--keep-archive", help="Keep the downloaded archive in the cache folder after unpacking.")] = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Replace an existing non-empty <out>/<DATASET> folder.")] = False,
    retries: Annotated[int, typer.Option(
        "--retries", min=0, help="Resume attempts after a dropped connection.")] = 3,
    timeout: Annotated[float, typer.Option(
        "--timeout", min=1.0, help="Network timeout in seconds.")] = 60.0,
    deadline: Annotated[Optional[float], typer.Option(
        "--deadline", min=1.0, help="Give up after this many seconds in all (retries included); "
        "the same command resumes. Default: 6 hours.", show_default=False)] = None,
    params: Annotated[Path, typer.Option("--params", help="The params file (for data.raw_dir).")] = Path("params.yaml"),
) -> None:
    """Download, verify and unpack the official archive of a dataset (needs internet; run by hand).

    An interrupted download resumes where it stopped when the same command runs again. Nothing is
    unpacked unless the archive passes its checks; the dataset folder appears only when complete.
    """
    from esnfed_stages.data import download as download_stage

    out_root = out if out is not None else _default_out(params)
    spec = download_stage.spec_for(dataset.value, url, sha256, size)
    console.print(f"{spec.note}\nfrom {spec.url}", highlight=False, markup=False, soft_wrap=True)
    columns = (SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(), DownloadColumn(),
               TransferSpeedColumn(), TimeRemainingColumn())
    with progress_bar(*columns) as bar:
        tasks: dict[str, int] = {}

        def progress(phase: str, done: int, total: int | None) -> None:
            if phase not in tasks:
                tasks[phase] = bar.add_task(phase, total=total)
            bar.update(tasks[phase], completed=done, total=total)

        result = download_stage.run(
            dataset.value, out_root, url=url, sha256=sha256, size=size, cache_dir=cache, unpack=unpack,
            keep_archive=keep_archive, force=force, retries=retries, timeout=timeout,
            deadline=download_stage.DEADLINE if deadline is None else deadline,
            progress=progress)
    table = Table(title=f"{dataset.value} downloaded -> {escape(str(result.folder))}")
    table.add_column("item")
    table.add_column("value", overflow="fold")
    table.add_row("archive", f"{spec.filename} ({result.size:,} bytes)")
    if result.resumed_from:
        table.add_row("resumed from", f"{result.resumed_from:,} bytes")
    table.add_row("sha256", result.sha256 + ("" if "sha256" in result.verified else "  (recorded; no published checksum)"))
    table.add_row("verified", ", ".join(result.verified))
    files = [p for p in result.folder.rglob("*") if p.is_file()] if result.folder else []
    table.add_row("files", f"{len(files)} ({sum(p.stat().st_size for p in files):,} bytes)")
    console.print(table)
