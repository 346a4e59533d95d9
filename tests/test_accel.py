"""The accelerator path (esnfed_core.accel) on torch's CPU build: kernels against the numpy core,
batched against single runs, trials through fit_batch against fit, and select on torch-cpu.

Tolerances. Both paths compute in float32 and differ only in the order of roundings (BLAS kernels,
lerp vs three passes for the leak, float32 partial sums over chunks): each state differs by a few
float32 ulps (|x| ≤ 1, so ≲ 1e-6 absolute), and the contracting recurrence (ρ < 1, leak) does not
grow it. Sums of products of such states (ridge statistics, IP gradient sums) then agree to about
the same relative size; 1e-5 relative leaves a 10x margin. A readout solved from the statistics
amplifies their relative error by at most cond(B + λI), which the readout test computes.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

import torch  # noqa: E402  (in the [test] extra: a missing torch is an error, not a skip)

from esnfed_core.accel import torch_device  # noqa: E402
from esnfed_core.accel import torch_plasticity as tp  # noqa: E402
from esnfed_core.accel import torch_reservoir as tr  # noqa: E402
from esnfed_core.accel.trials import fit_batch  # noqa: E402
from esnfed_core.errors import ConfigError  # noqa: E402
from esnfed_core.method import Method  # noqa: E402
from esnfed_core.plasticity import IPConfig, ip_gradients, ip_step  # noqa: E402
from esnfed_core.readout import ridge_stats, solve  # noqa: E402
from esnfed_core.reservoir import ReservoirConfig, build_reservoir, run_batch  # noqa: E402
from esnfed_core.settings import Settings  # noqa: E402
from esnfed_core.trial import fit  # noqa: E402
from esnfed_stages.experiment import select as select_stage  # noqa: E402
from esnfed_stages.params.experiment import RunnerConfig, experiment_params  # noqa: E402
from esnfed_stages.layout import best_path, select_dir  # noqa: E402
from esnfed_stages.experiment.runner import TrialTask, batches, fit_trial  # noqa: E402
from experiment_data import make_dataset, small_params, trial_data  # noqa: E402

STATE_ATOL = 2e-6
REL = 1e-5
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def _reservoirs(n=24, u=5, count=3, ip=True):
    rng = np.random.default_rng(7)
    out = [build_reservoir(ReservoirConfig(u, n, 0.9 - 0.1 * i, 0.2 + 0.25 * i, 1.0), i) for i in range(count)]
    if ip:  # the IP-adapted path (gain, bias) on all but the first
        out[1:] = [r.with_ip(rng.uniform(0.5, 1.5, n), rng.uniform(-0.3, 0.3, n)) for r in out[1:]]
    return out


def _data(windows=9, steps=30, u=5, classes=3, seed=3):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((windows, steps, u)).astype(np.float32),
            rng.integers(0, classes, (windows, steps)))


def _rel(a, b):
    return float(np.max(np.abs(np.asarray(a) - np.asarray(b))) / np.max(np.abs(b)))


def test_cuda_without_a_gpu_is_one_config_error(tmp_path, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    make_dataset(tmp_path)
    with pytest.raises(ConfigError, match="runner.device: cuda, but torch .* sees no CUDA GPU"):
        select_stage.run("wesad", Method("ridge"), ["25"], experiment_params(small_params()),
                         data_dir=tmp_path / "data", runs_dir=tmp_path / "runs",
                         runner=RunnerConfig("sequential", 1, 1, "cuda"))
    assert not list((tmp_path / "runs").rglob("trial-*.json"))  # no partial outputs


def test_device_names():
    assert torch_device("torch-cpu") == "cpu" and torch_device("cuda") == "cuda"
    with pytest.raises(ValueError, match="numpy path"):
        torch_device("cpu")
    with pytest.raises(ConfigError, match="runner.device"):
        Settings(device="gpu")
    with pytest.raises(ConfigError, match="runner.device"):
        RunnerConfig(device="tpu")


def test_tf32_is_opt_in_and_part_of_the_key_on_cuda_only():
    exp = experiment_params(small_params(device="cuda", tf32=True))
    assert exp.settings.tf32 and exp.settings.device == "cuda"
    assert exp.settings.used_by(Method("fedip"), True)["tf32"] is True
    assert "tf32" not in exp.on_device("torch-cpu").settings.used_by(Method("fedip"), True)
    assert not experiment_params(small_params()).settings.tf32  # default off
    with pytest.raises(ConfigError, match="runner.tf32"):
        experiment_params(small_params(tf32="yes"))


def test_tf32_flags_are_restored_both_as_they_were(data):
    """fit_batch and fit_continual_batch switch TF32 for their call only: afterwards matmul's and
    cuDNN's flags are what they were (torch's defaults: matmul off, cuDNN on), also after a
    failure. The flags are torch's global context, the same on the CPU build."""
    mm, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = mm.allow_tf32, cudnn.allow_tf32
    try:
        for before in ((False, True), (True, False)):
            mm.allow_tf32, cudnn.allow_tf32 = before
            with tr.tf32(True):
                assert (mm.allow_tf32, cudnn.allow_tf32) == (True, True)
            assert (mm.allow_tf32, cudnn.allow_tf32) == before
            with pytest.raises(RuntimeError, match="boom"), tr.tf32(False):
                assert (mm.allow_tf32, cudnn.allow_tf32) == (False, False)
                raise RuntimeError("boom")
            assert (mm.allow_tf32, cudnn.allow_tf32) == before
            fit_batch("ridge", [BASE[0]], [1], data, dataclasses.replace(TORCH, tf32=True))
            assert (mm.allow_tf32, cudnn.allow_tf32) == before
            fit_batch("clip-naive", [{**BASE[0], "sigma": 0.3, "budget": 1}], [1], data, TORCH)
            assert (mm.allow_tf32, cudnn.allow_tf32) == before
    finally:
        mm.allow_tf32, cudnn.allow_tf32 = saved


