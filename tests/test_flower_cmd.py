"""`esnfed flower` in the main environment: without the Flower environment it fails with one line
naming the make target and writes nothing; bad --app / --secagg / --pct fail with one line.
The command's run through the Flower environment is tested in tests_flower/test_flower_cmd.py."""

from __future__ import annotations

from typer.testing import CliRunner

from esnfed_cli.main import app

runner = CliRunner()


def _invoke(tmp_path, *extra):
    return runner.invoke(app, ["flower", "--dataset", "wesad", "--data-dir", str(tmp_path / "data"),
                               "--runs-dir", str(tmp_path / "runs"), "--out-dir", str(tmp_path / "out"),
                               *extra])


def test_missing_flower_environment_is_one_line_naming_the_target(tmp_path):
    missing = tmp_path / "no-venv" / "bin" / "python"
    result = _invoke(tmp_path, "--flower-python", str(missing))
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and str(missing) in lines[0] and "make flower-env" in lines[0]
    assert not (tmp_path / "out").exists()


def test_bad_app_secagg_and_pct_are_one_line(tmp_path):
    for extra, word in ((["--app", "clip"], "--app"), (["--app", "fedavg", "--secagg"], "--secagg"),
                        (["--pct", "30"], "--pct")):
        result = _invoke(tmp_path, *extra)
        assert result.exit_code == 1, extra
        assert len(result.output.strip().splitlines()) == 1 and word in result.output, result.output
    assert not (tmp_path / "out").exists()
