"""The pure trial function: each method against an independent computation of what it must equal."""

from __future__ import annotations

import json

import numpy as np
import pytest

from esnfed_core.errors import ConfigError
from esnfed_core.method import METHODS, Method
from esnfed_core.readout import ridge_stats, solve
from esnfed_core.scoring import accuracy, pooled_counts, random_accuracy
from esnfed_core.reservoir import ReservoirConfig, build_reservoir
from esnfed_core.settings import Settings
from esnfed_core.trial import TrialData, fit, make_reservoir, sub_seeds
from esnfed_stages.experiment.runner import fit_trial
from experiment_data import trial_data
from float32_bounds import readout_rtol

CFG = {"units": 16, "spectral_radius": 0.9, "leak": 0.5, "input_scaling": 0.8}
IP_CFG = {**CFG, "sigma": 0.3, "rounds": 2}
SETTINGS = Settings(ip={"mu": 0.0, "eta": 0.01, "batch_size": 4, "normalize_step": True})


@pytest.fixture(scope="module")
def data() -> TrialData:
    return trial_data(seed=1, pct="75")[0]


def test_method_ids_round_trip():
    for mid in METHODS:
        m = Method.parse(mid)
        assert m.id == mid
        assert m.continual == mid.startswith(("clip-", "fedclip-"))
    assert Method.parse("fedclip-replay").base == "fedip" and Method.parse("clip-joint").base == "ip"
    assert [m for m in METHODS if Method.parse(m).federated] == [
        "incfed", "fedavg", "fedip", "fedclip-naive", "fedclip-replay", "fedclip-joint",
        "deep-incfed", "deep-fedip",
        "local", "ensemble", "align-0.5"]  # local's ledger is empty (0 floats), but measured


@pytest.mark.parametrize("algo, strategy, fragment", [
    ("clip", None, "strategy"), ("ridge", "naive", "takes no strategy"), ("lasso", None, "unknown algorithm"),
    ("fedclip", "greedy", "strategy"),
])
def test_bad_methods_are_config_errors(algo, strategy, fragment):
    with pytest.raises(ConfigError, match=fragment):
        Method(algo, strategy)


def test_incfed_equals_centralised_ridge(data):
    ridge = fit("ridge", CFG, 11, data, SETTINGS)
    inc = fit("incfed", CFG, 11, data, SETTINGS)
    np.testing.assert_allclose(inc.readout, ridge.readout, rtol=1e-9, atol=1e-12)
    assert inc.validation["per_lambda"] == pytest.approx(ridge.validation["per_lambda"], abs=1e-9)
    assert inc.lam == ridge.lam and inc.config == ridge.config


def test_ridge_matches_an_independent_solve_and_lambda_choice(data):
    model = fit("ridge", CFG, 5, data, SETTINGS)
    res = make_reservoir(CFG, data.n_inputs, sub_seeds(5)["reservoir"])
    # The trial streams user by user: the same batches here (the same float32 states and chunk
    # products), summed per user in float64, so readouts agree to float64 rounding and the
    # validation counts (argmaxes) exactly.
    stats = sum(ridge_stats(res, u.x, u.y, data.n_classes) for u in data.train.values())
    grid = solve(stats, list(SETTINGS.lambdas))
    accs = [accuracy(res, w, list(data.validation.values())) for w in grid]
    best = int(np.argmax(accs))
    assert model.validation["per_lambda"] == pytest.approx(accs, abs=1e-12)
    assert model.lam == SETTINGS.lambdas[best] and model.score == max(accs)
    np.testing.assert_allclose(model.readout, grid[best], rtol=1e-9, atol=1e-12)
    # All windows at once (other batches, other float32 chunk sums): the same readout within the
    # float32 bounds of both sides.
    x = np.concatenate([u.x for u in data.train.values()])
    y = np.concatenate([u.y for u in data.train.values()])
    pooled = solve(ridge_stats(res, x, y, data.n_classes), model.lam)
    rtol = readout_rtol(stats.b, model.lam, sides=2)
    assert np.linalg.norm(model.readout - pooled) <= rtol * np.linalg.norm(pooled)
    # Refitting with the chosen λ fixed (what retraining does) gives the same readout.
    again = fit("ridge", model.config, 5, data, SETTINGS, score=False)
    np.testing.assert_array_equal(again.readout, model.readout)
    assert again.validation is None


