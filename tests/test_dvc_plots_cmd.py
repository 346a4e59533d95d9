"""`esnfed dvc-plots`: a declared dataset's plot declarations printed, or written into the plots file
(dvc-plots/dvc.yaml) atomically (a block between its markers, replaced on a rerun; the repository's plots left alone;
a differing declaration refused with one line, nothing written). What the plots are and that DVC
draws them: tests/test_dvc_plots.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from esnfed_cli.main import app
from esnfed_stages.layout import DVC_PLOTS_FILE as PLOTS
from test_dvc_plots import ROOT, with_mine

runner = CliRunner()
DVC_YAML = (ROOT / PLOTS).read_text(encoding="utf-8")  # the repository's plots file


@pytest.fixture
def project(tmp_path: Path) -> Path:
    """A folder with the repository's plots file and its params.yaml with `mine` of 9 contexts declared."""
    (tmp_path / PLOTS).parent.mkdir()
    (tmp_path / PLOTS).write_text(DVC_YAML, encoding="utf-8")
    _params(tmp_path, with_mine(9))
    return tmp_path


def _params(root: Path, params: dict) -> None:
    (root / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False), encoding="utf-8")


def _run(root: Path, *args: str):
    return runner.invoke(app, ["dvc-plots", *args, "--params", str(root / "params.yaml"),
                               "--dvc-file", str(root / PLOTS), "--data-dir", str(root / "data")])


def _ok(root: Path, *args: str) -> str:
    result = _run(root, *args)
    assert result.exit_code == 0, result.output
    return result.output


def _error(root: Path, *args: str) -> str:
    result = _run(root, *args)
    assert result.exit_code == 1, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


def _ids(text: str) -> list[str]:
    return [next(iter(e)) for e in yaml.safe_load(text)["plots"] if isinstance(e, dict)]


def test_write_appends_the_printed_block_to_dvc_yamls_plots_and_a_rerun_changes_nothing(project):
    printed = _ok(project, "--dataset", "mine")
    assert printed.startswith("  # >>> esnfed dvc-plots --dataset mine (") and \
        printed.endswith("  # <<< esnfed dvc-plots --dataset mine\n")
    out = _ok(project, "--dataset", "mine", "--write")
    assert " ".join(out.split()) == f"{project / PLOTS}: mine: 21 plots added"
    text = (project / PLOTS).read_text(encoding="utf-8")
    assert text == DVC_YAML + printed  # the file ends with its plots: the block follows their last entry
    before = yaml.safe_load(DVC_YAML)
    after = yaml.safe_load(text)
    assert after["vars"] == before["vars"] and after["plots"][:len(before["plots"])] == before["plots"]
    assert len(after["plots"]) == len(before["plots"]) + 21
    out = _ok(project, "--dataset", "mine", "--write")
    assert " ".join(out.split()) == f"{project / PLOTS}: mine: unchanged (21 plots)"
    assert (project / PLOTS).read_text(encoding="utf-8") == text
    assert sorted(p.name for p in (project / PLOTS).parent.iterdir()) == ["dvc.yaml"]  # no temporary file left


def test_a_rerun_after_the_contexts_change_replaces_the_block_and_nothing_else(project):
    """9 contexts: each matrix in two plots (5 + 4 lines); 5 contexts: one plot each, named as the
    repository's, and the split ones gone."""
    _ok(project, "--dataset", "mine", "--write")
    assert "accuracy-matrix-mine-clip-naive-contexts-5-8" in _ids((project / PLOTS).read_text())
    _params(project, with_mine(5))
    out = _ok(project, "--dataset", "mine", "--write")
    assert " ".join(out.split()) == f"{project / PLOTS}: mine: 15 plots written anew (were 21)"
    text = (project / PLOTS).read_text(encoding="utf-8")
    assert text == DVC_YAML + _ok(project, "--dataset", "mine")
    ids = _ids(text)
    assert "accuracy-matrix-mine-clip-naive" in ids and not [i for i in ids if "-contexts-" in i]


def test_the_repositorys_datasets_are_current_and_the_file_is_left_as_it_is(project):
    out = _ok(project, "--dataset", "wesad", "--dataset", "hhar", "--dataset", "example", "--write")
    assert [" ".join(line.split()) for line in out.strip().splitlines()] == [
        f"{project / PLOTS}: {ds}: unchanged ({n} plots)"
        for ds, n in (("wesad", 16), ("hhar", 16), ("example", 15))]  # the study datasets' alignment plot too
    assert (project / PLOTS).read_text(encoding="utf-8") == DVC_YAML


def test_plots_pasted_without_the_markers_are_declared_already_when_they_are_the_same(project):
    pasted = "".join(line for line in DVC_YAML.splitlines(keepends=True) if "esnfed dvc-plots --dataset wesad" not in line)
    (project / PLOTS).write_text(pasted, encoding="utf-8")
    out = _ok(project, "--dataset", "wesad", "--write")
    assert " ".join(out.split()) == f"{project / PLOTS}: wesad: declared already (16 plots)"
    assert (project / PLOTS).read_text(encoding="utf-8") == pasted


