"""The fused IP sums (torch_plasticity.ip_sums(..., fused=True): one torch.compile'd kernel per
chunk) against the eager passes they replace, on torch's CPU build (inductor's C++ backend).

Tolerance. Both compute the same float32 terms and sum each chunk's k·B of them in float32, in
different orders (torch's eager reduction against inductor's vectorised loop; the elementwise
part may also be contracted into FMAs differently). Any order of a float32 sum of n terms is
within (n − 1)·u·Σ|term| of the exact sum (u = 2⁻²⁴), and each term's four roundings add at
most 4u of its magnitude bound |h|(c + |h|(|μ| + |h|)) (an upper bound of |q|). So the two
chunk sums differ by at most 2(n + 4)·u·A, A the sum of those magnitudes, added exactly
enough in float64 across chunks; the finishing (Σq·net − b·Σq)/g then carries
(δΣq·net + |b|·δΣq)/g. The bound is computed per reservoir and unit from the states themselves
(``_bound``), not guessed: a wrong term, a lost mask or a dropped chunk is off by O(A).

Compile time: one graph serves every case here (μ and the mask are tensor inputs, shapes are
dynamic), compiled once per process; the tests' durations are in BENCHMARKS.md.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from torch._dynamo.utils import counters

from esnfed_core.accel import torch_plasticity as tp
from esnfed_core.accel import torch_reservoir as tr
from esnfed_core.reservoir import ReservoirConfig, build_reservoir

ROOT = Path(__file__).resolve().parents[1]
U32 = 2.0 ** -24
WINDOWS, STEPS, INPUTS, UNITS = 6, 23, 5, 16
CHUNK = 5  # steps per chunk: 23 = 4 × 5 + 3, so the last chunk is shorter
MASK = torch.tensor([[1.0] * 6, [1.0, 1, 1, 0, 0, 0], [1.0, 0, 0, 0, 0, 0]])  # 6, 3 and 1 real windows


def _bank(ip: bool = True, device: str = "cpu") -> tr.Bank:
    """Three reservoirs; with ``ip`` two of them IP-adapted (gains and biases away from 1 and 0)."""
    rng = np.random.default_rng(11)
    res = [build_reservoir(ReservoirConfig(INPUTS, UNITS, 0.9 - 0.1 * i, 0.3 + 0.2 * i, 1.0), i) for i in range(3)]
    if ip:
        res[1:] = [r.with_ip(rng.uniform(0.5, 1.5, UNITS), rng.uniform(-0.3, 0.3, UNITS)) for r in res[1:]]
    return tr.Bank.from_reservoirs(res, device)


def _inputs(r: int = 3, b: int = WINDOWS, t: int = STEPS, seed: int = 4) -> torch.Tensor:
    return torch.from_numpy(np.random.default_rng(seed).standard_normal((r, b, t, INPUTS)).astype(np.float32))


C = torch.tensor([1.18, 1.5, 2.62])  # 2σ² + 1 for σ = 0.3, 0.5, 0.9


@pytest.fixture()
def small_chunks(monkeypatch):
    """CPU chunks of CHUNK steps for these shapes (3 reservoirs × 6 windows × 16 units)."""
    monkeypatch.setattr(tr, "CPU_CHUNK_ELEMENTS", 3 * WINDOWS * UNITS * CHUNK)
    assert tr.chunk_steps(3, WINDOWS, UNITS, STEPS, "cpu") == CHUNK


def _bound(bank: tr.Bank, u: torch.Tensor, mask: torch.Tensor | None, mu: float) -> list[np.ndarray | None]:
    """Per (reservoir, unit): the bound on |fused − eager| of each of ip_sums' three results (module
    docstring), from the chunks' h and net in float64."""
    r, dev = bank.reservoirs, bank.device
    c = C.double().to(dev).view(r, 1, 1, 1)
    m = (torch.ones(r, 1, u.shape[1], 1, dtype=torch.float64, device=dev) if mask is None
         else mask.double().to(dev).view(r, 1, -1, 1))
    a_q = a_qn = a_net = 0.0
    n_max = 0
    for ch in tr.iter_chunks(bank, u):
        h, net = ch.h.double(), ch.net.double()
        aq = h.abs() * (c + h.abs() * (abs(mu) + h.abs())) * m
        a_q = a_q + aq.sum(dim=(1, 2))
        a_qn = a_qn + (aq * net.abs()).sum(dim=(1, 2))
        a_net = a_net + (net.abs() * m).sum(dim=(1, 2))
        n_max = max(n_max, h.shape[1] * h.shape[2])
    eps = 2 * (n_max + 4) * U32
    g, b = bank.gain.double().abs(), bank.bias.double().abs()
    return [(eps * a_q).cpu().numpy(), (eps * (a_qn + b * a_q) / g).cpu().numpy(),
            None if mu == 0 else (eps * a_net / g).cpu().numpy()]


