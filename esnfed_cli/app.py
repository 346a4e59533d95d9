"""The Typer app every command module registers its command(s) on, and its global options.

Importing it registers no command: `esnfed_cli.main` imports the command modules (so a command
module can be imported first without an import cycle)."""

from __future__ import annotations

import sys
from typing import Annotated, Optional

import typer
from typer.core import TyperCommand, TyperGroup

from esnfed_cli._common import DEBUG_ENV, set_debug
from esnfed_core import __version__


def _flags_without_type(params: list) -> list:
    """A flag takes no value: no type column (Typer shows "<bool>", as if `--force true` were meant)."""
    for param in params:
        if getattr(param, "is_flag", False) and param.metavar is None:
            param.metavar = ""
    return params


class _Group(TyperGroup):
    def get_params(self, ctx):
        return _flags_without_type(super().get_params(ctx))


def _usage_name(param) -> str:
    """An argument in the usage line as click writes it: FOLDER (required), [SOURCE] (optional);
    Typer writes {folder}, which reads as a placeholder syntax rather than a value to give."""
    name = param.metavar or (param.name or "").upper()
    name = name if param.required else f"[{name}]"
    return name if param.nargs == 1 else f"{name}..."


class _Command(TyperCommand):
    def get_params(self, ctx):
        return _flags_without_type(super().get_params(ctx))

    def collect_usage_pieces(self, ctx):
        pieces = [self.options_metavar] if self.options_metavar else []
        for param in self.get_params(ctx):
            pieces += [_usage_name(param)] if param.param_type_name == "argument" else param.get_usage_pieces(ctx)
        return pieces


app = typer.Typer(
    cls=_Group,
    name="esnfed",
    help="Federated and continual Echo State Networks (IncFed, FedIP, FedCLIP) on WESAD, HHAR or your own "
    "data. Each command is one stage of the DVC pipeline (`dvc repro` runs them all), except init (a new "
    "project folder), flower-env (the flower stage's environment), download, check-data, predict, dvc-plots, "
    "flower-table and flower-export, which you run by hand, and check-params, which `make repro` runs "
    "first.",
    no_args_is_help=True,
    add_completion=True,  # --install-completion / --show-completion for bash, zsh, fish, PowerShell
    rich_markup_mode="rich",
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"esnfed {__version__}")
        raise typer.Exit()


@app.callback()
def main(
    version: Annotated[
        Optional[bool],
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = None,
    debug: Annotated[bool, typer.Option(
        "--debug", help=f"On failure, print the traceback before the one-line error (or set {DEBUG_ENV}=1).")] = False,
    wait: Annotated[bool, typer.Option(
        "--wait", help="When another run is writing the same outputs, wait for it instead of stopping.")] = False,
) -> None:
    """Federated and continual Echo State Networks on WESAD and HHAR."""
    set_debug(debug)
    # Not loaded yet, the output module starts with waiting off: importing it here only for that
    # would load numpy for every `--help`.
    if wait or "esnfed_stages._io" in sys.modules:
        from esnfed_stages._io import set_lock_wait

        set_lock_wait(wait)