@pytest.mark.parametrize("mu", [0.0, 0.1])
def test_kernels_keep_every_tensor_on_the_banks_device(mu):
    """The kernels on torch's ``meta`` device (shapes only, no data): a tensor made without
    ``device=`` would be a CPU tensor, and elementwise ops refuse to mix it with meta ones, as
    CUDA ones do; every output is on the bank's device with the promised dtype. What cuda runs
    without a GPU here."""
    dev = torch.device("meta")
    res = _reservoirs(n=12)
    bank = tr.Bank.from_reservoirs(res, dev)
    assert all(t.device == dev for t in (bank.w_in_t, bank.w_t, bank.leak, bank.gain, bank.bias))
    u = torch.empty((1, 4, 40, 5), device=dev)
    labels = torch.empty((1, 4, 40), dtype=torch.int8, device=dev)
    chunks = list(tr.iter_chunks(bank, u, steps=7))
    assert len(chunks) == 6 and all(t.device == dev for c in chunks for t in (c.states, c.net, c.h))
    a, b = tr.ridge_stats(bank, u, labels, 3)
    assert (a.device, a.dtype, a.shape, b.device, b.dtype) == (dev, torch.float64, (3, 3, 12), dev, torch.float64)
    correct = tr.count_correct(bank, u, labels, torch.empty((3, 2, 3, 12), dtype=torch.float64, device=dev))
    assert (correct.device, correct.dtype, correct.shape) == (dev, torch.int64, (3, 2))
    u3 = torch.empty((3, 4, 40, 5), device=dev)
    mask = torch.empty((3, 4), device=dev)
    for m in (None, mask):
        out = tp.ip_step(bank.select([0, 2, 2]), u3, m, torch.empty(3, dtype=torch.float64, device=dev),
                         torch.empty(3, dtype=torch.float64, device=dev), mu=mu, eta=0.01, normalize_step=True,
                         active=torch.empty(3, dtype=torch.bool, device=dev))
        assert all((t.device, t.dtype) == (dev, torch.float32) for t in (out.gain, out.bias, out.w_t))
    from esnfed_core.accel.passes import counts_of, window_batch

    x = torch.empty((6, 40, 5), device=dev)
    y = torch.empty((6, 40), dtype=torch.int8, device=dev)
    assert counts_of(bank, x, y, torch.empty((3, 1, 3, 12), device=dev)).device == dev
    assert window_batch(3, 12, 6) == 6