@pytest.mark.parametrize("mask", [None, MASK], ids=["no mask", "mask"])
@pytest.mark.parametrize("mu", [0.0, 0.1])
def test_fused_sums_equal_the_eager_sums_within_float32_rounding(small_chunks, mu, mask):
    bank, u = _bank(), _inputs()
    eager = tp.ip_sums(bank, u, mask, C, mu, fused=False)
    fused = tp.ip_sums(bank, u, mask, C, mu, fused=True)
    assert (fused[2] is None) == (eager[2] is None) == (mu == 0)
    for got, want, bound in zip(fused, eager, _bound(bank, u, mask, mu)):
        if want is None:
            continue
        assert got.dtype == torch.float64 and got.shape == (3, UNITS)
        diff = (got - want).abs().numpy()
        assert np.all(diff <= bound), float(np.max(diff / bound))
        # the bound is tight enough to mean something: far below the sums' own size
        assert np.max(bound) < 1e-4 * float(want.abs().max())
    if mask is not None:  # the masked windows take no part: the reservoir with one window alone
        one = tp.ip_sums(bank.select([2]), u[2:, :1], None, C[2:], mu, fused=True)
        np.testing.assert_allclose(one[0].numpy(), fused[0][2:].numpy(), rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("mask", [None, MASK], ids=["no mask", "mask"])
def test_cuda_fused_sums_equal_the_eager_sums(monkeypatch, mask):
    """The same on the GPU (Triton's kernel against torch's CUDA reductions), chunks of 5 steps."""
    monkeypatch.setattr(tr, "CHUNK_ELEMENTS", 3 * WINDOWS * UNITS * CHUNK)
    bank, u = _bank(device="cuda"), _inputs().cuda()
    m, c = (None if mask is None else mask.cuda()), C.cuda()
    eager = tp.ip_sums(bank, u, m, c, 0.1, fused=False)
    fused = tp.ip_sums(bank, u, m, c, 0.1, fused=True)
    for got, want, bound in zip(fused, eager, _bound(bank, u, m, 0.1)):
        assert got.device == want.device == bank.device
        assert np.all((got - want).abs().cpu().numpy() <= bound)


def test_fused_sums_of_a_bank_without_ip(small_chunks):
    """gains 1 and biases 0 promised (``ip`` False): the sums are returned unfinished, as eager."""
    bank, u = _bank(ip=False), _inputs()
    assert not bank.ip
    eager = tp.ip_sums(bank, u, None, C, 0.1, fused=False)
    fused = tp.ip_sums(bank, u, None, C, 0.1, fused=True)
    for got, want, bound in zip(fused, eager, _bound(bank, u, None, 0.1)):
        assert np.all((got - want).abs().numpy() <= bound)


def test_a_shorter_last_chunk_and_other_sizes_reuse_the_compiled_graph(small_chunks):
    """Dynamic shapes: after the first call, chunks of 5 and 3 steps, other reservoir and window
    counts and another μ, σ and mask compile nothing new (a size of 1 would: dynamo specialises it)."""
    bank, u = _bank(), _inputs()
    tp.ip_sums(bank, u, None, C, 0.0, fused=True)  # compiles, unless an earlier test did
    before = counters["stats"]["unique_graphs"]
    tp.ip_sums(bank, u, MASK, C * 1.1, 0.2, fused=True)
    tp.ip_sums(bank.select([0, 1]), _inputs(2, 4, 17), None, C[:2], 0.0, fused=True)  # chunks of 5 and 2 steps
    assert counters["stats"]["unique_graphs"] == before


@pytest.mark.parametrize("mu", [0.0, 0.1])
def test_ip_step_fused_equals_eager(small_chunks, mu):
    """The SGD step on the fused sums: gains and biases within 1e-6 of the eager step's. They are
    float32 values below 2 (one ulp ≤ 1.2e-7; each side rounds once), and the normalised
    gradients differ by about the sums' relative error (≲ 1e-6, the bound above), times η = 0.05."""
    bank, u = _bank(), _inputs()
    n_win = MASK.sum(dim=1).double()
    sigma = torch.tensor([0.3, 0.5, 0.9], dtype=torch.float64)
    active = torch.tensor([True, True, False])
    kw = dict(mu=mu, eta=0.05, normalize_step=True, active=active)
    eager = tp.ip_step(bank, u, MASK, n_win, sigma, fused=False, **kw)
    fused = tp.ip_step(bank, u, MASK, n_win, sigma, fused=True, **kw)
    assert float((eager.gain[:2] - bank.gain[:2]).abs().min()) > 1e-5  # every unit moved, by more than the tolerance
    np.testing.assert_allclose(fused.gain.numpy(), eager.gain.numpy(), rtol=0, atol=1e-6)
    np.testing.assert_allclose(fused.bias.numpy(), eager.bias.numpy(), rtol=0, atol=1e-6)
    assert torch.equal(fused.gain[2], bank.gain[2]) and torch.equal(fused.bias[2], bank.bias[2])  # inactive


def spy_fused_calls(monkeypatch) -> list:
    """A list that gains one entry per call of the fused chunk sums from now on (the test's end
    undoes the spy)."""
    calls = []
    real = tp.fused_chunk_sums

    def spy():
        compiled = real()
        return lambda *a: calls.append(1) or compiled(*a)

    monkeypatch.setattr(tp, "fused_chunk_sums", spy)
    return calls


def test_fused_none_follows_the_module_constant(monkeypatch, small_chunks):
    calls = spy_fused_calls(monkeypatch)
    bank, u = _bank(), _inputs()
    assert tp.FUSED_SUMS is False  # off until a GPU measures it (BENCHMARKS.md)
    tp.ip_sums(bank, u, None, C, 0.0)
    assert calls == []
    monkeypatch.setattr(tp, "FUSED_SUMS", True)
    tp.ip_step(bank, u, None, torch.full((3,), 6.0, dtype=torch.float64), torch.tensor([0.3, 0.5, 0.9]),
               mu=0.0, eta=0.01, normalize_step=True)
    assert len(calls) == 5  # one call per chunk: 4 of 5 steps and one of 3
    tp.ip_sums(bank, u, None, C, 0.0, fused=False)  # the keyword wins over the constant
    assert len(calls) == 5


def test_past_the_recompile_limit_it_fails_instead_of_running_eagerly(monkeypatch, small_chunks):
    """A new graph beyond _FUSED_RECOMPILE_LIMIT raises FusedSumsError, where dynamo's default
    would run the function eagerly, silently. One reservoir of six windows is a size of 1 that no
    other test here uses: a graph of its own. Afterwards, under the real limit, it compiles."""
    # Graphs compiled earlier in this process (other test files run fused trials) may already hold
    # the one-reservoir pattern: start from an empty cache, so the new pattern below is new.
    torch._dynamo.reset()
    tp.fused_chunk_sums.cache_clear()
    bank, u = _bank(), _inputs()
    tp.ip_sums(bank, u, None, C, 0.0, fused=True)  # at least one graph in the cache
    one = (bank.select([1]), u[1:2], None, C[1:2], 0.0)
    monkeypatch.setattr(tp, "_FUSED_RECOMPILE_LIMIT", 1)
    with pytest.raises(tp.FusedSumsError, match=r"^torch_plasticity.FUSED_SUMS: .* on cpu: FailOnRecompileLimitHit"):
        tp.ip_sums(*one, fused=True)
    monkeypatch.undo()
    got = tp.ip_sums(*one, fused=True)
    want = tp.ip_sums(*one, fused=False)
    np.testing.assert_allclose(got[0].numpy(), want[0].numpy(), rtol=1e-5)


def test_without_a_compiler_the_error_is_one_line_naming_the_cause(tmp_path):
    """No C++ compiler (CXX names none; inductor's caches off, so nothing compiled before is
    reused): FusedSumsError, one line naming FUSED_SUMS and inductor's InvalidCxxCompiler."""
    code = ("import torch\n"
            "from esnfed_core.accel import torch_plasticity as tp\n"
            "from test_accel_fused import C, _bank, _inputs\n"
            "try:\n"
            "    tp.ip_sums(_bank(), _inputs(), None, C, 0.0, fused=True)\n"
            "except tp.FusedSumsError as err:\n"
            "    print('ERR', err)\n")
    env = {**os.environ, "CXX": str(tmp_path / "no-such-g++"), "TORCHINDUCTOR_FX_GRAPH_CACHE": "0",
           "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("ERR ")]
    assert len(lines) == 1, proc.stdout + proc.stderr
    msg = lines[0].removeprefix("ERR ")
    assert msg.startswith("torch_plasticity.FUSED_SUMS: torch.compile (inductor) could not build the fused IP sums "
                          "on cpu: ")
    assert "InvalidCxxCompiler" in msg and "no-such-g++" in msg and "\n" not in msg

