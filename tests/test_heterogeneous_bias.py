"""The readout bias (params.yaml readout.bias) on the heterogeneous methods: local's and the
ensemble's per-client readouts and align-α's shared readout are ridge with an unpenalised bias
(against the float64 solve over the augmented states), the ensemble adds each client's bias to its
outputs, the messages carry N+1 readout columns, and saved models round-trip.

Tolerances: a readout from streamed float32 statistics within 2·u·cond(B + λ·diag(1, …, 1, 0)) per
rounding side of the float64 solve (tests/float32_bounds.py; the reference's states come from other
window batches: 2 sides); an accuracy count within 1 in 1000 steps (an argmax flips where two class
scores tie within rounding), as tests/test_heterogeneous.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from bias_reference import augmented_rows, float64_ridge
from esnfed_core.heterogeneity import Heterogeneity
from esnfed_core.heterogeneous import assess_scores, ensemble_counts
from esnfed_core.readout import ridge_stats, solve
from esnfed_core.scoring import pooled_counts
from esnfed_core.search import parse_space
from esnfed_core.settings import Settings
from esnfed_core.communication import Communication, communication_rows
from esnfed_core.trial import make_reservoir
from esnfed_stages.experiment.models import load_model, save_model
from esnfed_stages.experiment.runner import fit_trial as fit
from experiment_data import trial_data
from float32_bounds import readout_rtol

CFG = {"units": 10, "spectral_radius": 0.9, "leak": 0.5, "input_scaling": 1.0}
SPACE = parse_space({"spectral_radius": {"low": 0.3, "high": 0.95, "step": 0.05},
                     "leak": {"low": 0.1, "high": 0.8, "step": 0.05}, "input_scaling": [0.5, 1.0]})
HET = Heterogeneity("space", 7, tuple(SPACE))
ON, OFF = Settings(heterogeneity=HET, readout_bias=True), Settings(heterogeneity=HET)
LAM = 0.1


@pytest.fixture(scope="module")
def data():
    return trial_data(pct="100")


def _close(w, want, gram) -> None:
    tol = readout_rtol(gram, LAM, sides=2, bias=True)
    assert np.linalg.norm(w - want) <= (1e-9 + tol) * np.linalg.norm(want), tol


def test_local_readouts_are_each_clients_ridge_with_bias(data):
    train, _ = data
    local = fit("local", {**CFG, "lambda": LAM}, 4, train, ON, score=False)
    for r, w, u in zip(local.clients, local.client_readouts, train.train.values()):  # own data only
        assert w.shape == (train.n_classes, r.units + 1) and np.abs(w[:, -1]).max() > 1e-3
        _close(w, *float64_ridge([(r, u.x, u.y)], train.n_classes, LAM))


def test_align_readout_is_ridge_with_bias_over_the_aligned_reservoirs(data):
    train, _ = data
    al = fit("align-0.5", {**CFG, "lambda": LAM}, 4, train, ON, score=False)
    assert al.readout.shape == (train.n_classes, CFG["units"] + 1)
    parts = [(r, u.x, u.y) for r, u in zip(al.clients, train.train.values())]
    _close(al.readout, *float64_ridge(parts, train.n_classes, LAM))
    # align-1 is IncFed with the bias, bit for bit (as without it)
    inc = fit("incfed", CFG, 11, train, ON)
    a1 = fit("align-1", CFG, 11, train, ON)
    assert np.array_equal(a1.readout, inc.readout) and a1.validation == inc.validation


def test_ensemble_adds_each_clients_bias_to_its_outputs(data):
    train, test = data
    ens = fit("ensemble", CFG, 4, train, ON)
    users = list(test.values())
    for combine in ("softmax", "vote"):
        got = ensemble_counts(ens.clients, ens.client_readouts, users, 256, combine)
        # float64 reference: [s, 1] @ Wᵀ per client, softmax (or one-hot argmax), summed, argmax
        correct = total = 0
        for u in users:
            sums, labels = 0.0, None
            for r, w in zip(ens.clients, ens.client_readouts):
                rows, labels = augmented_rows(r, u.x, u.y)
                z = rows @ w.T
                if combine == "vote":
                    sums = sums + np.eye(w.shape[0])[z.argmax(axis=1)]
                else:
                    z = np.exp(z - z.max(axis=1, keepdims=True))
                    sums = sums + z / z.sum(axis=1, keepdims=True)
            correct += int((sums.argmax(axis=1) == labels).sum())
            total += labels.size
        assert got.total == total
        assert abs(int(got.correct[0]) - correct) <= max(1, total // 1000), combine
    # the bias matters: without its column the ensemble's answers differ
    plain = ensemble_counts(ens.clients, [w[:, :-1] for w in ens.client_readouts], users, 256)
    assert int(plain.correct[0]) != int(ensemble_counts(ens.clients, ens.client_readouts, users, 256).correct[0])
    # identical clients: the ensemble is the single model with its bias
    res = make_reservoir(CFG, train.n_inputs, 3)
    w = solve(sum(ridge_stats(res, u.x, u.y, train.n_classes, bias=True) for u in train.train.values()), [1e-3, 0.1])
    single = pooled_counts(res, users, w, batch_size=5)
    same = ensemble_counts([res] * 3, [w] * 3, users, 5)
    assert np.all(np.abs(same.correct - single.correct) <= max(1, single.total // 1000))


def test_messages_carry_n_plus_1_readout_columns(data):
    train, _ = data
    k, n, u, c = len(train.train), CFG["units"], train.n_inputs, train.n_classes
    ens = fit("ensemble", CFG, 4, train, ON).communication
    assert ens["readout_bias"] is True
    assert ens["up_floats"] == k * (n * u + n * n + 2 * n + 1 + (n + 1) * c)
    assert ens["up_bytes"] == k * (4 * (n * u + n * n + 2 * n) + 8 + 8 * (n + 1) * c + 8)
    al = fit("align-0.5", CFG, 4, train, ON).communication
    assert al["up_floats"] == k * ((n + 1) ** 2 + (n + 1) * c) and al["down_floats"] == k * (n + 1) * c
    loc = fit("local", CFG, 4, train, ON).communication
    for method, comm in (("ensemble", ens), ("local", loc), ("align-0.5", al)):
        item = Communication("wesad", "100", method, comm["up_floats"], comm["down_floats"], comm["up_bytes"],
                             comm["down_bytes"], comm["rounds"], comm["clients"], units=n, classes=c,
                             readouts=1, inputs=comm["inputs"], readout_bias=comm.get("readout_bias") is True)
        row = communication_rows([item])[0]
        assert row["match"] is True, method
    assert "readout_bias" not in fit("ensemble", CFG, 4, train, OFF).communication


@pytest.mark.parametrize("method", ["local", "ensemble", "align-0.5"])
def test_saved_models_with_bias_round_trip(tmp_path, data, method):
    train, test = data
    model = fit(method, CFG, 4, train, ON)
    save_model(tmp_path, 0, model, {"dataset": "wesad", "pct": "100"})
    back, meta = load_model(tmp_path, 0)
    assert meta["readout_bias"] is True
    readouts = back.client_readouts if back.client_readouts is not None else [back.readout]
    assert all(w.shape[1] == CFG["units"] + 1 for w in readouts)
    users = list(test.values())
    assert assess_scores(back, users, 256) == assess_scores(model, users, 256)
    plain = fit(method, CFG, 4, train, OFF)
    save_model(tmp_path, 1, plain, {"dataset": "wesad", "pct": "100"})
    assert "readout_bias" not in load_model(tmp_path, 1)[1]


def test_the_report_reads_the_bias_from_the_assess_communication(data):
    """esnfed_stages.report.hetero_report's communication items carry the assess file's readout_bias, so
    the table's formulas (N+1) match the ledger's counts of a run with the bias."""
    from esnfed_stages.report import hetero_report  # noqa: PLC0415
    from esnfed_stages.report.ttest import Inputs  # noqa: PLC0415

    train, _ = data
    inputs = Inputs()
    for m in ("ensemble", "align-0.5"):
        comm = fit(m, CFG, 4, train, ON).communication
        inputs.docs[("mine", m)] = {"pcts": {"100": {"config": dict(CFG), "communication": comm}}}
    items = hetero_report.communication_items(inputs, ("ensemble", "align-0.5"), ("mine",))
    assert len(items) == 2 and all(c.readout_bias for c in items)
    assert all(row["match"] is True for row in communication_rows(items))
