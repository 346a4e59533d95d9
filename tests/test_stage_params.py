"""The stages take their params sections as frozen, checked objects (read from params.yaml once,
by the CLI): ttest, report, the experiment stages (select, retrain, assess) and privacy;
command-line values win, defaults apply, bad values name the key."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from esnfed_core.continual_settings import ContinualSettings
from esnfed_core.errors import ConfigError
from esnfed_core.ip_rule import IPConfig, IPSettings
from esnfed_core.method import Method
from esnfed_core.settings import Settings
from esnfed_core.validation import ParameterError
from esnfed_stages.params.experiment import ExperimentParams, experiment_params
from esnfed_stages.params.load import load_params
from esnfed_stages.params.schema import validate
from esnfed_stages.params.privacy import PrivacyParams, privacy_params
from esnfed_stages.report.report_params import ReportParams, report_params
from esnfed_stages.report.ttest import TTestParams, ttest_params


def test_ttest_params_command_line_wins_and_is_frozen():
    p = ttest_params({"ttest": {"variant": "paired", "alpha": 0.05}}, alpha=0.01)
    assert p == TTestParams("paired", 0.01)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.alpha = 0.5  # type: ignore[misc]
    with pytest.raises(ConfigError, match="^ttest.variant"):
        ttest_params({"ttest": {"variant": "greedy", "alpha": 0.05}})


def test_report_params_default_and_bad_share():
    assert report_params({"report": {"activation_pct": "100"}}) == ReportParams("100", "25")
    assert report_params({"report": {"activation_pct": 50, "contexts_pct": "75"}}) == ReportParams("50", "75")
    with pytest.raises(ConfigError, match="report.contexts_pct must be one of"):
        report_params({"report": {"activation_pct": "100", "contexts_pct": "33"}})
    assert report_params({"report": {"activation_pct": "100"}}).matrix_pct == "100"  # all the training users
    assert report_params({"report": {"activation_pct": "100", "matrix_pct": 50}}) == \
        ReportParams("100", "25", matrix_pct="50")
    for bad in ("33", True, None):
        with pytest.raises(ConfigError, match="^params.yaml: report.matrix_pct must be one of 25, 50, 75, 100, got"):
            report_params({"report": {"activation_pct": "100", "matrix_pct": bad}})


# ---------------------------------------------------------------- experiment and privacy sections
def _params() -> dict:
    return load_params(Path(__file__).resolve().parents[1] / "params.yaml")


def test_experiment_params_are_frozen_and_plasticity_is_typed():
    exp = experiment_params(_params())
    assert isinstance(exp.settings.ip, IPSettings)
    assert exp.settings.ip.config(0.3) == IPConfig(sigma=0.3, **exp.settings.ip.as_dict())
    with pytest.raises(dataclasses.FrozenInstanceError):
        exp.seed = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        exp.settings.ip.mu = 0.5  # type: ignore[misc]
    bad = _params()
    bad["plasticity"]["normalize_step"] = "yes"
    with pytest.raises(ConfigError, match=r"^params.yaml: plasticity.normalize_step: expected true or false"):
        experiment_params(bad)


def test_settings_convert_a_plasticity_mapping_and_name_a_stray_key():
    s = Settings(ip={"batch_size": 4})
    assert s.ip == IPSettings(batch_size=4)
    assert s.used_by(Method("ip"), True)["ip"] == {"mu": 0.0, "eta": 0.01, "batch_size": 4, "normalize_step": True}
    with pytest.raises(ConfigError, match="^plasticity: .*'sigma'"):
        Settings(ip={"sigma": 0.3})  # searched, not a fixed setting


def test_continual_section_is_typed_and_checked_by_the_core_bounds():
    exp = experiment_params(_params())
    c = exp.settings.continual
    assert isinstance(c, ContinualSettings) and c.lam == _params()["continual"]["lambda"]
    assert Settings(continual={"replay_batch": 3}).continual == ContinualSettings(replay_batch=3)
    with pytest.raises(ParameterError, match="^replay_fraction: must be <= 1.0"):
        ContinualSettings(replay_fraction=1.5)
    used = exp.settings.used_by(Method("clip", "replay"), True)
    assert {k: used[k] for k in ("continual_lambda", "replay_fraction", "replay_batch", "replay_shuffle")} == {
        "continual_lambda": c.lam, "replay_fraction": c.replay_fraction, "replay_batch": c.replay_batch,
        "replay_shuffle": c.replay_shuffle}
    assert c.joint_max_rounds is None  # params.yaml's default: no cap (PROTOCOL §5), null accepted
    capped = _params()
    capped["continual"]["joint"]["max_rounds"] = 7  # an optional safety cap
    validate(capped)
    assert experiment_params(capped).settings.continual.joint_max_rounds == 7
    bad = _params()
    bad["continual"]["joint"]["max_rounds"] = 0
    with pytest.raises(ConfigError, match=r"^params.yaml: continual.joint.max_rounds: must be >= 1, got 0$"):
        experiment_params(bad)


def test_privacy_params_frozen_with_defaults_and_delta():
    p = _params()
    pp = privacy_params(p)
    assert isinstance(pp, PrivacyParams) and pp.epsilons[-1] == float("inf") and pp.delta == "auto"
    assert pp.delta_for(4) == 1e-5
    with pytest.raises(dataclasses.FrozenInstanceError):
        pp.pct = "25"  # type: ignore[misc]
    short = {"privacy": {"epsilons": [1], "relation": "user"}}
    assert privacy_params(short) == PrivacyParams((1.0,), "auto", "user", 1.0, 0.03, "100", ("incfed", "fedip"))
    with pytest.raises(ConfigError, match=r"^params.yaml: privacy.delta: must be < 1.0, got 1.0$"):
        privacy_params({"privacy": {**p["privacy"], "delta": 1.0}})


@pytest.mark.parametrize("key", ["clip", "ip_clip"])
def test_privacy_clip_is_one_number_or_one_per_dataset(key):
    """privacy.clip was tuned on the papers' data (docs/privacy.md); a mapping
    dataset -> number lets a dataset of your own have its own while the number form stays.
    FedIP's ip_clip takes the same forms (it was one number only: a mapping was refused)."""
    p = _params()
    value_for = lambda pp: getattr(pp, f"{key}_for")  # noqa: E731
    assert value_for(privacy_params(p))("mine") == value_for(privacy_params(p))("wesad") == p["privacy"][key]
    mapping = {**p["privacy"], key: {"wesad": 0.003, "hhar": 0.003, "mine": 0.02}}
    pp = privacy_params({"privacy": mapping})
    assert value_for(pp)("mine") == 0.02 and value_for(pp)("wesad") == 0.003
    assert pp.record("default")[f"privacy.{key}"] == {"wesad": 0.003, "hhar": 0.003, "mine": 0.02}
    assert getattr(pp.spec(1.0, 0.01, "mine"), key) == 0.02
    with pytest.raises(ConfigError, match=rf"^params.yaml: privacy.{key}: no {key} for dataset 'other' \(the "
                                          r"mapping names wesad, hhar, mine; "):
        value_for(pp)("other")
    for bad, message in (({}, f"privacy.{key}: must be a number or a mapping of dataset -> number, got {{}}"),
                         ({"Mine": 0.1}, f"privacy.{key}: 'Mine' is not a dataset name"),
                         ({"mine": 0}, f"privacy.{key}.mine: must be > 0.0, got 0")):
        with pytest.raises(ConfigError, match=f"^params.yaml: {re.escape(message)}$"):
            privacy_params({"privacy": {**p["privacy"], key: bad}})


