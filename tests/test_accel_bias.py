"""The readout bias (params.yaml readout.bias) on the torch kernels (runner.device torch-cpu,
esnfed_core.accel): the augmented statistics and the scores with a bias column against the numpy
core, and the batched stationary and continual trials against the numpy path with the bias.

Tolerances are those of tests/test_accel.py and tests/test_accel_continual.py (their module
docstrings): states within a few float32 ulps, statistics within 1e-5 relative, a readout within
cond(B + λP)·(that relative error), P = diag(1, …, 1, 0) the bias-free penalty, and an accuracy
within 2 steps (an argmax flips where two class scores tie within float32 rounding). The entries
of the constant column that are counts (steps, class counts) are integers below 2⁵³: exact.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch  # in the [test] extra: a missing torch is an error, not a skip

from esnfed_core.accel import torch_reservoir as tr
from esnfed_core.accel.trials import fit_batch
from esnfed_core.method import Method
from esnfed_core.readout import evaluate, ridge_stats, solve
from esnfed_core.settings import Settings
from experiment_data import trial_data
from test_accel import REL, _data, _rel, _reservoirs, check_fit_batch_equals_fit
from test_accel_continual import SEEDS, _assert_batch_equals_numpy
from test_accel_continual import _configs as _continual_configs

SETTINGS = Settings(ip={"mu": 0.0, "eta": 0.01, "batch_size": 4, "normalize_step": True},
                    continual={"replay_fraction": 0.3, "replay_batch": 2}, readout_bias=True)
TORCH = dataclasses.replace(SETTINGS, device="torch-cpu")


@pytest.fixture(scope="module")
def data():
    return trial_data(seed=1, pct="75")[0]


def _penalty(n: int) -> np.ndarray:
    p = np.eye(n)
    p[-1, -1] = 0.0
    return p


def test_torch_statistics_with_bias_are_the_numpy_augmented_statistics():
    res = _reservoirs()
    x, y = _data(windows=12, steps=40)
    bank = tr.Bank.from_reservoirs(res, "cpu")
    u, lab = torch.from_numpy(x)[None], torch.from_numpy(y)[None]
    a, b = (t.numpy() for t in tr.ridge_stats(bank, u, lab, 3, bias=True))
    a0, b0 = (t.numpy() for t in tr.ridge_stats(bank, u, lab, 3))
    n = res[0].units
    assert a.shape == (3, 3, n + 1) and b.shape == (3, n + 1, n + 1)
    # the state block: the same float32 products into the same float64 sums, the same bits
    assert np.array_equal(a[:, :, :n], a0) and np.array_equal(b[:, :n, :n], b0)
    for i, r in enumerate(res):
        ref = ridge_stats(r, x, y, 3, bias=True)
        assert _rel(a[i], ref.a) < REL and _rel(b[i], ref.b) < REL
        assert b[i, n, n] == x.shape[0] * x.shape[1] and np.array_equal(a[i, :, n], ref.a[:, n])
        got = solve(dataclasses.replace(ref, a=a[i], b=b[i]), [1e-5, 1e-2, 1.0])
        for lam, g, w in zip([1e-5, 1e-2, 1.0], got, solve(ref, [1e-5, 1e-2, 1.0])):
            cond = np.linalg.cond(ref.b + lam * _penalty(n + 1))
            assert _rel(g, w) <= 2 * cond * REL, (lam, _rel(g, w), cond)


def test_torch_counts_add_the_bias_column():
    res = _reservoirs()
    x, y = _data()
    bank = tr.Bank.from_reservoirs(res, "cpu")
    grids = np.stack([solve(ridge_stats(r, x, y, 3, bias=True), [1e-4, 1.0]) for r in res])  # (R, L, C, N+1)
    assert np.abs(grids[..., -1]).max() > 1e-3
    got = tr.count_correct(bank, torch.from_numpy(x)[None], torch.from_numpy(y)[None], torch.from_numpy(grids))
    without = tr.count_correct(bank, torch.from_numpy(x)[None], torch.from_numpy(y)[None],
                               torch.from_numpy(np.ascontiguousarray(grids[..., :-1])))
    for i, r in enumerate(res):
        want = evaluate(r, x, y, grids[i]).correct
        assert np.all(np.abs(got[i].numpy() - want) <= max(1, y.size // 1000))
    assert not np.array_equal(got.numpy(), without.numpy())  # the bias column changes answers
    with pytest.raises(ValueError, match=r"readouts: expected \(R, L, C, 24\) or \(R, L, C, 25\)"):
        tr.count_correct(bank, torch.from_numpy(x)[None], torch.from_numpy(y)[None],
                         torch.zeros((3, 1, 3, 26), dtype=torch.float64))


@pytest.mark.parametrize("algo", ["ridge", "incfed", "fedavg", "ip", "fedip"])
def test_stationary_batched_trials_with_bias_equal_the_numpy_path(data, algo):
    for got, want in check_fit_batch_equals_fit(algo, data, SETTINGS):  # tests/test_accel.py's check
        assert got.readout.shape == want.readout.shape == (data.n_classes, got.reservoir.units + 1)


@pytest.mark.parametrize("method", [f"{a}-{s}" for a in ("clip", "fedclip") for s in ("naive", "replay", "joint")])
def test_continual_batched_trials_with_bias_equal_the_numpy_path(data, method):
    batch = fit_batch(method, _continual_configs(method), SEEDS, data, TORCH)
    # tests/test_accel_continual.py's check: gains, stream accuracies, readouts within the bound
    # of the augmented statistics' condition number
    for got, want in zip(batch, _assert_batch_equals_numpy(data, method, batch, SETTINGS)):
        assert got.context_readout.shape == want.context_readout.shape == \
            (data.n_contexts, data.n_classes, got.reservoir.units + 1)
        if want.communication is not None:
            assert want.communication["readout_bias"] is True


def test_the_torch_devices_take_the_bias_and_key_it():
    s = Settings(device="torch-cpu", readout_bias=True)
    for m in ("incfed", "fedclip-naive"):
        used = s.used_by(Method.parse(m), True)
        assert used["device"] == "torch-cpu" and used["readout_bias"] is True
    assert "readout_bias" not in Settings(device="torch-cpu").used_by(Method.parse("incfed"), True)


# ---------------------------------------------------------------- GPU (run where one is present)
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_augmented_statistics_and_counts_equal_the_cpu_kernels():
    """As tests/test_accel.py's CUDA check, with the bias: the same statistics within REL and
    the same correct counts within ties (the bias column's sums and counts are float64 or exact)."""
    tr.set_tf32(False)
    res = _reservoirs()
    x, y = _data(windows=64, steps=50)
    grids = torch.from_numpy(np.stack([solve(ridge_stats(r, x, y, 3, bias=True), [1e-3]) for r in res]))
    out = []
    for dev in ("cpu", "cuda"):
        bank = tr.Bank.from_reservoirs(res, dev)
        u, lab = torch.from_numpy(x)[None].to(dev), torch.from_numpy(y)[None].to(dev)
        stats = [t.cpu().numpy() for t in tr.ridge_stats(bank, u, lab, 3, bias=True)]
        out.append((stats, tr.count_correct(bank, u, lab, grids.to(dev)).cpu().numpy()))
    for g, w in zip(out[1][0], out[0][0]):
        assert _rel(g, w) < REL
    assert np.all(np.abs(out[1][1] - out[0][1]) <= max(1, y.size // 1000))