def test_states_equal_run_batch_for_every_reservoir_of_a_bank():
    res = _reservoirs()
    x, _ = _data()
    bank = tr.Bank.from_reservoirs(res, "cpu")
    got = tr.states(bank, torch.from_numpy(x)[None]).numpy()  # (R, T, B, N)
    for i, r in enumerate(res):
        np.testing.assert_allclose(got[i], run_batch(r, x), rtol=0, atol=STATE_ATOL)


def test_chunking_and_per_reservoir_inputs_do_not_change_the_states():
    res = _reservoirs()
    x, _ = _data()
    bank = tr.Bank.from_reservoirs(res, "cpu")
    u = torch.from_numpy(x)[None]
    one = torch.cat([c.states.clone() for c in tr.iter_chunks(bank, u, steps=30)], dim=1)
    # Other chunk shapes round the input projection differently (a few ulps): same bound as
    # against numpy, not bit identity.
    for k in (1, 7):  # a short last chunk, and one step per chunk
        chunked = torch.cat([c.states.clone() for c in tr.iter_chunks(bank, u, steps=k)], dim=1)
        np.testing.assert_allclose(chunked.numpy(), one.numpy(), rtol=0, atol=STATE_ATOL)
    per = tr.states(bank, u.expand(3, -1, -1, -1).contiguous())  # R' = R: each its own copy
    np.testing.assert_allclose(per.numpy(), one.numpy(), rtol=0, atol=STATE_ATOL)


def test_batched_reservoirs_equal_single_runs():
    res = _reservoirs(count=4)
    x, y = _data()
    u, lab = torch.from_numpy(x)[None], torch.from_numpy(y)[None]
    bank = tr.Bank.from_reservoirs(res, "cpu")
    a_all, b_all = tr.ridge_stats(bank, u, lab, 3)
    s_all = tr.states(bank, u)
    for i, r in enumerate(res):
        single = tr.Bank.from_reservoirs([r], "cpu")
        np.testing.assert_allclose(s_all[i].numpy(), tr.states(single, u)[0].numpy(), rtol=0, atol=STATE_ATOL)
        a, b = tr.ridge_stats(single, u, lab, 3)
        assert _rel(a_all[i].numpy(), a[0].numpy()) < REL and _rel(b_all[i].numpy(), b[0].numpy()) < REL


def test_ridge_stats_and_readouts_match_the_float64_numpy_path():
    """Statistics: float32 products summed in float32 within a chunk, float64 across chunks."""
    res = _reservoirs()
    x, y = _data(windows=12, steps=40)
    bank = tr.Bank.from_reservoirs(res, "cpu")
    a, b = tr.ridge_stats(bank, torch.from_numpy(x)[None], torch.from_numpy(y)[None], 3)
    lambdas = [1e-5, 1e-2, 1.0]
    for i, r in enumerate(res):
        ref = ridge_stats(r, x, y, 3)
        assert _rel(a[i].numpy(), ref.a) < REL and _rel(b[i].numpy(), ref.b) < REL
        np.testing.assert_array_equal(b[i].numpy(), b[i].numpy().T)
        got = solve(dataclasses.replace(ref, a=a[i].numpy(), b=b[i].numpy()), lambdas)
        want = solve(ref, lambdas)
        for lam, g, w in zip(lambdas, got, want):
            # A perturbation ε (relative) of A and B moves the solution by ≲ 2·cond·ε (relative).
            cond = np.linalg.cond(ref.b + lam * np.eye(ref.units))
            assert _rel(g, w) <= 2 * cond * REL, (lam, _rel(g, w), cond)


