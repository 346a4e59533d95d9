"""The readout bias (params.yaml readout.bias) on the continual methods (CLIP, FedCLIP: naive,
replay, joint) on numpy: each context's readout is the ridge with an unpenalised bias over the
data the strategy's readout sees (D_t, D_t ∪ M_t, D_0..t), FedCLIP's equal to the centralised one;
bias off leaves every run as it was; the message counts and saved models follow the N+1 columns.

Tolerances. A readout solved from streamed float32 statistics moves from the float64 solve of
the same rows by at most 2·u·cond(B + λ·diag(1, …, 1, 0)) per side (tests/float32_bounds.py);
the reference's states come from other window batches than the clients' (float32 GEMM rounding
of the states), so it is a second side: sides = 2.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from esnfed_core.continual import ContinualConfig, LocalClient, make_strategy, run_continual
from esnfed_core.messages import CommLedger
from esnfed_core.method import Method
from esnfed_core.plasticity import IPConfig
from esnfed_core.readout import ridge_stats, solve
from esnfed_core.replay import concat_splits
from esnfed_core.reservoir import ReservoirConfig, build_reservoir
from esnfed_core.settings import Settings
from esnfed_core.communication import Communication, analytic_floats, validation_columns
from esnfed_core.trial import fit
from bias_reference import float64_ridge
from experiment_data import trial_data
from float32_bounds import readout_rtol

C, STEPS = 4, 15
RES = build_reservoir(ReservoirConfig(3, 20, 0.8, 0.5, 0.5), 0)
N = RES.units
LAM = 1e-2  # a λ where cond(B + λP), hence the tolerance, stays moderate
IP = IPConfig(sigma=0.3)


def _stream(seed: int, n: int) -> list:
    """Three contexts of ``n`` windows, classes drawn from a context's own pair."""
    rng = np.random.default_rng(seed)
    out = []
    for classes in ([0, 1], [2, 3], [0, 3]):
        lab = np.asarray(classes)[rng.integers(0, 2, n)]
        x = (0.5 * rng.standard_normal((n, STEPS, 3)) + lab[:, None, None] / 3).astype(np.float32)
        out.append((x, np.repeat(lab[:, None], STEPS, axis=1).astype(np.int8)))
    return out


TRAIN = [_stream(1, 30), _stream(2, 22)]  # two clients of different sizes
VAL = [_stream(3, 10)]


def _run(strategy: str, federated: bool, bias: bool, train=TRAIN, ledger=None, local_epochs: int = 2):
    strat = make_strategy(strategy, budget=2, replay_fraction=0.3, replay_batch=4, patience=2,
                          max_joint_rounds=4)
    config = ContinualConfig(federated, IP, C, local_epochs=local_epochs if federated else 1, lam=LAM,
                             seed=5, bias=bias)
    result = run_continual(RES, train, strat, config, validation=VAL, ledger=ledger)
    return strat, config, result


@pytest.mark.parametrize("strategy", ["naive", "replay", "joint"])
@pytest.mark.parametrize("federated", [True, False])
def test_each_contexts_readout_is_ridge_with_bias_over_what_the_strategy_sees(strategy, federated):
    strat, config, result = _run(strategy, federated, bias=True)
    for t, (res_t, w) in enumerate(zip(result.reservoirs, result.readouts)):
        assert w.shape == (C, N + 1)
        # What the readout sees at t, pooled over the clients (D_t; replay D_t ∪ M_t; joint
        # D_0..t), as each client holds it: a client rebuilt at context t (its buffer updated
        # after every earlier context; the data do not depend on the IP rounds run). CLIP is one
        # client holding the pooled windows of each context (one buffer over the pooled stream).
        streams = TRAIN if federated else [[concat_splits([c[j] for c in TRAIN]) for j in range(3)]]
        parts = [LocalClient.at(strat, config, contexts, t, 0, history=[0] * t).data(t) for contexts in streams]
        x = np.concatenate([p[0] for p in parts])
        y = np.concatenate([p[1] for p in parts])
        want, gram = float64_ridge([(res_t, x, y)], C, LAM)
        tol = readout_rtol(gram, LAM, sides=2, bias=True)
        assert np.linalg.norm(w - want) <= (1e-9 + tol) * np.linalg.norm(want), (t, tol)
        assert np.abs(w[:, N]).max() > 1e-3  # a bias was fitted (it is not zero)