def test_a_study_dataset_of_your_own_gets_its_alignment_plot_written_too(project):
    """`mine` in study_datasets: its block holds heterogeneous-alpha-mine (its columns of the
    alignment CSV), as the plots file ships heterogeneous-alpha-wesad and -hhar."""
    params = with_mine(9)
    params["study_datasets"] = [*params["study_datasets"], "mine"]
    _params(project, params)
    out = _ok(project, "--dataset", "mine", "--write")
    assert " ".join(out.split()) == f"{project / PLOTS}: mine: 22 plots added"
    plots = dict(next(iter(e.items())) for e in yaml.safe_load((project / PLOTS).read_text())["plots"]
                 if isinstance(e, dict))
    assert plots["heterogeneous-alpha-mine"]["y"] == {"../reports/plots/heterogeneous-alpha.csv": ["mine_25", "mine_100"]}
    assert plots["heterogeneous-alpha-wesad"]["y"] == {"../reports/plots/heterogeneous-alpha.csv": ["wesad_25", "wesad_100"]}


def test_a_plot_declared_otherwise_that_differs_is_refused_naming_it_and_nothing_is_written(project):
    """A plot of mine added by hand (as the README asked before the command) with another title: the
    command will not overwrite what it did not write."""
    text = DVC_YAML + ("  - stream-mine-federated-25:\n"
                       "      {x: context, y: {../reports/plots/stream-mine-federated-25.csv: [naive]}}\n")
    (project / PLOTS).write_text(text, encoding="utf-8")
    line = _error(project, "--dataset", "mine", "--write")
    assert line == (f"error: {project / PLOTS}: plots: stream-mine-federated-25 is declared already, not by "
                    "`esnfed dvc-plots --dataset mine`, and differs; remove mine's plots there and run it again")
    assert (project / PLOTS).read_text(encoding="utf-8") == text
    assert sorted(p.name for p in (project / PLOTS).parent.iterdir()) == ["dvc.yaml"]


@pytest.mark.parametrize("layout, indent", [
    ("stages: {}\n", "  "),                                                     # no plots yet
    ("stages: {}\nplots:\n    - reports/figures\n", "    "),                    # the file's own indent
    ("plots:\n  - reports/figures\n\n# metrics\nmetrics:\n  - m.json\n", "  "),  # plots before another key
])
def test_write_adds_to_the_plots_of_any_block_layout(project, layout, indent):
    (project / PLOTS).write_text(layout, encoding="utf-8")
    _ok(project, "--dataset", "example", "--write")
    text = (project / PLOTS).read_text(encoding="utf-8")
    doc = yaml.safe_load(text)
    assert _ids(text) == _ids("plots:\n" + _ok(project, "--dataset", "example"))
    assert doc.get("metrics") == yaml.safe_load(layout).get("metrics")
    assert f"\n{indent}- stream-example-federated-25:\n" in text


def test_a_plots_list_in_flow_style_is_refused_not_duplicated(project):
    (project / PLOTS).write_text("stages: {}\nplots: [reports/figures]\n", encoding="utf-8")
    line = _error(project, "--dataset", "example", "--write")
    assert line.startswith(f"error: {project / PLOTS}: plots: not a block list")
    assert (project / PLOTS).read_text(encoding="utf-8") == "stages: {}\nplots: [reports/figures]\n"


def test_the_contexts_of_your_dataset_come_from_its_manifest_when_params_do_not_list_them(project):
    params = with_mine(9)
    del params["imports"]["mine"]["contexts"]
    _params(project, params)
    line = _error(project, "--dataset", "mine")
    manifest = project / "data" / "processed" / "mine" / "manifest.json"
    assert line == (f"error: imports.mine.contexts: not set and {manifest} not found: import the dataset first "
                    "(`dvc repro import@mine`), or list its contexts there (the accuracy-matrix plots draw a line "
                    "per context)")
    manifest.parent.mkdir(parents=True)
    manifest.write_text(json.dumps({"context_names": ["lab", "home", "outdoor"]}))
    plots = yaml.safe_load("plots:\n" + _ok(project, "--dataset", "mine"))["plots"]
    matrix = dict(next(iter(p.items())) for p in plots)["accuracy-matrix-mine-fedclip-joint"]
    assert matrix["y"] == {"../reports/plots/accuracy-matrix-mine-fedclip-joint.csv":
                           ["on_context0", "on_context1", "on_context2"]}
    manifest.write_text(json.dumps({"context_names": []}))
    assert _error(project, "--dataset", "mine").startswith(f"error: {manifest}: context_names must be a non-empty list")


def test_a_dataset_without_contexts_has_its_test_accuracy_plot_only(project):
    params = with_mine(9)
    params["continual_datasets"].remove("mine")
    _params(project, params)
    assert _ids("plots:\n" + _ok(project, "--dataset", "mine")) == ["test-accuracy-mine"]


def test_an_undeclared_dataset_is_a_usage_error_naming_the_declared_ones(project):
    result = _run(project, "--dataset", "other", "--write")
    assert result.exit_code == 2
    flat = " ".join(w for w in result.output.split() if w not in "│╭╮╰╯─")
    assert "'other' is not declared in params.yaml datasets (declared: wesad, hhar, example, mine)" in flat
    assert (project / PLOTS).read_text(encoding="utf-8") == DVC_YAML


def test_help_explains_every_option():
    result = runner.invoke(app, ["dvc-plots", "--help"], env={"COLUMNS": "2000"})
    assert result.exit_code == 0
    flat = " ".join(result.output.split())
    for option, says in (("--dataset", "repeat for several"), ("--write", "atomically"),
                         ("--dvc-file", "The dvc.yaml of plots --write edits"),
                         ("--params", "continual_datasets"), ("--data-dir", "manifest.json")):
        assert option in flat and says in flat, option