def test_correct_counts_match_numpy_predictions():
    res = _reservoirs()
    x, y = _data()
    bank = tr.Bank.from_reservoirs(res, "cpu")
    grids = np.stack([solve(ridge_stats(r, x, y, 3), [1e-4, 1.0]) for r in res])  # (R, L, C, N)
    got = tr.count_correct(bank, torch.from_numpy(x)[None], torch.from_numpy(y)[None], torch.from_numpy(grids))
    from esnfed_core.readout import evaluate

    for i, r in enumerate(res):
        want = evaluate(r, x, y, grids[i]).correct
        # An argmax can flip where two class scores tie within float32 rounding: allow 1 in 1000.
        assert np.all(np.abs(got[i].numpy() - want) <= max(1, y.size // 1000))


@pytest.mark.parametrize("mu", [0.0, 0.1])
def test_ip_gradients_match_numpy(mu):
    res = _reservoirs()
    x, _ = _data(windows=6, steps=40)
    bank = tr.Bank.from_reservoirs(res, "cpu")
    sigma = torch.tensor([0.2, 0.5, 0.9])
    dg, db = tp.ip_gradients(bank, torch.from_numpy(x)[None], None, torch.tensor([6.0] * 3), sigma, mu)
    for i, r in enumerate(res):
        g, b = ip_gradients(r, x, IPConfig(sigma=float(sigma[i]), mu=mu))
        assert _rel(dg[i].numpy(), g) < REL and _rel(db[i].numpy(), b) < REL


@pytest.mark.parametrize("mu", [0.0, 0.1])
def test_padded_windows_are_masked_out_of_an_ip_step(mu):
    """Reservoirs with fewer windows (a short last mini-batch) are padded and masked."""
    res = _reservoirs()
    x, _ = _data(windows=6, steps=20)
    sizes = [6, 4, 1]
    u = torch.from_numpy(np.stack([x] * 3))  # (R, B, T, U): each reservoir its own batch
    mask = torch.tensor([[1.0 if w < n else 0.0 for w in range(6)] for n in sizes])
    bank = tr.Bank.from_reservoirs(res, "cpu")
    out = tp.ip_step(bank, u, mask, torch.tensor(sizes, dtype=torch.float64), torch.tensor([0.3, 0.6, 0.9]),
                     mu=mu, eta=0.05, normalize_step=True,
                     active=torch.tensor([True, True, False]))
    for i, (r, n) in enumerate(zip(res, sizes)):
        if i == 2:  # inactive: unchanged
            np.testing.assert_array_equal(out.gain[i].numpy(), r.gain)
            continue
        want = ip_step(r, x[:n], IPConfig(sigma=[0.3, 0.6][i], mu=mu, eta=0.05))
        np.testing.assert_allclose(out.gain[i].numpy(), want.gain, rtol=0, atol=1e-6)
        np.testing.assert_allclose(out.bias[i].numpy(), want.bias, rtol=0, atol=1e-6)


# ---------------------------------------------------------------- trials
SETTINGS = Settings(ip={"mu": 0.0, "eta": 0.01, "batch_size": 4, "normalize_step": True})
TORCH = dataclasses.replace(SETTINGS, device="torch-cpu")
BASE = [{"units": 16, "spectral_radius": 0.9, "leak": 0.5, "input_scaling": 0.8},
        {"units": 16, "spectral_radius": 0.6, "leak": 0.3, "input_scaling": 1.0}]
EXTRA = {"ip": [{"sigma": 0.3, "rounds": 2}, {"sigma": 0.7, "rounds": 3}],
         "fedip": [{"sigma": 0.3, "rounds": 2, "local_epochs": 2}, {"sigma": 0.7, "rounds": 1, "local_epochs": 1}]}


@pytest.fixture(scope="module")
def data():
    return trial_data(seed=1, pct="75")[0]


def _configs(algo):
    return [{**b, **e} for b, e in zip(BASE, EXTRA.get(algo, [{}, {}]))]


def _same_lambda_up_to_near_ties(got, want, data) -> bool:
    """Check ``got``'s validation accuracies per λ against ``want``'s (within 2 steps: an argmax
    flips where two class scores tie within rounding) and its λ: the first best of its own
    accuracies, and ``want``'s λ unless ``want``'s best accuracies lie within those 2 steps of
    each other (they tie often: counts are integers), a near-tie that rounding on another CPU may
    break either way; then one of those. True when the two λ are the same."""
    lambdas = list(SETTINGS.lambdas)
    steps = sum(u.y.size for u in data.validation.values())
    acc = want.validation["per_lambda"]
    np.testing.assert_allclose(got.validation["per_lambda"], acc, atol=2 / steps)
    assert got.lam == lambdas[int(np.argmax(got.validation["per_lambda"]))]
    near = [lam for lam, a in zip(lambdas, acc) if a >= max(acc) - 2 / steps]
    assert got.lam in near and (len(near) > 1 or got.lam == want.lam)
    return got.lam == want.lam


@pytest.mark.parametrize("algo", ["ridge", "incfed", "fedavg", "ip", "fedip"])
def test_fit_batch_equals_fit_on_every_trial(data, algo):
    """Two trials batched (different σ, rounds, local epochs) against fit on the numpy path:
    same λ, validation accuracies, communication; IP gains and readouts within rounding."""
    check_fit_batch_equals_fit(algo, data, SETTINGS)


def check_fit_batch_equals_fit(algo: str, data, settings: Settings) -> list:
    """fit_batch of two trials on torch-cpu against fit on numpy with ``settings`` (see
    test_fit_batch_equals_fit_on_every_trial); returns the (batched, numpy) model pairs."""
    cfgs = _configs(algo)
    got = fit_batch(algo, cfgs, [3, 4], data, dataclasses.replace(settings, device="torch-cpu"))
    pairs = []
    for cfg, seed, g in zip(cfgs, [3, 4], got):
        want = fit(algo, cfg, seed, data, settings)
        if not _same_lambda_up_to_near_ties(g, want, data):  # the numpy trial at the accelerated λ
            want = fit(algo, {**cfg, "lambda": g.lam}, seed, data, settings, score=False)
        pairs.append((g, want))
        assert g.config == want.config and g.communication == want.communication
        np.testing.assert_allclose(g.reservoir.gain, want.reservoir.gain, rtol=0, atol=1e-5)
        np.testing.assert_allclose(g.reservoir.bias, want.reservoir.bias, rtol=0, atol=1e-5)
        assert _rel(g.readout, want.readout) < 1e-3
    return pairs


# Sparse reservoirs (docs/protocol.md §2): the numpy core draws them into dense matrices with zeros,
# which the same kernels run: their states and trials agree with numpy within the same bounds.
# The trials' connectivities keep the readout as well conditioned as the dense tests' (at 1 % of
# 16 units, 3 connections, most units are driven by the inputs alone: near-collinear states let
# the readout's condition number amplify float32 state rounding to 1-2 %, measured); the states
# test covers that extreme too, where the kernels owe the same STATE_ATOL.
SPARSE = [{"input_connectivity": 20, "recurrent_connectivity": 10},
          {"input_connectivity": 50, "recurrent_connectivity": 25}]


def test_states_of_sparse_reservoirs_equal_run_batch():
    res = [build_reservoir(ReservoirConfig(5, 24, 0.9, 0.5, 1.0, **sp), i)
           for i, sp in enumerate(SPARSE + [{"input_connectivity": 50, "recurrent_connectivity": 1}])]
    assert all(np.count_nonzero(r.w) < r.w.size for r in res)
    x, _ = _data()
    got = tr.states(tr.Bank.from_reservoirs(res, "cpu"), torch.from_numpy(x)[None]).numpy()
    for i, r in enumerate(res):
        np.testing.assert_allclose(got[i], run_batch(r, x), rtol=0, atol=STATE_ATOL)


@pytest.mark.parametrize("algo", ["ridge", "fedavg", "fedip"])
def test_fit_batch_equals_fit_on_sparse_reservoirs(data, algo):
    """As test_fit_batch_equals_fit_on_every_trial, with each trial's reservoir sparse."""
    cfgs = [{**c, **sp} for c, sp in zip(_configs(algo), SPARSE)]
    got = fit_batch(algo, cfgs, [3, 4], data, TORCH)
    for cfg, seed, g in zip(cfgs, [3, 4], got):
        want = fit(algo, cfg, seed, data, SETTINGS)
        assert np.count_nonzero(g.reservoir.w) == np.count_nonzero(want.reservoir.w) < g.reservoir.w.size
        if not _same_lambda_up_to_near_ties(g, want, data):
            want = fit(algo, {**cfg, "lambda": g.lam}, seed, data, SETTINGS, score=False)
        assert g.config == want.config and g.communication == want.communication
        np.testing.assert_allclose(g.reservoir.gain, want.reservoir.gain, rtol=0, atol=1e-5)
        assert _rel(g.readout, want.readout) < 1e-3


@pytest.mark.parametrize("algo", ["ip", "fedip"])
def test_a_batch_of_trials_equals_each_trial_alone(data, algo):
    cfgs = _configs(algo)
    both = fit_batch(algo, cfgs, [3, 4], data, TORCH)
    for cfg, seed, b in zip(cfgs, [3, 4], both):
        alone = fit_batch(algo, [cfg], [seed], data, TORCH)[0]
        np.testing.assert_allclose(b.reservoir.gain, alone.reservoir.gain, rtol=0, atol=1e-6)
        if not _same_lambda_up_to_near_ties(b, alone, data):  # other bmm shapes, other roundings
            alone = fit_batch(algo, [{**cfg, "lambda": b.lam}], [seed], data, TORCH)[0]
        assert b.communication == alone.communication
        assert _rel(b.readout, alone.readout) < 1e-4


def test_fit_trial_on_torch_cpu_runs_the_batched_path_and_retrains_with_a_fixed_lambda(data):
    cfg = {**_configs("fedip")[0], "lambda": 1e-3}
    model = fit_trial("fedip", cfg, 5, data, TORCH, score=False)
    assert model.validation is None and model.lam == 1e-3
    want = fit("fedip", cfg, 5, data, SETTINGS, score=False)
    assert _rel(model.readout, want.readout) < 1e-3
    assert TORCH.used_by(Method("fedip"), False)["device"] == "torch-cpu"
    assert "device" not in SETTINGS.used_by(Method("fedip"), False)
    assert TORCH.used_by(Method("clip", "naive"), False)["device"] == "torch-cpu"  # batched too
    assert "device" not in TORCH.used_by(Method("random"), False)  # the random baseline: numpy
    with pytest.raises(ConfigError, match="fit is the numpy path"):  # the stages choose the path
        fit("fedip", cfg, 5, data, TORCH, score=False)


def test_fit_batch_refuses_mixed_sizes_and_the_random_baseline(data):
    with pytest.raises(ValueError, match="one reservoir size"):
        fit_batch("ridge", [BASE[0], {**BASE[1], "units": 8}], [1, 2], data, TORCH)
    with pytest.raises(ConfigError, match=r"^runner.device: torch-cpu does not run random "):
        fit_batch("random", [{}], [1], data, TORCH)


def test_runner_batches_by_data_method_and_size():
    ref, settings = object(), TORCH
    tasks = [TrialTask(f"t{i}", ref, "ridge", {**BASE[0], "units": u}, i, settings)
             for i, u in enumerate([16, 8, 16, 16, 8])]
    groups = batches(tasks, max_trials=2)
    assert [[t.label for t in g] for g in groups] == [["t0", "t2"], ["t3"], ["t1", "t4"]]


@pytest.mark.parametrize("algo", ["ridge", "fedip"])
def test_select_on_torch_cpu_picks_the_numpy_paths_best_config(tmp_path, algo):
    make_dataset(tmp_path)
    params = small_params()
    params["budgets"]["default"]["trials"] = 4
    kw = dict(data_dir=tmp_path / "data")
    cpu = select_stage.run("wesad", Method(algo), ["50"], experiment_params(params), runs_dir=tmp_path / "cpu", **kw)
    acc = select_stage.run("wesad", Method(algo), ["50"], experiment_params(params), runs_dir=tmp_path / "acc",
                           runner=RunnerConfig("sequential", 1, 1, "torch-cpu"), **kw)
    assert not cpu.failed and not acc.failed and acc.shares[0].ran == 4
    a = json.loads(best_path(tmp_path / "cpu", "wesad", algo, "50").read_text())
    b = json.loads(best_path(tmp_path / "acc", "wesad", algo, "50").read_text())
    # Each (trial, λ) accuracy within 2 steps of the numpy path's (test_fit_batch_equals_fit_on_
    # every_trial), so the accelerated best is within 2 steps of numpy's best, and is numpy's
    # best (trial, λ) unless another one scored within 4 steps of it on the numpy path (a near-tie
    # that rounding on another CPU may break either way; accuracies tie often, counts are integers).
    from esnfed_stages.experiment.trial_data import open_dataset

    ds = open_dataset(tmp_path / "data", "wesad")
    steps = sum(u.y.size for u in ds.load(ds.validation_users).values())
    assert abs(b["score"] - a["score"]) <= 2 / steps
    lambdas = list(experiment_params(params).settings.lambdas)
    records = [json.loads(p.read_text()) for p in select_dir(tmp_path / "cpu", "wesad", algo, "50").glob("trial-*.json")]
    near = {(r["index"], json.dumps({**r["config"], "lambda": lam}, sort_keys=True))
            for r in records for lam, acc in zip(lambdas, r["scores"]["per_lambda"]) if acc >= a["score"] - 4 / steps}
    assert (b["trial"], json.dumps(b["config"], sort_keys=True)) in near
    if len(near) == 1:
        assert (b["trial"], b["config"]) == (a["trial"], a["config"])
    again = select_stage.run("wesad", Method(algo), ["50"], experiment_params(params), runs_dir=tmp_path / "acc",
                             runner=RunnerConfig("sequential", 1, 1, "torch-cpu"), **kw)
    assert again.shares[0].resumed == 4 and again.shares[0].ran == 0  # resume by trial key
    cpu_keys = {p.name: json.loads(p.read_text())["key"] for p in select_dir(tmp_path / "cpu", "wesad", algo, "50").glob("trial-*")}
    acc_keys = {p.name: json.loads(p.read_text())["key"] for p in select_dir(tmp_path / "acc", "wesad", algo, "50").glob("trial-*")}
    assert cpu_keys.keys() == acc_keys.keys() and not set(cpu_keys.values()) & set(acc_keys.values())


# ---------------------------------------------------------------- GPU (run where one is present)
@cuda
def test_cuda_states_and_stats_equal_the_cpu_kernels():
    tr.set_tf32(False)
    res = _reservoirs()
    x, y = _data(windows=64, steps=50)
    out = []
    for dev in ("cpu", "cuda"):
        bank = tr.Bank.from_reservoirs(res, dev)
        u, lab = torch.from_numpy(x)[None].to(dev), torch.from_numpy(y)[None].to(dev)
        out.append((tr.states(bank, u).cpu().numpy(), [t.cpu().numpy() for t in tr.ridge_stats(bank, u, lab, 3)]))
    np.testing.assert_allclose(out[1][0], out[0][0], rtol=0, atol=STATE_ATOL)
    for g, w in zip(out[1][1], out[0][1]):
        assert _rel(g, w) < REL


@cuda
def test_cuda_fit_batch_equals_fit(data):
    check_cuda_fedip_equals_fit(data)


def check_cuda_fedip_equals_fit(data) -> None:
    """Two FedIP trials through fit_batch on cuda against fit on numpy: gains within 1e-5, the
    readouts within 1e-3 relative (at the same λ, see _same_lambda_up_to_near_ties)."""
    cfgs = _configs("fedip")
    got = fit_batch("fedip", cfgs, [3, 4], data, dataclasses.replace(SETTINGS, device="cuda"))
    for cfg, seed, g in zip(cfgs, [3, 4], got):
        want = fit("fedip", cfg, seed, data, SETTINGS)
        if not _same_lambda_up_to_near_ties(g, want, data):  # the numpy trial at the GPU's λ
            want = fit("fedip", {**cfg, "lambda": g.lam}, seed, data, SETTINGS, score=False)
        np.testing.assert_allclose(g.reservoir.gain, want.reservoir.gain, rtol=0, atol=1e-5)
        assert _rel(g.readout, want.readout) < 1e-3


def test_cli_select_retrain_assess_on_torch_cpu_agree_with_cpu(tmp_path):
    """The three stages with --device torch-cpu against the default cpu path on the same data:
    the same selected configs and seeds, test accuracies within float32 rounding."""
    from typer.testing import CliRunner

    from esnfed_cli.main import app
    from experiment_data import write_params

    make_dataset(tmp_path)
    params = small_params()
    params["budgets"]["default"].update(trials=3, retrains=2)
    write_params(tmp_path, params)
    runner = CliRunner()
    docs = {}
    for device in ("cpu", "torch-cpu"):
        common = ["--dataset", "wesad", "--params", str(tmp_path / "params.yaml"), "--data-dir",
                  str(tmp_path / "data"), "--runs-dir", str(tmp_path / device)]
        for algo in ("ridge", "fedip"):
            for stage, extra in (("select", ["--pct", "50"]), ("retrain", ["--pct", "50"]), ("assess", [])):
                if stage == "assess":
                    # assess scores every share: retrain the others too (cheap, tiny data)
                    for pct in ("25", "75", "100"):
                        for s in ("select", "retrain"):
                            r = runner.invoke(app, [s, "--algo", algo, "--pct", pct, "--device", device, *common])
                            assert r.exit_code == 0, r.output
                r = runner.invoke(app, [stage, "--algo", algo, "--device", device, *extra, *common])
                assert r.exit_code == 0, r.output
            docs[device, algo] = json.loads((tmp_path / device / "assess" / "wesad" / f"{algo}.json").read_text())
    for algo in ("ridge", "fedip"):
        a, b = docs["cpu", algo], docs["torch-cpu", algo]
        for pct in a["pcts"]:
            ra, rb = a["pcts"][pct], b["pcts"][pct]
            assert ra["seeds"] == rb["seeds"] and ra["config"] == rb["config"]
            assert ra["communication"] == rb["communication"]
            np.testing.assert_allclose(rb["test_accuracy"], ra["test_accuracy"], atol=1e-3)


def test_fit_batch_samples_the_clients_of_fedip_rounds_as_the_numpy_path(data):
    """federated.client_fraction < 1 on torch-cpu: each round's slots are the clients the numpy
    path samples (same sets, same messages), so the gains agree within the rounding bound above."""
    fraction = 0.67  # two of the three clients per round: max(1, ⌊0.67·3⌋) = 2
    cfgs = [{**c, "rounds": 3} for c in _configs("fedip")]
    torch_sampled = dataclasses.replace(TORCH, client_fraction=fraction)
    got = fit_batch("fedip", cfgs, [3, 4], data, torch_sampled)
    for cfg, seed, g in zip(cfgs, [3, 4], got):
        want = fit("fedip", {**cfg, "lambda": g.lam}, seed, data,
                   dataclasses.replace(SETTINGS, client_fraction=fraction), score=False)
        assert g.communication == want.communication and g.communication["client_fraction"] == fraction
        np.testing.assert_allclose(g.reservoir.gain, want.reservoir.gain, rtol=0, atol=1e-5)
        np.testing.assert_allclose(g.reservoir.bias, want.reservoir.bias, rtol=0, atol=1e-5)
        full = fit("fedip", {**cfg, "lambda": g.lam}, seed, data, SETTINGS, score=False)
        assert np.abs(full.reservoir.gain - want.reservoir.gain).max() > 1e-3  # sampling changed the model
