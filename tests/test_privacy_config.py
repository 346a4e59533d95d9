"""privacy.config (esnfed_stages/studies/privacy_config.py): ``public`` chooses the configurations and clips
from the validation users alone, so a training user's data changed leaves them identical while a
validation user's moves them; ``select`` reads runs/select; the key is checked in one line; the
document records the mode and the report says it and refuses a document of the other mode."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from esnfed_core.data.processed import UserData
from esnfed_core.errors import ConfigError, DataError
from esnfed_core.trial import TrialData
from esnfed_stages.studies import privacy_config
from esnfed_stages.report import privacy_report
from esnfed_stages.params.experiment import experiment_params
from esnfed_stages.params.privacy import privacy_params
from experiment_data import small_params
from test_privacy_report import PRIVACY, privacy_doc

EXP = experiment_params(small_params())  # 2 trials, 8-12 units, FedIP 1-2 rounds of 1 epoch
SEEDS = (11, 12)
EPSILONS = (1.0, math.inf)
METHODS = ("incfed", "fedip")


def _user(seed: int, windows: int = 6) -> UserData:
    """A user whose label follows the sign of its first input (so the candidates score apart)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((windows, 12, 3)).astype(np.float32)
    return UserData(x, (x[:, :, 0] > 0).astype(np.int8), np.zeros(windows, np.int64))


def _data(train_seed: int = 0, validation_seeds: tuple[int, ...] = (100, 101, 102)) -> TrialData:
    train = {f"t{i}": _user(train_seed + i) for i in range(4)}
    return TrialData(train, {f"v{i}": _user(s) for i, s in enumerate(validation_seeds)}, 2, 1)


def _choose(mode: str, data: TrialData, runs: Path) -> privacy_config.Configuration:
    return privacy_config.choose(mode, "wesad", METHODS, EXP, data, SEEDS, 1e-5, EPSILONS, pct="100",
                                 clip=0.003, ip_clip=0.03, runs_dir=runs)


@pytest.fixture(scope="module")
def public(tmp_path_factory) -> privacy_config.Configuration:
    """The public configuration of the reference data (no runs/select folder exists)."""
    return _choose("public", _data(), tmp_path_factory.mktemp("no-select"))


def test_public_depends_on_no_training_users_data(public, tmp_path):
    """Every training user's windows replaced (same roster): configs, clip, ip_clip and the record
    are identical; runs/select is never read (there is none)."""
    other = _choose("public", _data(train_seed=50), tmp_path)
    assert (other.configs, other.clip, other.ip_clip, other.record) == \
           (public.configs, public.clip, public.ip_clip, public.record)
    assert public.record["clients"] == ["v0", "v1"] and public.record["scorers"] == ["v2"]
    assert public.clip in privacy_config.CLIP_GRID and public.ip_clip > 0
    assert set(public.configs) == set(METHODS) and "lambda" in public.configs["incfed"]


def test_public_follows_the_validation_users(public, tmp_path):
    """A validation user's data changed moves the choice (its scores, clip or update norms)."""
    other = _choose("public", _data(validation_seeds=(100, 101, 7)), tmp_path)
    assert (other.configs, other.clip, other.ip_clip, other.record) != \
           (public.configs, public.clip, public.ip_clip, public.record)
    moved = _choose("public", _data(validation_seeds=(7, 101, 102)), tmp_path)  # a client of the split
    assert (moved.ip_clip, moved.record) != (public.ip_clip, public.record)


def test_a_candidates_score_is_dp_incfeds_on_the_split(public):
    """With the split's own K (no noise scaling), one ε and one seed, each candidate's score is the
    private trial's validation score on the split (fit_private: its clients trained, its scorers
    scored); with a larger federation's K the noise is scaled down."""
    from dataclasses import replace

    from esnfed_core.privacy import DPSpec
    from esnfed_core.private_trial import fit_private

    split = privacy_config.public_split(_data())
    settings, config = replace(EXP.settings, device="cpu"), public.configs["incfed"]
    scores = privacy_config.clip_scores(config, split, settings, SEEDS[:1], 1e-5, (4.0,), len(split.train))
    assert scores == {c: fit_private("incfed", config, SEEDS[0], split, settings, DPSpec(4.0, 1e-5, clip=c)).score
                      for c in privacy_config.CLIP_GRID}
    # a federation of many more clients: the split's noise shrinks by K_s / K, and the scores move
    assert privacy_config.clip_scores(config, split, settings, SEEDS[:1], 1e-5, (4.0,), 1000 * len(split.train)) != scores


