"""The method registry (esnfed_core.methods): every algorithm the CLI offers has one family object,
the facts the stages read from it are those of the algorithm, and a new method added by the steps
of docs/adding-a-method.md runs through select, retrain and assess."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from esnfed_core.methods import REGISTRY, Family, family_of, register
from esnfed_core.errors import ConfigError
from esnfed_core.method import METHODS, Method
from esnfed_core.data.processed import load_user
from esnfed_core.readout import StatsAccumulator
from esnfed_core.reservoir import run_batch
from esnfed_core.trial import FittedModel, check_config, make_reservoir, select_lambda, sub_seeds
from esnfed_core.scoring import pooled_counts
from esnfed_core.vocabulary import ALGOS, PCTS
from esnfed_stages.experiment import assess as assess_stage
from esnfed_stages.experiment import retrain as retrain_stage
from esnfed_stages.experiment import select as select_stage
from esnfed_stages.params.experiment import experiment_params
from esnfed_stages.experiment.fingerprint import trial_modules
from esnfed_stages.layout import best_path, model_dir
from esnfed_stages.experiment.models import load_model
from experiment_data import TEST, make_dataset, small_params

# What each method id is, as the stages rely on it: federated, IP, continual, one reservoir per
# client, deep, the baseline, chooses λ on validation, the method whose selection it builds on.
FACTS = {
    "random": (False, False, False, False, False, True, False, None),
    "ridge": (False, False, False, False, False, False, True, None),
    "incfed": (True, False, False, False, False, False, True, None),
    "fedavg": (True, False, False, False, False, False, True, None),
    "ip": (False, True, False, False, False, False, True, None),
    "fedip": (True, True, False, False, False, False, True, None),
    "clip-replay": (False, True, True, False, False, False, False, "ip"),
    "fedclip-joint": (True, True, True, False, False, False, False, "fedip"),
    "deep-incfed": (True, False, False, False, True, False, True, "incfed"),
    "deep-fedip": (True, True, False, False, True, False, True, "fedip"),
    "local": (True, False, False, True, False, False, True, None),
    "ensemble": (True, False, False, True, False, False, True, None),
    "align-0.5": (True, False, False, True, False, False, True, None),
}


def test_every_cli_algorithm_has_one_family():
    assert tuple(REGISTRY) == ALGOS
    assert all(REGISTRY[a].name == a for a in ALGOS)
    with pytest.raises(ConfigError, match=r"^algo: unknown algorithm 'deepesn' \(expected one of random, ridge"):
        family_of("deepesn")
    with pytest.raises(ConfigError, match="already registered"):
        register(Family("ridge"))


@pytest.mark.parametrize("method_id", sorted(FACTS))
def test_a_method_reads_its_facts_from_its_family(method_id):
    m = Method.parse(method_id)
    assert (m.federated, m.uses_ip, m.continual, m.heterogeneous, m.deep, m.baseline, m.selects_lambda,
            m.base) == FACTS[method_id]
    assert m.family is REGISTRY[m.algo]


def test_method_ids_keep_their_names():
    assert [Method.parse(i).id for i in METHODS] == list(METHODS)
    assert Method.parse("align-0.25").alpha == 0.25 and Method.parse("align-0.25").cli_options == "--algo align --alpha 0.25"
    assert Method.parse("fedclip-replay").cli_options == "--algo fedclip --strategy replay"
    with pytest.raises(ConfigError, match="expected align-<alpha>"):
        Method.parse("align-x")
    with pytest.raises(ConfigError, match="^alpha: ridge takes no alignment strength"):
        Method("ridge", alpha=0.5)


# ---- a new method, added by the steps of docs/adding-a-method.md ----------------------------------
# 1. Its trial: a nearest-centroid readout on the reservoir states. The class centroids are the
#    class means of the training states (the bias column of the ridge statistics A = YᵀS counts each
#    class's steps); nearest centroid is the linear readout 2·cₖ·s − ‖cₖ‖², written as (C, N+1)
#    with the bias last, so the shared scoring, saving and assessing code applies it unchanged.

def fit_centroid(m: Method, config, seed: int, data, settings, *, score: bool = True) -> FittedModel:
    check_config(m, config)
    seeds = sub_seeds(seed)
    res = make_reservoir(config, data.n_inputs, seeds["reservoir"])
    acc = StatsAccumulator(res.units, data.n_classes, bias=True)
    for u in data.train.values():
        acc.add_windows(res, u.x, u.y, settings.batch_size)
    sums = acc.result().a  # (C, N+1): per class, the summed states and the number of steps
    centroids = sums[:, :-1] / np.maximum(sums[:, -1:], 1.0)
    readout = np.concatenate([2.0 * centroids, -(centroids ** 2).sum(axis=1, keepdims=True)], axis=1)
    counts = pooled_counts(res, list(data.validation.values()), readout[None], settings.batch_size) if score else None
    _, val = select_lambda(counts, [0.0])
    return FittedModel(m.id, int(seed), dict(config), data.n_classes, seeds, reservoir=res, readout=readout,
                       lam=0.0, validation=val)  # λ = 0: no ridge penalty


# 2. Its family object, registered under its name.
@dataclass(frozen=True)
class NearestCentroid(Family):
    """A shared reservoir read out by its class centroids: nothing to regularise, no λ to choose."""

    @property
    def selects_lambda(self) -> bool:
        return False


@pytest.fixture
def centroid(monkeypatch):
    monkeypatch.setitem(REGISTRY, "centroid", NearestCentroid("centroid", trainer=f"{__name__}:fit_centroid", modules=(__name__,)))
    return Method("centroid")


# 3. Its tests: it runs through select, retrain and assess on tiny data.
def test_a_registered_method_runs_through_select_retrain_assess(tmp_path: Path, centroid: Method):
    make_dataset(tmp_path)
    exp = experiment_params(small_params())
    where = {"data_dir": tmp_path / "data", "runs_dir": tmp_path / "runs"}
    selected = select_stage.run("wesad", centroid, list(PCTS), exp, **where)
    assert not selected.failed
    best = json.loads(best_path(tmp_path / "runs", "wesad", "centroid", "50").read_text())
    assert set(best["config"]) == set(centroid.config_keys)
    retrained = retrain_stage.run("wesad", centroid, list(PCTS), exp, **where)
    assert not retrained.failed
    doc = assess_stage.run("wesad", centroid, exp, **where)
    share = doc["pcts"]["50"]
    assert doc["method"] == "centroid" and len(share["test_accuracy"]) == exp.retrains
    assert all(0.0 <= a <= 1.0 for a in share["test_accuracy"])
    # The assessed accuracy is the saved model's nearest-centroid prediction of the test users.
    model, _ = load_model(model_dir(tmp_path / "runs", "wesad", "centroid", "50"), 0)
    states_ok = total = 0
    n = model.reservoir.units
    centroids = model.readout[:, :n] / 2.0
    for user in TEST:
        u = load_user(tmp_path / "data" / "processed" / "wesad", user)
        states = run_batch(model.reservoir, u.x)  # (T, W, N), time-major
        d = ((states[:, :, None, :] - centroids) ** 2).sum(axis=3)
        states_ok += int((d.argmin(axis=2) == np.asarray(u.y).T).sum())
        total += d.shape[0] * d.shape[1]
    # float32 scores against float32 distances: a near-tie step may fall either way (one step each side)
    assert share["test_accuracy"][0] == pytest.approx(states_ok / total, abs=1.5 / total)
    assert __name__ in trial_modules(centroid)  # its module's source keys its results
