"""State passes on the device over many windows, batched over reservoirs: the users' windows
held on the device, and each reservoir's ridge statistics and readouts' correct counts over them,
streamed by window batches that keep the chunk buffers of torch_reservoir within CHUNK_ELEMENTS.
Shared by the stationary (accel.trials) and continual (accel.continual) batched trials and the
batched assessment (accel.scores)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from esnfed_core.accel.torch_reservoir import CHUNK_ELEMENTS, Bank, count_correct, iter_chunks, ridge_stats
from esnfed_core.data.processed import UserData
from esnfed_core.readout import RidgeStats


@dataclass
class DeviceWindows:
    """Users' windows concatenated on the device: x (W, T, U) float32, y (W, T) int8, and each
    user's first row and count."""

    x: torch.Tensor
    y: torch.Tensor
    offsets: list[int]
    counts: list[int]

    @classmethod
    def of(cls, users: Sequence[UserData], device: str) -> "DeviceWindows":
        counts = [int(u.windows) for u in users]
        offsets = [int(o) for o in np.cumsum([0] + counts[:-1])]
        xs = [np.asarray(u.x, np.float32) for u in users if u.windows]
        ys = [np.asarray(u.y, np.int8) for u in users if u.windows]
        x = torch.from_numpy(np.concatenate(xs) if xs else np.zeros((0, 1, 1), np.float32)).to(device)
        y = torch.from_numpy(np.concatenate(ys) if ys else np.zeros((0, 1), np.int8)).to(device)
        return cls(x, y, offsets, counts)

    def user(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        lo = self.offsets[i]
        return self.x[lo : lo + self.counts[i]], self.y[lo : lo + self.counts[i]]


def window_batch(reservoirs: int, units: int, windows: int) -> int:
    """Windows per state pass: chunks of at least 8 steps within CHUNK_ELEMENTS."""
    return int(max(1, min(windows, CHUNK_ELEMENTS // max(1, 8 * reservoirs * units))))


def stats_of(bank: Bank, x: torch.Tensor, y: torch.Tensor, n_classes: int, bias: bool = False
             ) -> list[RidgeStats]:
    """Each reservoir's ridge statistics of the windows x (W, T, U), streamed by window batch
    (of the augmented states [S, 1] with ``bias``: RidgeStats.bias)."""
    r, n = bank.reservoirs, bank.units
    m = n + int(bias)
    a = torch.zeros((r, n_classes, m), dtype=torch.float64, device=bank.device)
    b = torch.zeros((r, m, m), dtype=torch.float64, device=bank.device)
    step = window_batch(r, n, len(x))
    for lo in range(0, len(x), step):
        da, db = ridge_stats(bank, x[lo : lo + step][None], y[lo : lo + step][None], n_classes, bias)
        a += da
        b += db
    a_np, b_np = a.cpu().numpy(), b.cpu().numpy()
    w, t = (int(x.shape[0]), int(x.shape[1])) if x.ndim == 3 else (0, 0)
    return [RidgeStats(a_np[i], b_np[i], w * t, w, bias) for i in range(r)]


def counts_of(bank: Bank, x: torch.Tensor, y: torch.Tensor, readouts: torch.Tensor) -> torch.Tensor:
    """Correct steps (R, L) of readouts (R, L, C, N) — or (R, L, C, N+1), the last column the
    bias — on windows x, streamed by window batch."""
    r, n = bank.reservoirs, bank.units
    correct = torch.zeros((r, readouts.shape[1]), dtype=torch.int64, device=bank.device)
    step = window_batch(r, n, len(x))
    for lo in range(0, len(x), step):
        correct += count_correct(bank, x[lo : lo + step][None], y[lo : lo + step][None], readouts)
    return correct


def histograms_of(bank: Bank, x: torch.Tensor, bins: int) -> np.ndarray:
    """Per-unit histograms (R, N, bins) of each reservoir's post-leak states on windows x (W, T, U)
    over ``bins`` equal bins of [-1, 1], values outside in the first or last bin: the bins of
    esnfed_core.metrics.histogram_values, the same float64 arithmetic on each float32 state.
    Streamed by window batch and by chunk; the float64 and index temporaries of a chunk are at
    most 4 chunk buffers."""
    r, n = bank.reservoirs, bank.units
    counts = torch.zeros((r, n * bins), dtype=torch.int64, device=bank.device)
    offsets = torch.arange(n, device=bank.device) * bins
    step = window_batch(r, n, len(x))
    for lo in range(0, len(x), step):
        for chunk in iter_chunks(bank, x[lo : lo + step][None]):
            idx = torch.floor((chunk.states.to(torch.float64) + 1.0) * (bins / 2.0)).to(torch.int64)
            idx.clamp_(0, bins - 1).add_(offsets)
            flat = idx.view(r, -1)
            counts.scatter_add_(1, flat, torch.ones_like(flat))
    return counts.view(r, n, bins).cpu().numpy()