def test_select_reads_the_select_stages_best_json_and_keeps_the_clips(tmp_path):
    with pytest.raises(DataError) as info:
        _choose("select", _data(), tmp_path)
    assert "esnfed select --dataset wesad" in str(info.value) and "\n" not in str(info.value)
    config = {"units": 8, "spectral_radius": 0.5, "leak": 0.5, "input_scaling": 0.5, "lambda": 0.01}
    fedip = {**config, "sigma": 0.5, "rounds": 1, "local_epochs": 1}
    for method, cfg in (("incfed", config), ("fedip", fedip)):
        best = tmp_path / "select" / "wesad" / method / "100" / "best.json"
        best.parent.mkdir(parents=True)
        best.write_text(json.dumps({"config": cfg}))
    chosen = _choose("select", _data(), tmp_path)
    assert chosen.configs == {"incfed": config, "fedip": fedip}
    assert (chosen.clip, chosen.ip_clip, chosen.record) == (0.003, 0.03, {"mode": "select"})
    assert _choose("select", _data(train_seed=50), tmp_path).configs == chosen.configs  # whatever the data


def test_public_needs_two_validation_users(tmp_path):
    with pytest.raises(ConfigError) as info:
        _choose("public", _data(validation_seeds=(100,)), tmp_path)
    assert str(info.value).startswith("params.yaml: privacy.config: public splits the validation users")
    assert "\n" not in str(info.value)


@pytest.mark.parametrize("change, problem", [
    ({"config": "train"}, "privacy.config: must be one of public, select, got 'train'"),
    ({"config": "public", "extra_methods": ["fedavg"]}, "privacy.config: public chooses the configs of "
                                                         "privacy.methods only; privacy.extra_methods"),
    ({"config": "public", "sampling_study": {"fractions": [0.5]}}, "privacy.config: public chooses the configs "
                                                                    "of privacy.methods only; privacy.sampling_study"),
])
def test_bad_config_fails_in_one_line_naming_the_key(change, problem):
    from esnfed_stages.params.schema import validate

    params = small_params()
    params["privacy"].update(change)
    with pytest.raises(ConfigError) as info:
        validate(params)  # esnfed check-params: the schema delegates to the stage's check
    assert str(info.value) == f"params.yaml: {problem}" or str(info.value).startswith(f"params.yaml: {problem}")
    assert "\n" not in str(info.value)


def test_the_key_defaults_to_select_and_is_recorded():
    assert privacy_params({"privacy": PRIVACY}).config == "select"
    assert privacy_params({"privacy": {**PRIVACY, "config": "public"}}).record("default")["privacy.config"] == "public"
    assert privacy_params(small_params()).config == "public"  # the repository's params.yaml


def _write(folder: Path, doc: dict) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "wesad.json").write_text(json.dumps(doc))
    return folder


def test_the_report_refuses_a_document_of_the_other_mode(tmp_path):
    public = {**PRIVACY, "config": "public"}
    expect_public = privacy_params({"privacy": public}).record("default")
    expect_select = privacy_params({"privacy": PRIVACY}).record("default")
    folder = _write(tmp_path / "p", privacy_doc(params=public))
    assert list(privacy_report.load(folder, expect_public)) == ["wesad"]
    with pytest.raises(DataError) as info:
        privacy_report.load(folder, expect_select)
    assert "config 'public' but params.yaml's privacy.config is 'select'" in str(info.value)
    assert "esnfed privacy --dataset wesad" in str(info.value) and "\n" not in str(info.value)
    old = privacy_doc()  # written before the key: its params lack it, computed from runs/select
    del old["params"]["privacy.config"]
    folder = _write(tmp_path / "old", old)
    assert list(privacy_report.load(folder, expect_select)) == ["wesad"]
    with pytest.raises(DataError) as info:
        privacy_report.load(folder, expect_public)
    assert "config 'select' but params.yaml's privacy.config is 'public'" in str(info.value)


def test_every_privacy_table_header_says_the_mode():
    md = privacy_report.render({"wesad": privacy_doc(params={**PRIVACY, "config": "public"})})["privacy.md"].decode()
    assert privacy_report.CONFIGURATION["public"] in md and "Not accounted" not in md
    md = privacy_report.render({"wesad": privacy_doc()})["privacy.md"].decode()
    assert privacy_report.CONFIGURATION["select"] in md and "privacy.config: select" in md
