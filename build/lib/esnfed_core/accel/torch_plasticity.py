"""Torch kernels of intrinsic plasticity batched over R reservoirs, each with its own (g, b),
target σ and mini-batch: the gradient sums of one mini-batch and the SGD step (PROTOCOL §4).

The same update rule as :func:`esnfed_core.plasticity.ip_step`: per unit, q = h(c + h(μ − h))
with c = 2σ² + 1, summed over steps and windows (float32 within a chunk, float64 across chunks),
∂b = (Σq − μ·T·B)/σ²/B and ∂g = −T/g + Σ(∂b·x_net)/B, each step L2-normalised when asked.
Windows a reservoir does not have (its mini-batch is shorter than the others') are padding:
a zero ``mask`` removes them from every sum, and ``n_win`` counts the real ones.

The sums of a chunk run eagerly (five to nine kernels, each reading the chunk's buffers), or,
with ``fused=True`` (default: the module constant FUSED_SUMS), as one function compiled by
``torch.compile`` (inductor: Triton on CUDA, C++ via the system's g++ on the CPU) that reads h and
net once. The pipeline passes ``fused`` from params.yaml ``runner.fused_ip_sums`` (opt-in, a
DVC param and part of the key of a torch trial with IP); FUSED_SUMS stays False: on one H200 the
fused sums made the 32-trial IP epoch 6 % and 13 % faster in two calls but the IP step alone was
not faster in every case (BENCHMARKS.md, "Third GPU measurement").
"""

from __future__ import annotations

import functools
from contextlib import contextmanager, nullcontext
from typing import Iterator

import torch
import torch.fx.experimental._config  # noqa: F401  (use_duck_shape, patched in _compiling)

from esnfed_core.accel.torch_reservoir import Bank, Chunk, iter_chunks
from esnfed_core.errors import EsnfedError

_NORM_EPS = 1e-12  # as esnfed_core.plasticity
# The IP sums of a chunk as one compiled kernel (fused_chunk_sums) instead of eager passes.
FUSED_SUMS = False
# Compiles of the fused sums one process may make (dynamo's default is 8): shapes are dynamic,
# but dynamo specialises a dimension of size 1, so each pattern of R, k, B being 1 or not is a
# graph of its own (8 per device; twice that on the CPU, whose reduction guards k·B ≤ 4096).
# Past this the call fails instead of running eagerly.
_FUSED_RECOMPILE_LIMIT = 32


class FusedSumsError(EsnfedError, RuntimeError):
    """torch.compile could not build the fused IP sums (no C++ compiler, no Triton, ...): an
    expected failure of the environment, one line naming FUSED_SUMS and the cause."""


