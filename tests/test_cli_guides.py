"""Every command's --help ends with the user-guide page that explains it (esnfed_cli.guides)."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from esnfed_cli.guides import GUIDE
from esnfed_cli.main import app

ROOT = Path(__file__).resolve().parents[1]
COMMANDS = [info.name or info.callback.__name__ for info in app.registered_commands]


def test_every_command_has_a_guide_page_and_no_page_names_a_command_that_is_gone():
    assert sorted(GUIDE) == sorted(COMMANDS)


@pytest.mark.parametrize("command", COMMANDS)
def test_the_guide_page_exists_and_speaks_of_the_command(command):
    page = ROOT / GUIDE[command]
    assert page.is_file(), page
    assert f"esnfed {command}" in page.read_text(), f"{page} does not mention `esnfed {command}`"


@pytest.mark.parametrize("command", COMMANDS)
def test_help_ends_with_the_guide_page(command):
    out = CliRunner().invoke(app, [command, "--help"], terminal_width=100)
    assert out.exit_code == 0, out.output
    assert out.output.rstrip().splitlines()[-1].strip() == f"Guide: {GUIDE[command]}"
