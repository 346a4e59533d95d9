"""The float64 reference of a ridge readout with an unpenalised bias (readout.bias): the exact
solve over the augmented states [S, 1] of windows through a reservoir, for the tests of the paths
that take the bias (continual, heterogeneous)."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from esnfed_core.reservoir import iter_states


def augmented_rows(res, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """float64 rows [s, 1] of every step of windows ``x`` (W, T, U) and their labels, streamed by
    batches of 64 windows (other batches than the pipeline's: a second float32 rounding side)."""
    rows, labels = [], []
    for sb in iter_states(res, x, 64):
        s = sb.states.transpose(1, 0, 2).reshape(-1, res.units).astype(np.float64)
        rows.append(np.hstack([s, np.ones((len(s), 1))]))
        labels.append(np.asarray(y)[sb.index].reshape(-1).astype(int))
    return np.vstack(rows), np.concatenate(labels)


def float64_ridge(parts: Sequence[tuple], n_classes: int, lam: float) -> tuple[np.ndarray, np.ndarray]:
    """(W (C, N+1), B = [S 1]ᵀ[S 1]) of the ridge with penalty λ·diag(1, …, 1, 0) over the rows of
    every (reservoir, x, y) of ``parts`` together (each part through its own reservoir)."""
    rows = [augmented_rows(res, x, y) for res, x, y in parts]
    s = np.vstack([r for r, _ in rows])
    onehot = np.eye(n_classes)[np.concatenate([lab for _, lab in rows])]
    penalty = np.eye(s.shape[1])
    penalty[-1, -1] = 0.0
    gram = s.T @ s
    return np.linalg.solve(gram + lam * penalty, s.T @ onehot).T, gram
