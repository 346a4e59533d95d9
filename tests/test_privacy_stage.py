"""select -> retrain -> assess -> privacy -> report through the CLI on a tiny dataset: ε = ∞ is the
assessed non-private model, the finite ε carry the accountant's noise multipliers, the report
renders the privacy table and figure, and a bad privacy param fails with one line naming the key."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from esnfed_cli.main import app
from esnfed_core.privacy import noise_multiplier
from esnfed_core.errors import DataError
from esnfed_stages.report import privacy_report
from esnfed_stages.params.schema import embedded_read
from experiment_data import cli_ok, make_dataset, small_params, stage_options, write_params

pytestmark = pytest.mark.pipeline
runner = CliRunner()
EPSILONS = [1.0, 4.0, float("inf")]
IP_CLIP = {"wesad": 0.1, "mine": 0.2}  # FedIP's bound per dataset (a number for all is the default form)


OUTPUT: dict[str, str] = {}  # what `esnfed privacy` printed in the fixture


def declare_own(params: dict, name: str = "mine") -> dict:
    """``params`` with a dataset of the user's own declared beside wesad, as the
    embedded example is: its import, partition and search space (its processed files: make_dataset)."""
    params["datasets"], params["continual_datasets"] = ["wesad", name], ["wesad"]
    params["study_datasets"] = ["wesad"]  # the papers' studies on the declared paper dataset only
    params["imports"][name] = dict(params["imports"]["example"], source=f"{name}.csv")
    params["imported"] = {name: f"{name}.csv"}  # what dvc.yaml imports: the declared one (example paused)
    params["embedded"] = embedded_read(params)  # wesad's embedded data only
    params["partition"][name] = {"fractions": {"validation": 0.2, "test": 0.2}, "seed": 0}
    for budget in params["budgets"].values():
        budget["space"][name] = dict(budget["space"]["example"], units=[8, 12])
    return params


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("privacy")
    make_dataset(root)
    make_dataset(root, "mine", seed=1)
    params = declare_own(small_params())
    params["privacy"] = {"epsilons": EPSILONS, "delta": "auto", "relation": "user", "clip": 0.05,
                         "ip_clip": IP_CLIP, "pct": "100", "methods": ["incfed", "fedip"]}
    write_params(root, params)
    for ds in ("wesad", "mine"):
        for algo in ("incfed", "fedip"):
            cli_ok("select", "--algo", algo, "--pct", "100", *stage_options(root, ds))
            cli_ok("retrain", "--algo", algo, "--pct", "100", *stage_options(root, ds))
    # without --dataset: every declared dataset, the user's too
    OUTPUT["privacy"] = cli_ok("privacy", *stage_options(root)[2:], "--out-dir", str(root / "runs" / "privacy"))
    return root


def test_the_command_ends_saying_where_it_wrote(root):
    """The summary table did not say where the document went; the line is whole in an 80-column log."""
    wrote = [line for line in OUTPUT["privacy"].splitlines() if line.startswith("wrote ")]
    assert wrote == [f"wrote {root / 'runs' / 'privacy' / ds}.json" for ds in ("wesad", "mine")]
    assert OUTPUT["privacy"].splitlines()[-1] == wrote[-1]


def test_privacy_runs_on_a_declared_dataset_of_your_own(root):
    """`esnfed privacy --dataset` took wesad or hhar only (an enum); a declared
    dataset of the user's own runs as the papers' do (δ = min(1e-5, 1/(10·n)) of its training users), one
    undeclared is a usage error listing the declared, and the report renders its rows."""
    doc = json.loads((root / "runs" / "privacy" / "mine.json").read_text())
    assert doc["dataset"] == "mine" and doc["n_users"] == 4 and doc["delta"] == 1e-5
    assert set(doc["methods"]) == {"incfed", "fedip"} and doc["clip"] == 0.05
    assert doc["ip_clip"] == 0.2 and _doc(root)["ip_clip"] == 0.1  # each dataset's own
    assert all(len(c["test_accuracy"]) == 2 for r in doc["methods"].values() for c in r["epsilons"].values())
    one = root / "one"
    cli_ok("privacy", "--dataset", "mine", *stage_options(root)[2:], "--out-dir", str(one))
    assert sorted(p.name for p in one.iterdir()) == ["mine.json"]
    assert json.loads((one / "mine.json").read_text())["methods"] == doc["methods"]  # seeded: the same
    result = runner.invoke(app, ["privacy", "--dataset", "example", *stage_options(root)[2:]])
    assert result.exit_code == 2
    assert "'example' is not declared in params.yaml datasets (declared: wesad, mine)" in " ".join(
        w for w in result.output.split() if w not in "│╭╮╰╯─")
    docs = privacy_report.load(root / "runs" / "privacy", datasets=("wesad", "mine"))
    md = privacy_report.render(docs)["privacy.md"].decode()
    assert "| mine | incfed |" in md and "δ = WESAD 1e-05 (min(1e-5, 1/(10·n)), n = 4 users), mine 1e-05" in md


def _doc(root: Path) -> dict:
    return json.loads((root / "runs" / "privacy" / "wesad.json").read_text())


def test_infinite_epsilon_is_the_retrained_model(root):
    from esnfed_core.scoring import accuracy as score
    from esnfed_stages.experiment.trial_data import open_dataset
    from esnfed_stages.experiment.models import load_model

    doc = _doc(root)
    data = open_dataset(root / "data", "wesad")
    test = list(data.load(data.test_users).values())

    for algo in ("incfed", "fedip"):
        inf = doc["methods"][algo]["epsilons"]["inf"]["test_accuracy"]
        retrained = [score(m.reservoir, m.readout, test) for m in
                     (load_model(root / "runs" / "models" / "wesad" / algo / "100", k)[0] for k in range(len(inf)))]
        np.testing.assert_array_equal(inf, retrained)


def test_the_output_records_the_privacy_section_and_budget_it_was_computed_with(root):
    """What the report compares with params.yaml's (tests/test_report.py: it refuses other values)."""
    import yaml

    from esnfed_stages.params.privacy import privacy_params

    params = yaml.safe_load((root / "params.yaml").read_text())
    assert _doc(root)["params"] == privacy_params(params).record("default") == {
        "privacy.epsilons": ["1", "4", "inf"], "privacy.delta": "auto", "privacy.relation": "user",
        "privacy.clip": 0.05, "privacy.ip_clip": IP_CLIP, "privacy.pct": "100", "privacy.methods": ["incfed", "fedip"],
        "privacy.config": "select", "budget": "default"}  # the section names no config: select
    assert _doc(root)["source"] == "synthetic"  # the manifest's, as an assess file records it (the header's)
    assert list(privacy_report.load(root / "runs" / "privacy", _doc(root)["params"])) == ["wesad"]