@pytest.mark.parametrize("strategy", ["naive", "replay", "joint"])
def test_fedclip_readout_with_bias_equals_clip_on_the_pooled_clients(strategy):
    """Federated == centralised: FedCLIP on one client with one local epoch is CLIP bit for bit,
    and on two clients each context's readout is the centralised ridge of the pooled statistics
    through the same reservoir (other sums of the same float32 chunk products: 2 sides)."""
    one = [TRAIN[0]]
    _, _, central = _run(strategy, False, True, train=one)
    _, _, fed = _run(strategy, True, True, train=one, local_epochs=1)
    for a, b in zip(central.readouts, fed.readouts):
        assert a.shape == (C, N + 1) and np.array_equal(a, b)
    strat, config, two = _run(strategy, True, True)
    for t, (res_t, w) in enumerate(zip(two.reservoirs, two.readouts)):
        parts = [LocalClient.at(strat, config, contexts, t, 0, history=[0] * t).data(t) for contexts in TRAIN]
        pooled = ridge_stats(res_t, np.concatenate([p[0] for p in parts]),
                             np.concatenate([p[1] for p in parts]), C, bias=True)
        want = solve(pooled, LAM)
        tol = readout_rtol(pooled.b, LAM, sides=2, bias=True)
        assert np.linalg.norm(w - want) <= (1e-12 + tol) * np.linalg.norm(want), (t, tol)


@pytest.mark.parametrize("strategy", ["naive", "replay"])
def test_the_bias_changes_only_the_readout_and_off_is_the_default(strategy):
    """IP never reads the readout (naive, replay): with and without the bias the reservoirs are the
    same bits; off is the default, and its readouts keep N columns."""
    _, _, on = _run(strategy, True, True)
    _, _, off = _run(strategy, True, False)
    strat = make_strategy(strategy, budget=2, replay_fraction=0.3, replay_batch=4)
    default = run_continual(RES, TRAIN, strat, ContinualConfig(True, IP, C, local_epochs=2, lam=LAM, seed=5))
    for a, b, d in zip(on.reservoirs, off.reservoirs, default.reservoirs):
        assert np.array_equal(a.gain, b.gain) and np.array_equal(a.bias, b.bias)
        assert np.array_equal(d.gain, b.gain) and np.array_equal(d.bias, b.bias)
    for w_on, w_off, w_def in zip(on.readouts, off.readouts, default.readouts):
        assert w_off.shape == (C, N) and np.array_equal(w_off, w_def)
        assert not np.allclose(w_on[:, :N], w_off, rtol=1e-3)  # the intercept moves the weights


def test_fedclip_ledger_sends_n_plus_1_columns():
    ledger = CommLedger()
    _run("naive", True, True, ledger=ledger)
    stats = [e for e in ledger.entries if e.algorithm == "incfed" and e.kind == "StatsMessage"]
    readouts = [e for e in ledger.entries if e.algorithm == "incfed" and e.kind == "ReadoutMessage"]
    assert len(stats) == len(readouts) == 2 * 3  # clients × contexts
    assert all(e.floats == (N + 1) ** 2 + (N + 1) * C for e in stats)
    assert all(e.floats == (N + 1) * C for e in readouts)
    plast = [e for e in ledger.entries if e.kind == "PlasticityMessage"]
    assert plast and all(e.floats == 2 * N for e in plast)  # (g, b) keep 2N


CFG = {"units": 12, "spectral_radius": 0.9, "leak": 0.5, "input_scaling": 0.8, "sigma": 0.3,
       "budget": 2, "local_epochs": 1}


@pytest.fixture(scope="module")
def data():
    return trial_data(seed=1, pct="75")[0]