def test_fedavg_is_the_size_weighted_mean_of_local_readouts(data):
    cfg = {**CFG, "lambda": 0.01}
    model = fit("fedavg", cfg, 3, data, SETTINGS, score=False)
    res = make_reservoir(cfg, data.n_inputs, sub_seeds(3)["reservoir"])
    local = [solve(ridge_stats(res, u.x, u.y, data.n_classes), 0.01) for u in data.train.values()]
    n = np.array([u.windows for u in data.train.values()], float)
    expected = sum(w * k for w, k in zip(local, n / n.sum()))
    np.testing.assert_allclose(model.readout, expected, rtol=1e-10, atol=1e-12)


def test_fedavg_on_one_client_is_ridge():
    one = trial_data(seed=2, pct="25")[0]
    a, b = fit("fedavg", CFG, 9, one, SETTINGS), fit("ridge", CFG, 9, one, SETTINGS)
    np.testing.assert_allclose(a.readout, b.readout, rtol=1e-9, atol=1e-12)
    assert a.score == b.score


def test_communication_counts_follow_protocol(data):
    n, c, k = CFG["units"], data.n_classes, len(data.train)
    inc = fit("incfed", CFG, 1, data, SETTINGS).communication
    assert inc == {"up_floats": k * (n * n + n * c), "down_floats": k * n * c, "rounds": 1, "clients": k,
                   "up_bytes": k * (8 * (n * n + n * c) + 16), "down_bytes": k * (8 * n * c + 8)}
    avg = fit("fedavg", CFG, 1, data, SETTINGS).communication
    assert avg["up_floats"] == avg["down_floats"] == k * n * c and avg["rounds"] == 1
    assert fit("ridge", CFG, 1, data, SETTINGS).communication is None


def test_fit_is_deterministic(data):
    for method, cfg in (("fedavg", CFG), ("ip", IP_CFG), ("fedip", {**IP_CFG, "local_epochs": 1})):
        a, b = fit(method, cfg, 21, data, SETTINGS), fit(method, cfg, 21, data, SETTINGS)
        assert a.readout.tobytes() == b.readout.tobytes()
        assert a.reservoir.gain.tobytes() == b.reservoir.gain.tobytes()
        assert a.validation == b.validation


def test_ip_changes_gain_and_fedip_on_one_client_is_ip():
    one = trial_data(seed=4, pct="25")[0]
    ip = fit("ip", {**IP_CFG, "rounds": 4}, 8, one, SETTINGS)
    fed = fit("fedip", {**IP_CFG, "rounds": 2, "local_epochs": 2}, 8, one, SETTINGS)
    assert ip.reservoir.has_ip
    np.testing.assert_array_equal(fed.reservoir.gain, ip.reservoir.gain)
    np.testing.assert_array_equal(fed.reservoir.bias, ip.reservoir.bias)
    np.testing.assert_allclose(fed.readout, ip.readout, rtol=1e-9, atol=1e-12)
    # FedIP messages: 2N floats each way per round and client, plus the IncFed round.
    n, c = IP_CFG["units"], one.n_classes
    assert fed.communication["up_floats"] == 2 * 2 * n + n * n + n * c
    assert fed.communication["rounds"] == 3


def test_random_baseline_is_about_one_over_c():
    data, test = trial_data(seed=5, pct="100", windows_per_context=30, steps=40)
    model = fit("random", {}, 13, data, SETTINGS)
    steps = sum(u.y.size for u in test.values())
    acc = random_accuracy(list(test.values()), data.n_classes, model.seeds["test"])
    assert abs(acc - 1 / 3) < 5 * np.sqrt((1 / 3) * (2 / 3) / steps)
    assert model.reservoir is None and model.validation["score"] == model.validation["accuracy"]