def _chunk_sums(h: torch.Tensor, net: torch.Tensor, c4: torch.Tensor, m4: torch.Tensor, mu: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Σq, Σq·net and Σm·net of one chunk (R, k, B, N) over its steps and windows, each (R, N)
    float32, with q = h(c + h(μ − h))·m: the eager passes of :func:`ip_sums` as one expression
    (μ = 0 is the same formula, and a mask of ones leaves q as it is), so one variant serves every
    case. ``c4`` (R, 1, 1, 1), ``m4`` (R, 1, B, 1), ``mu`` (1, 1, 1, 1): tensors, not Python
    floats, so another σ, mask or μ is no new graph."""
    q = h * (c4 + h * (mu - h)) * m4
    return q.sum(dim=(1, 2)), (q * net).sum(dim=(1, 2)), (net * m4).sum(dim=(1, 2))


@functools.cache
def fused_chunk_sums():
    """:func:`_chunk_sums` compiled by ``torch.compile`` (inductor), built on first use: one
    kernel reading h and net once (inductor may split a long reduction in two). Shapes are
    dynamic, so the last, shorter chunk of a window and another batch size reuse the graph."""
    return torch.compile(_chunk_sums, dynamic=True, fullgraph=True)


@contextmanager
def _compiling(dev: torch.device) -> Iterator[None]:
    """The fused sums' calls inside: dynamo may compile up to _FUSED_RECOMPILE_LIMIT graphs and
    then fails rather than run eagerly, and whatever stops a compile (no C++ compiler, no
    Triton, the limit) becomes one FusedSumsError naming the device and the cause."""
    try:
        # Without duck shaping, two dimensions that happen to be equal in the first call (steps
        # per chunk and windows, say) are not guarded equal, which would recompile when they differ.
        with torch._dynamo.config.patch(recompile_limit=_FUSED_RECOMPILE_LIMIT, fail_on_recompile_limit_hit=True), \
                torch.fx.experimental._config.patch(use_duck_shape=False):
            yield
    except (torch._dynamo.exc.TorchDynamoException, torch._dynamo.exc.FailOnRecompileLimitHit) as err:
        # BackendCompilerFailed says "backend='inductor' raised:", the cause on the next line.
        lines = [line.strip() for line in str(err).splitlines() if line.strip()]
        cause = next((line for line in lines if not line.endswith("raised:")), "")
        raise FusedSumsError(
            f"torch_plasticity.FUSED_SUMS: torch.compile (inductor) could not build the fused IP sums on "
            f"{dev.type}: {type(err).__name__}: {cause[:300]}; set params.yaml runner.fused_ip_sums: false "
            "(in code: fused=False or FUSED_SUMS = False) for the eager sums") from err


def _eager_chunk_sums(ch: Chunk, c4: torch.Tensor, m4: torch.Tensor | None, mu: float, with_net: bool
                      ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """:func:`_chunk_sums` as torch's eager kernels, in place in the chunk's buffers (its states
    are not needed: their buffer holds q); Σm·net only ``with_net``."""
    h, q, net = ch.h, ch.states, ch.net
    if mu == 0.0:
        torch.addcmul(c4, h, h, value=-1.0, out=q)  # c − h²
    else:
        torch.sub(mu, h, out=q)
        torch.addcmul(c4, h, q, out=q)  # c + h(μ − h)
    q.mul_(h)
    if m4 is not None:
        q.mul_(m4)
        if with_net:
            net.mul_(m4)
    s_q = q.sum(dim=(1, 2))
    s_net = net.sum(dim=(1, 2)) if with_net else None
    q.mul_(net)
    return s_q, q.sum(dim=(1, 2)), s_net


def ip_sums(bank: Bank, u: torch.Tensor, mask: torch.Tensor | None, c: torch.Tensor, mu: float,
            *, fused: bool | None = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Σq, Σq·x_net and (μ ≠ 0) Σx_net per reservoir and unit, (R, N) float64, over windows
    ``u`` (R', B, T, U); ``mask`` (R, B) of 0/1 window weights or None; ``c`` (R,).

    The chunks hold net = g·x_net + b (torch_reservoir folds g and b into the product), so
    Σq·x_net = (Σq·net − b·Σq)/g and Σx_net = (Σnet − b·Σm)/g, with m the mask (k·B per chunk
    without one), finished in float64: two fewer passes over each chunk than forming x_net.
    ``fused`` (None: FUSED_SUMS) sums each chunk with :func:`fused_chunk_sums` instead of the
    eager passes: float32 sums within a chunk in another order, added in float64 across chunks
    as the eager ones. A compile that fails raises FusedSumsError (no eager fallback)."""
    fused = FUSED_SUMS if fused is None else bool(fused)
    r, n = bank.reservoirs, bank.units
    dev = bank.device
    sum_q = torch.zeros((r, n), dtype=torch.float64, device=dev)
    sum_qn = torch.zeros_like(sum_q)
    sum_net = torch.zeros_like(sum_q) if mu != 0.0 else None
    c4 = c.to(torch.float32).view(r, 1, 1, 1)
    m4 = None if mask is None else mask.to(torch.float32).view(r, 1, -1, 1)
    rows = torch.zeros(r, dtype=torch.float64, device=dev)  # Σm over steps and windows
    per_step = (torch.full((r,), float(u.shape[1]), dtype=torch.float64, device=dev) if mask is None
                else mask.to(torch.float64).sum(dim=1))
    if fused:
        compiled = fused_chunk_sums()
        mu4 = torch.full((1, 1, 1, 1), mu, dtype=torch.float32, device=dev)
        # Copies, not views: dynamo guards a view on its base's sizes too (σ of a slice of trials).
        m4f = torch.ones((r, 1, u.shape[1], 1), dtype=torch.float32, device=dev) if m4 is None else m4.clone()
        c4f = c4.clone()

        def chunk_sums(ch: Chunk):
            return compiled(ch.h, ch.net, c4f, m4f, mu4)
    else:
        def chunk_sums(ch: Chunk):
            return _eager_chunk_sums(ch, c4, m4, mu, sum_net is not None)
    with _compiling(dev) if fused else nullcontext():
        for ch in iter_chunks(bank, u):
            s_q, s_qn, s_net = chunk_sums(ch)
            sum_q += s_q
            sum_qn += s_qn
            if sum_net is not None:
                sum_net += s_net
            rows += per_step * ch.h.shape[1]
    gain, bias = bank.gain.to(torch.float64), bank.bias.to(torch.float64)
    if not bank.ip:  # net = x_net
        return sum_q, sum_qn, sum_net
    sum_qx = (sum_qn - bias * sum_q) / gain
    sum_x = None if sum_net is None else (sum_net - bias * rows.view(r, 1)) / gain
    return sum_q, sum_qx, sum_x


def ip_gradients(bank: Bank, u: torch.Tensor, mask: torch.Tensor | None, n_win: torch.Tensor,
                 sigma: torch.Tensor, mu: float, *, fused: bool | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(∂g, ∂b), each (R, N) float64: summed over time, mean over each reservoir's ``n_win``
    real windows (as esnfed_core.plasticity.ip_gradients); ``fused`` as :func:`ip_sums`."""
    t_len = u.shape[2]
    s2 = sigma.to(torch.float64).view(-1, 1) ** 2
    nw = n_win.to(torch.float64).view(-1, 1)
    sum_q, sum_qx, sum_x = ip_sums(bank, u, mask, (2.0 * s2 + 1.0).view(-1), mu, fused=fused)
    db_sum = (sum_q - mu * t_len * nw) / s2
    dbx_sum = sum_qx / s2 if sum_x is None else (sum_qx - mu * sum_x) / s2
    gain = bank.gain.to(torch.float64)
    return -t_len / gain + dbx_sum / nw, db_sum / nw


def ip_step(bank: Bank, u: torch.Tensor, mask: torch.Tensor | None, n_win: torch.Tensor,
            sigma: torch.Tensor, *, mu: float, eta: float, normalize_step: bool,
            active: torch.Tensor | None = None, fused: bool | None = None) -> Bank:
    """One SGD step of every reservoir on its mini-batch; reservoirs where ``active`` (R,) is
    False keep their (g, b) (they have no mini-batch at this step); ``fused`` as :func:`ip_sums`."""
    dg, db = ip_gradients(bank, u, mask, n_win, sigma, mu, fused=fused)
    if normalize_step:
        dg = dg / torch.linalg.vector_norm(dg, dim=1, keepdim=True).clamp_min(_NORM_EPS)
        db = db / torch.linalg.vector_norm(db, dim=1, keepdim=True).clamp_min(_NORM_EPS)
    gain = (bank.gain.to(torch.float64) - eta * dg).to(torch.float32)
    bias = (bank.bias.to(torch.float64) - eta * db).to(torch.float32)
    if active is not None:
        keep = ~active.view(-1, 1)
        gain = torch.where(keep, bank.gain, gain)
        bias = torch.where(keep, bank.bias, bias)
    return bank.with_ip(gain, bias)
