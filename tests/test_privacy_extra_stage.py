"""The opt-in DP-FedAvg and DP-FedCLIP (naive) of the privacy stage (params privacy.extra_methods,
`esnfed privacy --extra M`) through the CLI on a tiny dataset: their own documents with the
accountant's z for their releases, ε = ∞ the non-private trial, the default run unchanged by them,
the report's table merging them, and bad params or a stale document refused in one line naming the key."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from esnfed_cli.main import app
from esnfed_core.errors import ConfigError, DataError
from esnfed_core.privacy import noise_multiplier
from esnfed_stages.report import privacy_report
from esnfed_stages.params.schema import embedded_read
from esnfed_stages.params.privacy import privacy_params
from esnfed_stages.layout import extra_path
from experiment_data import cli_ok, make_dataset, small_params, stage_options, write_params
from esnfed_stages.params.load import load_params

pytestmark = pytest.mark.pipeline
runner = CliRunner()
EPSILONS = [1.0, float("inf")]
PRIVACY = {"epsilons": EPSILONS, "delta": "auto", "relation": "user", "clip": 0.05, "ip_clip": 0.1,
           "pct": "100", "methods": ["incfed"], "extra_methods": ["fedavg", "fedclip-naive"], "fedavg_clip": 0.5}


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("privacy-extra")
    make_dataset(root)
    params = small_params()
    params["datasets"] = params["continual_datasets"] = params["study_datasets"] = ["wesad"]
    params["imported"] = {}  # the example not declared: nothing to import
    params["embedded"] = embedded_read(params)  # wesad's embedded data only
    params["privacy"] = dict(PRIVACY)
    write_params(root, params)
    for algo in ("incfed", "fedavg", "fedip"):
        cli_ok("select", "--algo", algo, "--pct", "100", *stage_options(root))
    cli_ok("select", "--algo", "fedclip", "--strategy", "naive", "--pct", "100", *stage_options(root))
    out = str(root / "runs" / "privacy")
    cli_ok("privacy", *stage_options(root), "--out-dir", out)
    cli_ok("privacy", *stage_options(root), "--out-dir", out, "--extra", "fedavg", "--extra", "fedclip-naive")
    return root


def _params(root: Path) -> dict:
    return yaml.safe_load((root / "params.yaml").read_text())


def _extra(root: Path, method: str = "fedavg") -> dict:
    return json.loads(extra_path(root / "runs" / "privacy", "wesad", method).read_text())


def test_the_default_document_is_untouched_by_the_opt_in(root):
    """The privacy stage's own document holds its methods alone and records no opt-in key, so the
    default run's bytes do not depend on privacy.extra_methods / fedavg_clip."""
    doc = json.loads((root / "runs" / "privacy" / "wesad.json").read_text())
    assert set(doc["methods"]) == {"incfed"} and "fedavg_clip" not in doc
    assert not {"privacy.extra_methods", "privacy.fedavg_clip"} & set(doc["params"])
    assert doc["params"] == privacy_params(_params(root)).record("default")


def test_the_extra_document_is_dp_fedavg_with_one_release(root):
    doc = _extra(root)
    assert set(doc["methods"]) == {"fedavg"} and doc["fedavg_clip"] == 0.5
    assert doc["params"] == privacy_params(_params(root)).record("default", extra=True)
    assert doc["params"]["privacy.extra_methods"] == ["fedavg", "fedclip-naive"]
    assert doc["params"]["privacy.fedavg_clip"] == 0.5
    row = doc["methods"]["fedavg"]
    assert row["releases"] == 1 and "lambda" in row["config"]
    z = row["epsilons"]["1"]["noise_multiplier"]
    assert z == noise_multiplier(1.0, doc["delta"], 1) and z > 0 and doc["delta"] == 1e-5
    assert row["epsilons"]["inf"]["noise_multiplier"] == 0.0


