"""Retraining's λ (docs/fidelity.md §1): by default each retrained reservoir solves the whole λ grid
and keeps the λ with the best validation accuracy (the authors' retraining); ``retrain.lambda:
frozen`` reuses the selection trial's λ. The expected λ is computed here from the saved reservoir."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from esnfed_core.data.processed import load_user
from esnfed_core.method import Method
from esnfed_core.readout import ridge_stats, solve
from esnfed_core.scoring import pooled_counts
from esnfed_stages.experiment import retrain as retrain_stage
from esnfed_stages.params.experiment import experiment_params
from esnfed_stages.layout import model_dir
from esnfed_stages.experiment.models import load_model
from experiment_data import TRAIN, VALIDATION, make_dataset, small_params

PCT = "50"
CONFIG = {"units": 12, "spectral_radius": 0.9, "leak": 0.5, "input_scaling": 0.8}


def _validation_accuracies(root: Path, model, lambdas, batch_size) -> np.ndarray:
    """Per λ: validation accuracy of the ridge readout of the model's reservoir on TRAIN[PCT]."""
    proc = root / "data" / "processed" / "wesad"
    train = [load_user(proc, u) for u in TRAIN[PCT]]
    stats = sum(ridge_stats(model.reservoir, u.x, u.y, model.n_classes, batch_size) for u in train)
    readouts = solve(stats, lambdas)
    val = [load_user(proc, u) for u in VALIDATION]
    return pooled_counts(model.reservoir, val, readouts, batch_size).accuracy


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("lam")
    make_dataset(root, windows_per_context=6)
    params = small_params()
    params["budgets"]["default"]["retrains"] = 2
    return root, params


def _retrain(root: Path, params: dict, method: str, frozen_lambda: float) -> list:
    best = root / "runs" / "select" / "wesad" / method / PCT / "best.json"
    best.parent.mkdir(parents=True, exist_ok=True)
    best.write_text(json.dumps({"config": {**CONFIG, "lambda": frozen_lambda}}))
    retrain_stage.run("wesad", Method(method), [PCT], experiment_params(params), data_dir=root / "data",
                      runs_dir=root / "runs")
    return [load_model(model_dir(root / "runs", "wesad", method, PCT), k)
            for k in range(params["budgets"]["default"]["retrains"])]


@pytest.mark.parametrize("method", ["ridge", "incfed"])
def test_each_retrain_picks_the_argmax_of_its_own_validation_scores(setup, method):
    root, params = setup
    exp = experiment_params(params)
    lambdas = list(exp.settings.lambdas)
    # The selection trial's λ: the grid's worst on the first retrain's reservoir, so reusing it
    # (the old behaviour) cannot pass.
    models = _retrain(root, params, method, lambdas[0])
    accs = [_validation_accuracies(root, m, lambdas, exp.settings.batch_size) for m, _ in models]
    frozen = lambdas[int(np.argmin(accs[0]))]
    assert accs[0].max() > accs[0].min()  # the fixture discriminates between λs
    models = _retrain(root, params, method, frozen)
    for (model, meta), acc in zip(models, accs):
        want = lambdas[int(np.argmax(acc))]  # first maximum: the smallest λ among ties
        assert model.lam == want and meta["config"]["lambda"] == want and meta["lambda"] == want
        sel = meta["lambda_selection"]
        assert sel["mode"] == "select" and sel["lambdas"] == lambdas and sel["lambda"] == want
        # The retrain's own validation counts: the same per-user batches, statistics and λ grid as
        # _validation_accuracies, so the same argmaxes and the same accuracies, exactly.
        assert sel["validation_accuracy"] == acc.tolist()
    assert models[0][0].lam != frozen


def test_frozen_keeps_the_selection_trials_lambda(setup):
    root, params = setup
    params = {**params, "retrain": {"lambda": "frozen"}}
    for model, meta in _retrain(root, params, "ridge", 0.5):
        assert model.lam == 0.5 and meta["lambda_selection"] == {
            "mode": "frozen", "lambdas": [0.5], "lambda": 0.5, "validation_accuracy": None}


def test_continual_retrains_keep_the_fixed_lambda(setup):
    root, params = setup
    exp = experiment_params(params)
    assert not exp.settings.retrain_scores(Method("clip", "naive"))
    assert not exp.settings.retrain_scores(Method("random"))
    assert exp.settings.retrain_scores(Method("fedavg"))