def test_the_cli_reads_params_once_and_passes_the_parsed_objects(monkeypatch, tmp_path):
    """`esnfed assess` and `esnfed privacy` hand their stage the frozen objects, not the dict."""
    from typer.testing import CliRunner

    from esnfed_cli.main import app
    from esnfed_stages.experiment import assess as assess_stage
    from esnfed_stages.params import load as params_module
    from esnfed_stages.studies import privacy as privacy_stage
    from esnfed_stages.params.load import load_params

    reads, seen = [], {}

    def counting_load(path):
        reads.append(path)
        return load_params(path)

    def fake_assess(ds, method, exp, **kw):
        seen["assess"] = exp
        return {"pcts": {}}

    def fake_privacy(ds, pp, exp, **kw):
        seen["privacy"] = (pp, exp)
        return {"relation": pp.relation, "delta": 0.1, "n_users": 3, "accountant": "dp-accounting PLD",
                "configuration": {"mode": "select"}, "methods": {"incfed": {"epsilons": {"inf": {"test_accuracy": [0.5]}}}}}

    monkeypatch.setattr(params_module, "load_params", counting_load)  # the commands import it when they run
    monkeypatch.setattr(assess_stage, "run", fake_assess)
    monkeypatch.setattr(privacy_stage, "run", fake_privacy)
    params = str(Path(__file__).resolve().parents[1] / "params.yaml")
    runner = CliRunner()
    out = runner.invoke(app, ["assess", "--dataset", "wesad", "--algo", "ridge", "--params", params,
                              "--runs-dir", str(tmp_path)])
    assert out.exit_code == 0, out.output
    out = runner.invoke(app, ["privacy", "--dataset", "wesad", "--params", params, "--out-dir", str(tmp_path)])
    assert out.exit_code == 0, out.output
    assert len(reads) == 2  # once per command
    assert isinstance(seen["assess"], ExperimentParams)
    assert isinstance(seen["privacy"][0], PrivacyParams) and isinstance(seen["privacy"][1], ExperimentParams)