def test_retrain_needs_lambda_and_configs_need_their_keys(data):
    with pytest.raises(ConfigError, match="lambda"):
        fit("ridge", CFG, 0, data, SETTINGS, score=False)
    with pytest.raises(ConfigError, match="sigma, rounds"):
        fit("ip", CFG, 0, data, SETTINGS)
    with pytest.raises(ConfigError, match="local_epochs"):
        fit("fedip", IP_CFG, 0, data, SETTINGS)


def test_pooled_counts_pool_steps_not_user_means(data):
    model = fit("ridge", CFG, 2, data, SETTINGS)
    users = list(data.validation.values())
    per_user = [pooled_counts(model.reservoir, [u], model.readout) for u in users]
    pooled = pooled_counts(model.reservoir, users, model.readout)
    assert pooled.total == sum(c.total for c in per_user)
    assert pooled.correct[0] == sum(int(c.correct[0]) for c in per_user)


CONT_CFG = {**CFG, "sigma": 0.3, "budget": 2, "local_epochs": 1}


@pytest.mark.parametrize("method", ["clip-naive", "clip-replay", "clip-joint",
                                    "fedclip-naive", "fedclip-replay", "fedclip-joint"])
def test_continual_models_rescore_to_their_training_time_scores(data, method):
    """The per-context models kept by a continual fit, rescored by scoring.context_matrix, give
    the stream accuracy run_continual measured while training; the selection score follows §6."""
    from esnfed_core.metrics import stream_accuracy
    from esnfed_core.scoring import context_matrix

    model = fit(method, CONT_CFG, 17, data, SETTINGS)
    t = data.n_contexts
    assert model.context_gain.shape == (t, CFG["units"]) and model.context_readout.shape == (t, 3, CFG["units"])
    np.testing.assert_array_equal(model.context_readout[-1], model.readout)
    correct, total = context_matrix(model.context_reservoirs(), list(model.context_readout),
                                    list(data.validation.values()))
    stream = stream_accuracy(correct, total)
    assert model.validation["stream_accuracy"] == pytest.approx(list(stream), abs=1e-12)
    expected = stream[-1] if method.startswith("fed") else stream.mean()
    assert model.score == pytest.approx(expected, abs=1e-12)
    assert model.lam == SETTINGS.continual.lam
    assert (model.communication is not None) == method.startswith("fed")
    if method.endswith("joint"):  # each context's early stopping, round by round
        trace = model.validation["joint_trace"]
        assert len(trace) == t
        # the model kept is the first best round of its context, and its accuracy is the pooled
        # validation stream accuracy of that context
        assert model.ip_rounds == [int(np.argmax(tr)) + 1 for tr in trace]
        assert trace[-1][model.ip_rounds[-1] - 1] == pytest.approx(stream[-1], abs=1e-12)
    else:
        assert "joint_trace" not in model.validation


def test_a_joint_model_records_whether_a_cap_ended_its_contexts(data, tmp_path):
    """continual.joint.max_rounds (optional; PROTOCOL §5 has no cap): where it, not early stopping,
    ends a context, the model says so (trial scores and the saved .json); without a cap it never does."""
    from esnfed_stages.experiment.models import load_model, save_model

    joint_cfg = {k: v for k, v in CONT_CFG.items() if k in Method.parse("clip-joint").config_keys}
    capped = fit("clip-joint", joint_cfg, 17, data, Settings(ip=SETTINGS.ip, continual={"joint_max_rounds": 1}))
    t = data.n_contexts
    assert capped.ip_rounds == [1] * t and capped.joint_capped == [True] * t  # 1 round: patience cannot fire
    assert capped.validation["joint_capped"] == [True] * t
    save_model(tmp_path, 0, capped, {"dataset": "wesad", "pct": "75"})
    assert json.loads((tmp_path / "seed-0.json").read_text())["joint_capped"] == [True] * t
    assert load_model(tmp_path, 0)[0].joint_capped == [True] * t
    free = fit("clip-joint", joint_cfg, 17, data, SETTINGS)
    assert SETTINGS.continual.joint_max_rounds is None and free.joint_capped == [False] * t
    naive = fit("clip-naive", CONT_CFG, 17, data, SETTINGS)
    assert naive.joint_capped is None and "joint_capped" not in naive.validation
    save_model(tmp_path, 1, naive, {"dataset": "wesad", "pct": "75"})
    assert "joint_capped" not in json.loads((tmp_path / "seed-1.json").read_text())


