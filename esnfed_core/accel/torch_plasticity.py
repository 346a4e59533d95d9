"""Torch kernels of intrinsic plasticity batched over R reservoirs, each with its own (g, b),
target σ and mini-batch: the gradient sums of one mini-batch and the SGD step (PROTOCOL §4).

The same update rule as :func:`esnfed_core.plasticity.ip_step`: per unit, q = h(c + h(μ − h))
with c = 2σ² + 1, summed over steps and windows (float32 within a chunk, float64 across chunks),
∂b = (Σq − μ·T·B)/σ²/B and ∂g = −T/g + Σ(∂b·x_net)/B, each step L2-normalised when asked.
Windows a reservoir does not have (its mini-batch is shorter than the others') are padding:
a zero ``mask`` removes them from every sum, and ``n_win`` counts the real ones.
"""

from __future__ import annotations

import torch

from esnfed_core.accel.torch_reservoir import Bank, iter_chunks

_NORM_EPS = 1e-12  # as esnfed_core.plasticity


def ip_sums(bank: Bank, u: torch.Tensor, mask: torch.Tensor | None, c: torch.Tensor, mu: float
            ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """Σq, Σq·x_net and (μ ≠ 0) Σx_net per reservoir and unit, (R, N) float64, over windows
    ``u`` (R', B, T, U); ``mask`` (R, B) of 0/1 window weights or None; ``c`` (R,).

    The chunks hold net = g·x_net + b (torch_reservoir folds g and b into the product), so
    Σq·x_net = (Σq·net − b·Σq)/g and Σx_net = (Σnet − b·Σm)/g, with m the mask (k·B per chunk
    without one), finished in float64: two fewer passes over each chunk than forming x_net."""
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
    for ch in iter_chunks(bank, u):
        h, q, net = ch.h, ch.states, ch.net  # the states are not needed: their buffer holds q
        if mu == 0.0:
            torch.addcmul(c4, h, h, value=-1.0, out=q)  # c − h²
        else:
            torch.sub(mu, h, out=q)
            torch.addcmul(c4, h, q, out=q)  # c + h(μ − h)
        q.mul_(h)
        if m4 is not None:
            q.mul_(m4)
            if sum_net is not None:
                net.mul_(m4)
        sum_q += q.sum(dim=(1, 2))
        if sum_net is not None:
            sum_net += net.sum(dim=(1, 2))
        q.mul_(net)
        sum_qn += q.sum(dim=(1, 2))
        rows += per_step * ch.h.shape[1]
    gain, bias = bank.gain.to(torch.float64), bank.bias.to(torch.float64)
    if not bank.ip:  # net = x_net
        return sum_q, sum_qn, sum_net
    sum_qx = (sum_qn - bias * sum_q) / gain
    sum_x = None if sum_net is None else (sum_net - bias * rows.view(r, 1)) / gain
    return sum_q, sum_qx, sum_x


def ip_gradients(bank: Bank, u: torch.Tensor, mask: torch.Tensor | None, n_win: torch.Tensor,
                 sigma: torch.Tensor, mu: float) -> tuple[torch.Tensor, torch.Tensor]:
    """(∂g, ∂b), each (R, N) float64: summed over time, mean over each reservoir's ``n_win``
    real windows (as esnfed_core.plasticity.ip_gradients)."""
    t_len = u.shape[2]
    s2 = sigma.to(torch.float64).view(-1, 1) ** 2
    nw = n_win.to(torch.float64).view(-1, 1)
    sum_q, sum_qx, sum_x = ip_sums(bank, u, mask, (2.0 * s2 + 1.0).view(-1), mu)
    db_sum = (sum_q - mu * t_len * nw) / s2
    dbx_sum = sum_qx / s2 if sum_x is None else (sum_qx - mu * sum_x) / s2
    gain = bank.gain.to(torch.float64)
    return -t_len / gain + dbx_sum / nw, db_sum / nw


def ip_step(bank: Bank, u: torch.Tensor, mask: torch.Tensor | None, n_win: torch.Tensor,
            sigma: torch.Tensor, *, mu: float, eta: float, normalize_step: bool,
            active: torch.Tensor | None = None) -> Bank:
    """One SGD step of every reservoir on its mini-batch; reservoirs where ``active`` (R,) is
    False keep their (g, b) (they have no mini-batch at this step)."""
    dg, db = ip_gradients(bank, u, mask, n_win, sigma, mu)
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