def test_the_fedclip_document_accounts_every_context(root):
    doc = _extra(root, "fedclip-naive")
    row = doc["methods"]["fedclip-naive"]
    assert set(doc["methods"]) == {"fedclip-naive"} and "lambda" not in row["config"]
    assert row["releases"] == 3 * (row["config"]["budget"] + 1)  # the tiny dataset's 3 contexts
    assert row["epsilons"]["1"]["noise_multiplier"] == noise_multiplier(1.0, doc["delta"], row["releases"])


@pytest.mark.parametrize("method", ["fedavg", "fedclip-naive"])
def test_infinite_epsilon_is_the_nonprivate_trial(root, method):
    """Same seeds and reservoir; FedAvg's local solves at best.json's λ, FedCLIP's every context as
    the non-private trial: the same test accuracies."""
    from esnfed_core.scoring import accuracy
    from esnfed_core.trial import TrialData, fit
    from esnfed_stages.params.experiment import experiment_params
    from esnfed_stages.experiment.best import retrain_seed, selected_config
    from esnfed_stages.experiment.trial_data import open_dataset

    exp = experiment_params(_params(root))
    data = open_dataset(root / "data", "wesad")
    trial = TrialData(data.load(data.train_users("100")), data.load(data.validation_users), data.n_classes,
                      data.n_contexts)
    test = list(data.load(data.test_users).values())
    cfg = selected_config(root / "runs", "wesad", method, "100", exp.budget_spec)
    if method != "fedavg":
        cfg = {k: v for k, v in cfg.items() if k != "lambda"}
    plain = []
    for k in range(exp.retrains):
        m = fit(method, cfg, retrain_seed(exp, "wesad", "100", k), trial, exp.settings, score=True)
        plain.append(accuracy(m.reservoir, m.readout, test, exp.settings.batch_size))
    assert _extra(root, method)["methods"][method]["epsilons"]["inf"]["test_accuracy"] == plain


def test_the_report_merges_the_extra_rows(root):
    folder = root / "runs" / "privacy"
    expected = privacy_params(_params(root)).record("default", extra=True)
    docs = privacy_report.load(folder, expected, ("wesad",))
    merged, absent = privacy_report.add_extras(folder, docs, ("fedavg", "fedclip-naive"), expected)
    assert absent == [] and set(merged["wesad"]["methods"]) == {"incfed", "fedavg", "fedclip-naive"}
    assert set(docs["wesad"]["methods"]) == {"incfed"}  # the loaded document is not changed
    files = privacy_report.render(merged)
    md = files["privacy.md"].decode()
    assert md.splitlines()[0].endswith(": IncFed and FedAvg and FedCLIP (naive)")
    assert "| WESAD | fedavg |" in md and "DP-FedAvg: each client's local readout" in md and "clipped to 0.5" in md
    assert "| WESAD | fedclip-naive |" in md and "DP-FedCLIP (naive): at every context" in md
    assert len(files["privacy.csv"].decode().splitlines()) == 1 + 3 * len(EPSILONS)
    assert privacy_report.figure(merged)[:8] == b"\x89PNG\r\n\x1a\n"
    assert "DP-FedAvg" not in privacy_report.render(docs)["privacy.md"].decode()  # not opted in: no clause


