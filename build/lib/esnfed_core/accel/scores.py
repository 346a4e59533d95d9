"""The assessment's scores on the torch kernels (runner.device torch-cpu | cuda), batched over the
models of a share: pooled accuracies of stationary retrains, the per-context correct counts of
continual retrains (every retrain's model after each context in one bank) and the activation
densities of the papers' figures. Each equals its numpy counterpart in esnfed_core.scoring within
float32 rounding: a step whose class scores tie within rounding may be counted otherwise, a state
within rounding of a bin edge may fall in the next bin.

Memory on the device: one bank of the models' weights (models × N² floats; 5 retrains × 5
contexts at N = 400: 16 MB), the evaluated users' windows of one context at a time, and the
chunk buffers of torch_reservoir (accel.passes).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from esnfed_core.accel import torch_device
from esnfed_core.accel.passes import DeviceWindows, counts_of, histograms_of
from esnfed_core.accel.torch_reservoir import Bank
from esnfed_core.data.processed import UserData
from esnfed_core.metrics import ActivationHistogram
from esnfed_core.reservoir import Reservoir
from esnfed_core.scoring import ActivationDensities, densities_of, pooled_contexts


def _correct(bank: Bank, readouts: Sequence[np.ndarray], users: Sequence[UserData]) -> np.ndarray:
    """Correct steps (M,) of each of the bank's reservoirs with its readout (C, N) on ``users``."""
    win = DeviceWindows.of(list(users), str(bank.device))
    if not len(win.x):
        return np.zeros(bank.reservoirs, np.int64)
    grid = torch.from_numpy(np.stack([np.asarray(w, np.float64)[None] for w in readouts])).to(bank.device)
    return counts_of(bank, win.x, win.y, grid).cpu().numpy()[:, 0]


def accuracies(reservoirs: Sequence[Reservoir], readouts: Sequence[np.ndarray], users: Sequence[UserData],
               device: str) -> list[float]:
    """Pooled accuracy of each (reservoir, readout (C, N)) on ``users``, batched over the models
    (one size): esnfed_core.scoring.accuracy of each."""
    bank = Bank.from_reservoirs(list(reservoirs), torch_device(device))
    total = sum(int(u.y.size) for u in users)
    if not total:
        return [0.0] * len(reservoirs)
    return [float(c) / total for c in _correct(bank, readouts, users)]


def context_matrices(models: Sequence[tuple[Sequence[Reservoir], Sequence[np.ndarray]]],
                     users: Sequence[UserData], device: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """esnfed_core.scoring.context_matrix of each continual model (its reservoir and readout after
    each context, T of each) on ``users``, batched: every model's T reservoirs (one size) run
    together over the windows of one context at a time."""
    n_ctx = len(models[0][0]) if models else 0
    if any(len(r) != n_ctx or len(w) != n_ctx for r, w in models):
        raise ValueError(f"context_matrices: every model needs {n_ctx} reservoirs and readouts")
    pooled, total = pooled_contexts(users, n_ctx)
    reservoirs = [r for rs, _ in models for r in rs]
    readouts = [w for _, ws in models for w in ws]
    correct = np.zeros((len(reservoirs), n_ctx), np.int64)
    if reservoirs and pooled.windows:
        bank = Bank.from_reservoirs(reservoirs, torch_device(device))
        for j in range(n_ctx):
            correct[:, j] = _correct(bank, readouts, [pooled.of_context(j)])
    return [(correct[i * n_ctx:(i + 1) * n_ctx], total) for i in range(len(models))]


def activation_densities(models: Sequence[Sequence[Reservoir]], users: Sequence[UserData], n_contexts: int,
                         bins: int, device: str) -> list[ActivationDensities]:
    """esnfed_core.scoring.activation_densities of each model's reservoirs (the final one, or a
    continual model's after each context) on each user and context of ``users``, batched: the
    reservoirs of every model (one size) run together over one user's windows of one context."""
    flat = [r for rs in models for r in rs]
    edges = np.linspace(-1.0, 1.0, bins + 1)
    empty = [ActivationHistogram(edges, np.zeros((r.units, bins), np.int64)) for r in flat]
    # hists[reservoir][user][context]
    hists: list[list[list[ActivationHistogram]]] = [[[] for _ in users] for _ in flat]
    bank = Bank.from_reservoirs(flat, torch_device(device)) if flat else None
    for i, u in enumerate(users):
        for j in range(n_contexts):
            part = u.of_context(j)
            counts = (histograms_of(bank, DeviceWindows.of([part], str(bank.device)).x, bins)
                      if bank is not None and part.windows else None)
            for m in range(len(flat)):
                hists[m][i].append(empty[m] if counts is None else ActivationHistogram(edges, counts[m]))
    out, lo = [], 0
    for rs in models:
        out.append(densities_of(hists[lo : lo + len(rs)], n_contexts, bins))
        lo += len(rs)
    return out
