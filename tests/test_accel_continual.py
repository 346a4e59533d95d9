"""Continual trials (CLIP/FedCLIP, naive/replay/joint) batched on torch's CPU build
(esnfed_core.accel.continual) against the numpy path, trial by trial.

Tolerances. The IP steps, statistics and counts are the kernels of tests/test_accel.py (states
within a few float32 ulps, sums within 1e-5 relative), and the trial threads run the numpy server
code itself, so the shuffles, replay buffers, messages and the number of IP rounds are the same;
gains and biases after a context differ by float32 rounding carried through the steps (atol 1e-5,
as the stationary IP tests). Readouts at the continual λ = 1e-5 amplify the statistics' relative
error by cond(B + λI): the test bounds it by that condition number times 1e-5 (the statistics'
tolerance). An accuracy may move by one step where two class scores tie within rounding: the
stream accuracies are compared within 2 steps of the smallest context.

Joint's early stopping compares those accuracies round by round, and an accuracy that equals the
best so far is no improvement: a one-step flip there can stop a context at another round on
another CPU kernel. Where the IP rounds of a context differ, the two paths' per-round validation
accuracies (``joint_trace``) must still agree within the same 2 steps, which is what a tie broken
by rounding looks like; the later contexts then start from other models and are not compared.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import torch  # noqa: E402  (in the [test] extra: a missing torch is an error, not a skip)

from esnfed_core.accel import continual as accel_continual  # noqa: E402
from esnfed_core.accel.trials import fit_batch  # noqa: E402
from esnfed_core.continual import NUMPY_ENGINE, ContinualConfig, make_strategy, run_continual  # noqa: E402
from esnfed_core.method import Method  # noqa: E402
from esnfed_core.plasticity import IPConfig  # noqa: E402
from esnfed_core.readout import ridge_stats  # noqa: E402
from esnfed_core.settings import Settings  # noqa: E402
from esnfed_core.trial import continual_contexts, fit  # noqa: E402
from esnfed_stages.experiment.runner import TrialTask, batches, fit_trial  # noqa: E402
from experiment_data import trial_data  # noqa: E402

SETTINGS = Settings(ip={"mu": 0.0, "eta": 0.01, "batch_size": 4, "normalize_step": True},
                    continual={"replay_fraction": 0.3, "replay_batch": 2})
TORCH = dataclasses.replace(SETTINGS, device="torch-cpu")
BASE = [{"units": 16, "spectral_radius": 0.9, "leak": 0.5, "input_scaling": 0.8, "sigma": 0.3},
        {"units": 16, "spectral_radius": 0.6, "leak": 0.3, "input_scaling": 1.0, "sigma": 0.7}]
METHODS = [f"{a}-{s}" for a in ("clip", "fedclip") for s in ("naive", "replay", "joint")]
SEEDS = [3, 4]


@pytest.fixture(scope="module")
def data():
    return trial_data(seed=1, pct="75")[0]


def _configs(method: str) -> list[dict]:
    out = []
    for i, b in enumerate(BASE):
        cfg = dict(b)
        if not method.endswith("joint"):
            cfg["budget"] = 2 + i
        if method.startswith("fedclip"):
            cfg["local_epochs"] = 1 + i
        out.append(cfg)
    return out


def _readout_bound(model, data, bias: bool = False) -> float:
    """cond(B + λI) of the last context's reservoir on all training windows × 1e-5 (with ``bias``:
    of the augmented statistics, penalty λ·diag(1, …, 1, 0))."""
    x = np.concatenate([u.x for u in data.train.values()])
    y = np.concatenate([u.y for u in data.train.values()])
    b = ridge_stats(model.reservoir, x, y, data.n_classes, bias=bias).b
    penalty = np.eye(len(b))
    if bias:
        penalty[-1, -1] = 0.0
    return float(np.linalg.cond(b + model.lam * penalty)) * 1e-5


def _first_divergence(got, want) -> int:
    """The first context whose IP rounds differ between two runs of a trial (the number of
    contexts when none does)."""
    return next((t for t, (a, b) in enumerate(zip(got.ip_rounds, want.ip_rounds)) if a != b),
                len(want.ip_rounds))


def _same_rounds_or_a_tie(got, want, steps: int) -> int:
    """Assert that two runs of a continual trial ran the same IP rounds at every context, or that
    where they first differ a tie explains it: joint's per-round validation accuracies agree
    within 2 steps up to there. Return the number of contexts trained alike."""
    t = _first_divergence(got, want)
    assert len(got.ip_rounds) == len(want.ip_rounds)
    if t == len(want.ip_rounds):
        assert got.communication == want.communication
    else:
        assert "joint_trace" in want.validation, (got.ip_rounds, want.ip_rounds)  # only joint stops early
    if "joint_trace" in want.validation:
        for a, b in zip(got.validation["joint_trace"][: t + 1], want.validation["joint_trace"][: t + 1]):
            n = min(len(a), len(b))
            assert n >= 1
            np.testing.assert_allclose(a[:n], b[:n], rtol=0, atol=2 / steps)
    return t


def _validation_steps(data) -> int:
    """Steps of the smallest validation context (the unit of the accuracy tolerances)."""
    return min(int(u.y[: len(u.y) // data.n_contexts].size) for u in data.validation.values())


@pytest.fixture(scope="module")
def batched(data):
    return {m: fit_batch(m, _configs(m), SEEDS, data, TORCH) for m in METHODS}


def _assert_batch_equals_numpy(data, method: str, models, settings: Settings) -> list:
    """Each batched model equals the numpy path's trial under ``settings`` (float32 tolerances);
    the numpy models."""
    steps = _validation_steps(data)
    wants = []
    for cfg, seed, got in zip(_configs(method), SEEDS, models):
        want = fit(method, cfg, seed, data, settings)
        wants.append(want)
        assert got.config == want.config and got.seed == want.seed
        t = _same_rounds_or_a_tie(got, want, steps)
        np.testing.assert_allclose(got.context_gain[:t], want.context_gain[:t], rtol=0, atol=1e-5)
        np.testing.assert_allclose(got.context_bias[:t], want.context_bias[:t], rtol=0, atol=1e-5)
        np.testing.assert_allclose(got.validation["stream_accuracy"][:t], want.validation["stream_accuracy"][:t],
                                   rtol=0, atol=2 / steps)
        if t == len(want.ip_rounds):
            rel = np.abs(got.context_readout - want.context_readout).max() / np.abs(want.context_readout).max()
            bound = _readout_bound(want, data, settings.readout_bias)
            assert rel <= bound, (rel, bound)
    return wants


@pytest.mark.parametrize("method", METHODS)
def test_batched_continual_trials_equal_the_numpy_path(data, batched, method):
    _assert_batch_equals_numpy(data, method, batched[method], SETTINGS)


@pytest.mark.parametrize("method", ["clip-replay", "fedclip-replay"])
def test_batched_trials_equal_the_numpy_path_under_the_proportional_replay_policy(data, method):
    """continual.replay.policy proportional: the torch path builds the same buffers (the core's) and
    equals the numpy path within the tolerances above. 60 % of the windows buffered (the data's
    contexts hold 4 windows per client, 12 pooled): there the two policies keep other windows before
    the last context, so the models differ from the uniform policy's by far more than float32 rounding
    (their readouts by 20-50 % of their largest entry)."""
    unif = dataclasses.replace(SETTINGS, continual=dataclasses.replace(SETTINGS.continual, replay_fraction=0.6))
    prop = dataclasses.replace(unif, continual=dataclasses.replace(unif.continual, replay_policy="proportional"))
    got = fit_batch(method, _configs(method), SEEDS, data, dataclasses.replace(prop, device="torch-cpu"))
    wants = _assert_batch_equals_numpy(data, method, got, prop)
    uniform = [fit(method, cfg, seed, data, unif) for cfg, seed in zip(_configs(method), SEEDS)]
    assert all(np.abs(w.context_readout - u.context_readout).max() > 0.1 * np.abs(u.context_readout).max()
               for w, u in zip(wants, uniform))


@pytest.mark.parametrize("method", ["clip-joint", "fedclip-replay"])
def test_a_batch_repeats_bit_for_bit_and_equals_each_trial_alone(data, batched, method):
    again = fit_batch(method, _configs(method), SEEDS, data, TORCH)
    for a, b in zip(batched[method], again):  # same shapes: the same roundings
        assert np.array_equal(a.context_gain, b.context_gain)
        assert np.array_equal(a.context_readout, b.context_readout)
        assert a.validation == b.validation
    for cfg, seed, b in zip(_configs(method), SEEDS, batched[method]):
        alone = fit_batch(method, [cfg], [seed], data, TORCH)[0]  # other bmm shapes: rounding only
        t = _same_rounds_or_a_tie(alone, b, _validation_steps(data))
        np.testing.assert_allclose(alone.context_gain[:t], b.context_gain[:t], rtol=0, atol=1e-5)


def test_fit_trial_on_torch_cpu_runs_continual_trials_batched(data, monkeypatch):
    calls = []
    real = accel_continual.fit_continual_batch

    def spy(*args, **kw):
        calls.append(args[0])
        return real(*args, **kw)

    monkeypatch.setattr(accel_continual, "fit_continual_batch", spy)
    model = fit_trial("clip-naive", _configs("clip-naive")[0], 3, data, TORCH, score=False)
    assert len(calls) == 1 and model.validation is None and model.lam == SETTINGS.continual.lam


def test_the_runner_batches_continual_trials_of_one_size():
    ref = object()
    tasks = [TrialTask(f"t{i}", ref, "fedclip-joint", {**BASE[0], "units": u}, i, TORCH)
             for i, u in enumerate([16, 16, 8, 16])]
    assert [[t.label for t in g] for g in batches(tasks, 64)] == [["t0", "t1", "t3"], ["t2"]]


def test_a_failing_trial_fails_the_batch_with_its_own_error(data):
    bad = {**_configs("clip-naive")[1], "sigma": -1.0}
    with pytest.raises(ValueError, match="sigma"):
        fit_batch("clip-naive", [_configs("clip-naive")[0], bad], SEEDS, data, TORCH)


def test_the_torch_engine_joins_contexts_lazily_from_the_shared_arrays(data):
    """Joint's D_0..D_t and replay's D_t ∪ M_t are Concatenations of the contexts' own arrays
    (so the device holds each context once per batch), equal to numpy's concatenation."""
    train, _, _ = continual_contexts(Method.parse("clip-joint"), data)
    engine = accel_continual.TorchEngine(accel_continual._Lockstep(1), 0)
    x, y = engine.concat(train[0])
    assert [id(p) for p in x.parts] == [id(s[0]) for s in train[0]]
    assert np.array_equal(np.asarray(x), np.concatenate([s[0] for s in train[0]]))
    assert np.array_equal(y, np.concatenate([s[1] for s in train[0]]))


def test_run_continual_takes_the_engine_and_numpy_is_the_default(data):
    """run_continual with the numpy engine given explicitly is bit-identical to the default."""
    train, _, val = continual_contexts(Method.parse("clip-replay"), data)
    res = fit("ridge", {k: v for k, v in BASE[0].items() if k != "sigma"}, 3, data, SETTINGS).reservoir
    cfg = ContinualConfig(False, IPConfig(sigma=0.5, batch_size=4), data.n_classes)
    strat = make_strategy("replay", budget=2, replay_fraction=0.3, replay_batch=2)
    a = run_continual(res, train, strat, cfg, evaluate={"v": val})
    b = run_continual(res, train, strat, cfg, evaluate={"v": val}, engine=NUMPY_ENGINE)
    assert np.array_equal(a.correct["v"], b.correct["v"])
    assert all(np.array_equal(p, q) for p, q in zip(a.readouts, b.readouts))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("method", ["fedclip-replay", "clip-joint"])
def test_cuda_continual_batch_equals_the_numpy_path(data, method):
    got = fit_batch(method, _configs(method), SEEDS, data, dataclasses.replace(SETTINGS, device="cuda"))
    for cfg, seed, g in zip(_configs(method), SEEDS, got):
        want = fit(method, cfg, seed, data, SETTINGS)
        t = _same_rounds_or_a_tie(g, want, _validation_steps(data))
        np.testing.assert_allclose(g.context_gain[:t], want.context_gain[:t], rtol=0, atol=1e-5)


def test_fedclip_clients_of_a_trial_share_the_ticks(data, monkeypatch):
    """A FedCLIP round's clients fit in threads of their own: their IP steps are answered in the
    same ticks (one batched step for all of them), and the result is still the numpy path's."""
    seen: list[int] = []
    real = accel_continual._Driver.answer

    def spy(self, reqs):
        seen.append(max(sum(r.trial == t for r in reqs if r.kind == "ip") for t in {r.trial for r in reqs}))
        return real(self, reqs)

    monkeypatch.setattr(accel_continual._Driver, "answer", spy)
    cfg = _configs("fedclip-naive")[0]
    got = fit_batch("fedclip-naive", [cfg], [SEEDS[0]], data, TORCH)[0]
    assert max(seen) == len(data.train) > 1  # every client of the trial in one tick
    want = fit("fedclip-naive", cfg, SEEDS[0], data, SETTINGS)
    assert got.communication == want.communication
    np.testing.assert_allclose(got.context_gain, want.context_gain, rtol=0, atol=1e-5)


@pytest.mark.parametrize("method", ["clip-replay", "fedclip-joint"])
def test_context_matrices_batch_the_models_and_equal_context_matrix(data, batched, method):
    """accel.trials.context_matrices over both trials' models after each context at once against
    scoring.context_matrix model by model: the same step totals per context (the same windows),
    correct counts within 2 steps (a near-tie flipped by float32 rounding)."""
    from esnfed_core.accel.scores import context_matrices
    from esnfed_core.scoring import context_matrix

    users = list(data.validation.values())
    models = [(m.context_reservoirs(), list(m.context_readout)) for m in batched[method]]
    got = context_matrices(models, users, "torch-cpu")
    assert len(got) == len(models)
    for (correct, total), (res, readouts) in zip(got, models):
        want_correct, want_total = context_matrix(res, readouts, users, 4)
        assert correct.shape == want_correct.shape == (data.n_contexts, data.n_contexts)
        np.testing.assert_array_equal(total, want_total)
        assert np.abs(correct - want_correct).max() <= 2
        assert correct.sum() > 0
    with pytest.raises(ValueError, match="every model needs"):
        context_matrices([models[0], (models[1][0][:1], models[1][1][:1])], users, "torch-cpu")


def test_activation_densities_batch_the_models_and_equal_the_numpy_densities(data, batched):
    """accel.scores.activation_densities over two continual models' reservoirs after each context
    and one final reservoir alone, against scoring.activation_densities of each: the same shapes
    and NaN (a user without windows of a context), each density the same distribution within an
    L1 distance of 0.01 (a float32 state within rounding of a bin edge may fall in the next bin;
    a wrong bin or model moves whole distributions: L1 up to 2)."""
    from esnfed_core.accel.scores import activation_densities
    from esnfed_core.scoring import activation_densities as numpy_densities

    users = list(data.validation.values())
    users.append(users[0].of_context(0))  # a user with windows of one context only
    models = [m.context_reservoirs() for m in batched["fedclip-replay"]] + [[batched["clip-naive"][0].reservoir]]
    got = activation_densities(models, users, data.n_contexts, 40, "torch-cpu")
    assert len(got) == len(models)
    for g, res in zip(got, models):
        w = numpy_densities(res, users, data.n_contexts, 40, 4)
        np.testing.assert_array_equal(g.edges, w.edges)
        for a, b in ((g.per_user, w.per_user), (g.pooled, w.pooled)):
            assert a.shape == b.shape and np.array_equal(np.isnan(a), np.isnan(b))
            assert np.isnan(a).any() or a is g.pooled
            assert np.nanmax(np.abs(a - b) @ np.diff(w.edges)) <= 0.01
        # every user and context together, as the numpy path (the values per unit exactly; their
        # KL to a target within the bin-edge rounding above, tests/test_retrain_assess.py KL_RTOL)
        assert [t.n_values for t in g.totals] == [t.n_values for t in w.totals] != [0] * len(res)
        np.testing.assert_allclose(g.target_kl(0.0, 0.3), w.target_kl(0.0, 0.3), rtol=1e-3)


@pytest.mark.parametrize("pool", ["context", "roster"])
@pytest.mark.parametrize("method", ["fedclip-naive", "fedclip-replay"])
def test_sampled_fedclip_rounds_on_torch_equal_the_numpy_path(data, method, pool):
    """federated.client_fraction < 1: the trial threads run the numpy server, which samples each
    round's clients (among the participants, or over the roster: federated.sampling_pool); the
    torch engine fits only those. Same messages, gains within 1e-5 as above."""
    steps = _validation_steps(data)
    sampled = {"client_fraction": 0.67, "sampling_pool": pool}  # two of the three clients per IP round
    got = fit_batch(method, _configs(method), SEEDS, data, dataclasses.replace(TORCH, **sampled))
    for cfg, seed, g in zip(_configs(method), SEEDS, got):
        want = fit(method, cfg, seed, data, dataclasses.replace(SETTINGS, **sampled))
        assert g.communication == want.communication and want.communication["client_fraction"] == 0.67
        assert want.communication.get("sampling_pool", "context") == pool
        np.testing.assert_allclose(g.context_gain, want.context_gain, rtol=0, atol=1e-5)
        np.testing.assert_allclose(g.context_bias, want.context_bias, rtol=0, atol=1e-5)
        np.testing.assert_allclose(g.validation["stream_accuracy"], want.validation["stream_accuracy"],
                                   rtol=0, atol=2 / steps)
        full = fit(method, cfg, seed, data, SETTINGS)
        # sampling changed the model: by far more than the 1e-5 rounding tolerance above
        assert np.abs(full.context_gain - want.context_gain).max() > 1e-4