def test_a_missing_or_stale_extra_document_is_refused_naming_its_command(root, tmp_path):
    folder = root / "runs" / "privacy"
    expected = privacy_params(_params(root)).record("default", extra=True)
    docs = privacy_report.load(folder, expected, ("wesad",))
    with pytest.raises(DataError, match=r"wesad/fedavg\.json: not found: run `esnfed privacy --dataset wesad "
                                        r"--extra fedavg` first"):
        privacy_report.add_extras(tmp_path, docs, ("fedavg",), expected)
    merged, absent = privacy_report.add_extras(tmp_path, docs, ("fedavg",), expected, allow_missing=True)
    assert absent == [extra_path(tmp_path, "wesad", "fedavg")] and set(merged["wesad"]["methods"]) == {"incfed"}
    assert str(absent[0]) in privacy_report.render(merged, absent_extra=absent)["privacy.md"].decode()
    stale = privacy_params({"privacy": {**PRIVACY, "fedavg_clip": 0.25}}).record("default", extra=True)
    with pytest.raises(DataError) as info:
        privacy_report.add_extras(folder, docs, ("fedavg",), stale)
    assert "privacy.fedavg_clip" in str(info.value) and "--extra fedavg" in str(info.value)
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("change, key", [
    ({"extra_methods": []}, "privacy.extra_methods"),              # --extra fedavg not opted in
    ({"extra_methods": ["fedavg", "fedclip-joint"]}, "privacy.extra_methods: fedclip-joint is not covered"),
    ({"extra_methods": ["fedavg", "clip-naive"]}, "privacy.extra_methods: must list some of"),
    ({"extra_methods": ["fedavg", "fedavg"]}, "privacy.extra_methods"),
    ({"fedavg_clip": 0}, "privacy.fedavg_clip"),
    ({"fedavg_clip": {"hhar": 0.5}}, "privacy.fedavg_clip"),       # the mapping misses wesad
    ({"relation": "window"}, "privacy.relation: window level is not implemented"),
])
def test_bad_opt_in_params_fail_in_one_line_naming_the_key(root, tmp_path, change, key):
    params = _params(root)
    params["privacy"].update(change)
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    out = tmp_path / "out"
    result = runner.invoke(app, ["privacy", "--dataset", "wesad", "--extra", "fedavg", "--params",
                                 str(tmp_path / "params.yaml"), "--data-dir", str(root / "data"),
                                 "--runs-dir", str(root / "runs"), "--out-dir", str(out)])
    assert result.exit_code != 0
    line = " ".join(w for w in result.output.split() if w not in "│╭╮╰╯─")
    assert key in line, result.output
    assert not out.exists()  # no partial output


def test_params_check_refuses_fedclip_on_a_dataset_without_contexts():
    """privacy-extra runs every opted-in method on every declared dataset; FedCLIP is selected on
    continual_datasets only, so a declared dataset outside them is refused when params.yaml is read."""
    import copy

    from esnfed_stages.params.schema import validate

    repo = load_params(Path(__file__).resolve().parents[1] / "params.yaml")
    params = copy.deepcopy(repo)
    params["privacy"]["extra_methods"] = ["fedavg", "fedclip-naive"]
    params["privacy"]["config"] = "select"  # the opt-in methods retrain the select stage's configs
    validate(params)  # every declared dataset is continual in the repository's params
    params["continual_datasets"] = ["wesad"]
    with pytest.raises(ConfigError) as info:
        validate(params)
    assert str(info.value).startswith("params.yaml: privacy.extra_methods: fedclip-naive runs on every declared")
    assert "'hhar'" in str(info.value) and "\n" not in str(info.value)
    params["privacy"]["extra_methods"] = ["fedavg"]
    validate(params)  # DP-FedAvg alone runs anywhere


def test_the_report_reads_the_opt_in_from_params(root):
    """`esnfed report`'s options carry privacy.extra_methods and the record with the opt-in keys:
    add_privacy merges the extra documents into the table and the figure's panel."""
    from esnfed_stages.report import report
    from esnfed_stages.report.report_params import report_params

    options = report_params(_params(root))
    assert options.privacy_extra == ("fedavg", "fedclip-naive")
    assert options.privacy_record["privacy.fedavg_clip"] == 0.5
    rep = report.Report()
    report.add_privacy(rep, root / "runs" / "privacy", "2026-01-01", options)
    md = rep.tables["privacy.md"].decode()
    assert "| WESAD | incfed |" in md and "| WESAD | fedavg |" in md and "| WESAD | fedclip-naive |" in md
    assert rep.missing == [] and rep.figures["privacy.png"][:8] == b"\x89PNG\r\n\x1a\n"
