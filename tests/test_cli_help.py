"""`esnfed <command> --help` says what the code accepts: every --algo choice is explained in the
option's text (not only listed as a choice), and the report's outputs are named as written."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from esnfed_cli.main import app
from esnfed_core.vocabulary import Algo

runner = CliRunner()


def _help(*command: str) -> str:
    result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": "2000"})
    assert result.exit_code == 0, result.output
    return result.output


@pytest.mark.parametrize("command", ["select", "retrain", "assess"])
def test_every_algo_is_explained(command):
    line = next(l for l in _help(command).splitlines() if "--algo" in l)
    text = line.split("The method:", 1)[1]  # the explanation, after the list of choices
    missing = [a.value for a in Algo if a.value not in text]
    assert not missing, f"--algo help of {command} does not explain {missing}"


def test_report_help_names_its_metrics_folder():
    out = _help("report")
    assert "metrics.json" not in out  # report writes reports/metrics/<dataset>-<method>.json
    assert "metrics/" in out and "<dataset>-<method>.json" in out