def test_noise_multipliers_are_the_accountants(root):
    doc = _doc(root)
    assert doc["n_users"] == 4 and doc["delta"] == 1e-5
    for algo, row in doc["methods"].items():
        assert row["releases"] == (1 if algo == "incfed" else 1 + row["config"]["rounds"])
        for eps in ("1", "4"):
            z = row["epsilons"][eps]["noise_multiplier"]
            assert z == noise_multiplier(float(eps), 1e-5, row["releases"]) and z > 0
            assert len(row["epsilons"][eps]["test_accuracy"]) == 2


def test_report_renders_the_privacy_table_and_figure(root):
    docs = privacy_report.load(root / "runs" / "privacy")
    files = privacy_report.render(docs)
    md = files["privacy.md"].decode()
    for needle in ("Gaussian mechanism", "user-level", "δ = WESAD 1e-05", "dp-accounting PLD", "ε=inf",
                   "no mechanism"):
        assert needle in md
    csv_lines = files["privacy.csv"].decode().splitlines()
    assert len(csv_lines) == 1 + 2 * len(EPSILONS)
    assert privacy_report.figure(docs)[:8] == b"\x89PNG\r\n\x1a\n"


def test_bad_privacy_param_fails_naming_the_key(root, tmp_path):
    import yaml

    params = yaml.safe_load((root / "params.yaml").read_text())
    params["privacy"]["relation"] = "group"
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    out = tmp_path / "out"
    result = runner.invoke(app, ["privacy", "--dataset", "wesad", "--params", str(tmp_path / "params.yaml"),
                                 "--data-dir", str(root / "data"), "--runs-dir", str(root / "runs"),
                                 "--out-dir", str(out)])
    assert result.exit_code != 0
    assert "privacy.relation" in result.output
    assert not out.exists()


@pytest.mark.parametrize("edit, problem", [
    (lambda d: d.update(delta="1/16"), "delta: expected a finite number > 0, got '1/16'"),
    (lambda d: d.update(relation=None), "relation: expected 'user', got None"),
    (lambda d: d["methods"]["incfed"].update(epsilons=[]), "methods.incfed.epsilons: expected an object"),
    (lambda d: d["methods"]["incfed"]["epsilons"]["1"].update(test_accuracy=[float("nan")]),
     "methods.incfed.epsilons.1.test_accuracy holds nan, expected a fraction in [0, 1]"),
    (lambda d: d["methods"]["incfed"]["epsilons"]["1"].update(test_accuracy="0.5"),
     "methods.incfed.epsilons.1.test_accuracy must be a non-empty list of accuracies"),
    (lambda d: d["methods"]["incfed"]["epsilons"]["1"].update(noise_multiplier=-1),
     "methods.incfed.epsilons.1.noise_multiplier: expected a finite number >= 0 or null, got -1"),
])
def test_a_privacy_output_of_the_wrong_shape_is_one_line_naming_the_key(root, tmp_path, edit, problem):
    """Input audit: before, report got a TypeError/KeyError traceback (a string δ, a list of ε) or
    rendered NaN accuracies (exit 0)."""
    doc = _doc(root)
    edit(doc)
    (tmp_path / "wesad.json").write_text(json.dumps(doc))
    with pytest.raises(DataError) as info:
        privacy_report.load(tmp_path)
    assert str(info.value).startswith(f"{tmp_path / 'wesad.json'}: {problem}"), str(info.value)

