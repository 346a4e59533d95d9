"""`esnfed check-data` and `esnfed import`: bring your own per-user time series into the
processed-data contract (docs/data-contract.md) and check a processed folder against it."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from esnfed_cli._common import EXIT_FAILURE, console, err_console, handle_errors
from esnfed_cli.main import app
from esnfed_stages import check_data as check_stage


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
