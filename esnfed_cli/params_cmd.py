"""`esnfed check-params`: the whole params file checked as every stage checks it first, before
`dvc repro` (`make repro` runs it), whose own error names a path where the schema names the key."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from esnfed_cli._common import console, handle_errors
from esnfed_cli.app import app


@app.command("check-params")
@handle_errors
def check_params(
    params: Annotated[Path, typer.Option("--params", help="The params file to check.")] = Path("params.yaml"),
) -> None:
    """Check a params file as a whole, as every stage does before it runs.

    Unknown keys, wrong types, values out of range and settings that cannot work together (e.g. a
    declared dataset whose data no stage writes, or an import of a dataset not declared: embedded,
    imported) stop it with one line naming the key, exit code 1. `make repro` runs it before `dvc
    repro`: there such a mistake would surface as DVC's missing dependency, a path, before any stage
    could name the key, or not at all (an undeclared dataset imported for nothing).

    Example: esnfed check-params --params params.yaml
    """
    from esnfed_stages.data._datasets import declared
    from esnfed_stages.params.load import load_params

    loaded = load_params(params)
    embedded = loaded.get("embedded") or {}
    parts = [f"datasets {', '.join(declared(loaded))}"] + [
        f"embedded.{stage} {', '.join(embedded[stage]) or 'none'}" for stage in ("synthesize", "preprocess")
        if stage in embedded] + ([f"imported {', '.join(loaded['imported']) or 'none'}"]
                                 if loaded.get("imported") is not None else [])
    console.print(f"{params}: valid ({'; '.join(parts)})", markup=False, highlight=False, soft_wrap=True)