@pytest.mark.parametrize("method", ["fedclip-naive", "fedclip-replay", "fedclip-joint"])
def test_fedclip_trials_record_the_bias_and_the_counts_follow(data, method):
    cfg = {k: v for k, v in CFG.items() if k in Method.parse(method).config_keys}
    on = fit(method, cfg, 3, data, Settings(readout_bias=True))
    off = fit(method, cfg, 3, data, Settings())
    n, c = cfg["units"], data.n_classes
    assert on.readout.shape == (c, n + 1) and on.context_readout.shape == (data.n_contexts, c, n + 1)
    assert off.readout.shape == (c, n) and "readout_bias" not in off.communication
    comm = on.communication
    assert comm["readout_bias"] is True
    row = Communication("wesad", "75", method, comm["up_floats"], comm["down_floats"], comm["up_bytes"],
                        comm["down_bytes"], comm["rounds"], comm["clients"], units=n, classes=c,
                        ip_rounds=sum(comm["context_rounds"]), readouts=comm["rounds"] - sum(comm["context_rounds"]),
                        participants=tuple(comm["participants"]), context_rounds=tuple(comm["context_rounds"]),
                        readout_bias=True, validation_clients=len(data.validation), lambda_grid=1)
    text_up, text_down, up, down = analytic_floats(row)
    assert (up, down) == (comm["up_floats"], comm["down_floats"])
    assert "(N+1)²" in text_up and "(N+1)·C" in text_down
    # the bias's extra column is in the counts: without it the formula gives fewer floats
    plain = analytic_floats(dataclasses.replace(row, readout_bias=False))
    assert plain[2] < up and plain[3] < down
    val = validation_columns(row)
    if method == "fedclip-joint":  # joint scores (g, b) and the readout on validation each round
        assert val["validation_traffic"] is True and val["validation_match"] is True
        assert "(N+1)·C" in val["validation_formula_down"]
        assert val["validation_down_floats"] == len(data.validation) * row.ip_rounds * (2 * n + (n + 1) * c)
    else:
        assert val["validation_traffic"] is False


def test_saved_continual_model_with_bias_round_trips(tmp_path, data):
    from esnfed_stages.experiment.models import load_model, save_model  # noqa: PLC0415

    cfg = {k: v for k, v in CFG.items() if k in Method.parse("clip-naive").config_keys}
    model = fit("clip-naive", cfg, 3, data, Settings(readout_bias=True))
    save_model(tmp_path, 0, model, {"dataset": "wesad", "pct": "75"})
    back, meta = load_model(tmp_path, 0)
    assert meta["readout_bias"] is True
    assert back.context_readout.shape == (data.n_contexts, data.n_classes, cfg["units"] + 1)
    assert np.array_equal(back.context_readout, model.context_readout)
    assert np.array_equal(back.readout, model.context_readout[-1])


@pytest.mark.parametrize("method", ["fedip", "fedclip-naive"])
def test_the_bias_and_client_sampling_combine_in_the_counts(data, method):
    """federated.client_fraction samples the IP rounds' clients, readout.bias widens the readout's
    messages: both together, the ledger's totals are the analytic formula with both."""
    cfg = {k: v for k, v in {**CFG, "sigma": 0.3, "rounds": 2}.items() if k in Method.parse(method).config_keys}
    model = fit(method, cfg, 3, data, Settings(readout_bias=True, client_fraction=0.5))
    comm = model.communication
    assert comm["readout_bias"] is True and comm["client_fraction"] == 0.5
    extra = {} if method == "fedip" else {"participants": tuple(comm["participants"]),
                                          "context_rounds": tuple(comm["context_rounds"])}
    ip_rounds = cfg["rounds"] if method == "fedip" else sum(comm["context_rounds"])
    row = Communication("wesad", "75", method, comm["up_floats"], comm["down_floats"], comm["up_bytes"],
                        comm["down_bytes"], comm["rounds"], comm["clients"], units=cfg["units"],
                        classes=data.n_classes, ip_rounds=ip_rounds, readouts=comm["rounds"] - ip_rounds,
                        readout_bias=True, client_fraction=0.5, **extra)
    assert analytic_floats(row)[2:] == (comm["up_floats"], comm["down_floats"])
    assert model.readout.shape == (data.n_classes, cfg["units"] + 1)
