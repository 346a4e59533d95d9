"""`esnfed init DIR`: a new project folder from the installed package (esnfed_stages/init_project.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from esnfed_cli._common import console, handle_errors
from esnfed_cli.app import app


@app.command("init")
@handle_errors
def init(
    folder: Annotated[Path, typer.Argument(metavar="DIR", help="The new project's folder: absent or empty.")],
    git: Annotated[Optional[bool], typer.Option(
        "--git/--no-git", help="Make it a git repository too (default: where git is installed); "
        "--no-git runs `dvc init --no-scm`.", show_default=False)] = None,
) -> None:
    """Write a runnable project into DIR: params.yaml, dvc.yaml, .dvcignore, DVC initialised.

    Runs outside the source checkout, from the installed package: the stages' code deps name the
    installed package's folders, so a new install of other code reruns them (`dvc status` says
    so). A DIR that exists and is not empty is refused. Then: cd DIR && esnfed flower-env (the
    flower stage's environment) && dvc repro.

    Example: esnfed init exp
    """
    from esnfed_stages.init_project import init_project

    written = init_project(folder, git=git)
    console.print(f"{folder}: new project ({', '.join(written)}); next: cd {folder} && esnfed flower-env && dvc repro",
                  markup=False, highlight=False, soft_wrap=True)