def test_joint_takes_no_budget():
    assert "budget" not in Method.parse("clip-joint").config_keys
    assert "budget" in Method.parse("fedclip-replay").config_keys


def _peak_bytes(fn) -> int:
    import tracemalloc  # numpy reports its allocations to tracemalloc

    tracemalloc.start()
    try:
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_pooling_users_keeps_one_state_block_alive():
    """Centralised ridge over several users and the continual context matrix hold one state block
    (batch × T × N float32) at a time: a user's or model's last batch is released before the next
    buffer is allocated, so the peak does not grow with the number of users or models."""
    from esnfed_core.data.processed import UserData
    from esnfed_core.scoring import context_matrix
    from esnfed_core.trial import _pooled_stats

    rng = np.random.default_rng(0)
    t_len, batch, units = 200, 16, 200
    block = t_len * batch * units * 4  # 2.56 MB
    users = [UserData(rng.standard_normal((2 * batch, t_len, 3)).astype(np.float32),
                      rng.integers(0, 3, (2 * batch, t_len)).astype(np.int8),
                      np.repeat(np.arange(2), batch).astype(np.int8)) for _ in range(4)]
    res = build_reservoir(ReservoirConfig(3, units, 0.9, 0.5, 1.0), 0)
    one = _peak_bytes(lambda: _pooled_stats(res, users[:1], 3, batch))
    four = _peak_bytes(lambda: _pooled_stats(res, users, 3, batch))
    assert four < one + block / 2, (one, four, block)
    readouts = [rng.standard_normal((3, units)) for _ in range(2)]
    ctx0 = [UserData(users[0].x, users[0].y, np.zeros(2 * batch, np.int8))]  # valid for 1 or 2 models
    one = _peak_bytes(lambda: context_matrix([res], readouts[:1], ctx0, batch))
    two = _peak_bytes(lambda: context_matrix([res, res], readouts, ctx0, batch))
    assert two < one + block / 2, (one, two, block)


@pytest.mark.parametrize("method", [m for m in METHODS if m != "random"])
def test_the_solver_setting_reaches_every_readout_solve(data, method, monkeypatch):
    """readout.solver: pinv32 solves every readout of every method with numpy's pinv (the
    authors' numerics) and the default Cholesky never calls it (docs/fidelity.md §4)."""
    from dataclasses import replace

    calls = []
    real = np.linalg.pinv

    def spy(m, *args, **kwargs):
        calls.append(m.dtype)
        return real(m, *args, **kwargs)

    monkeypatch.setattr(np.linalg, "pinv", spy)
    m = Method.parse(method)
    cfg = {**IP_CFG, "budget": 1, "local_epochs": 1} if m.uses_ip else dict(CFG)
    if m.deep:
        cfg["layers"] = 2
    fit_trial(method, cfg, 3, data, SETTINGS)  # every family (heterogeneous: its own module)
    assert calls == []
    fit_trial(method, cfg, 3, data, replace(SETTINGS, solver="pinv32"))
    assert calls and set(calls) == {np.dtype(np.float32)}


@pytest.mark.parametrize("method", ["local", "ensemble", "align-0.5"])
def test_the_shared_reservoir_trial_refuses_heterogeneous_methods(data, method):
    """trial.fit trains one reservoir shared by all clients; the one-reservoir-per-client methods
    go through esnfed_core.heterogeneous.fit (the stages' fit_trial picks it)."""
    with pytest.raises(ConfigError, match="heterogeneous"):
        fit(method, CFG, 3, data, SETTINGS)
    assert fit_trial(method, CFG, 3, data, SETTINGS).method == method
