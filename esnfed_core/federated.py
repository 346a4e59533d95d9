"""Federated readouts: IncFed (sum of ridge statistics) and FedAvg (average of local readouts).

Clients keep their windows; only messages from :mod:`esnfed_core.messages` reach the server,
and each one is recorded in the :class:`CommLedger` when one is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from esnfed_core.messages import CommLedger, ReadoutMessage, StatsMessage
from esnfed_core.readout import LAMBDA, Counts, RidgeStats, evaluate, ridge_stats, solve
from esnfed_core.reservoir import Reservoir


class Client:
    """A federation member: holds windows ``x`` (W, T, U) and labels (W, T) privately."""

    def __init__(self, name: str, x: np.ndarray, labels: np.ndarray, n_classes: int,
                 batch_size: int = 256, solver: str = "cholesky"):
        if len(x) != len(labels):
            raise ValueError(f"client {name}: {len(x)} windows but {len(labels)} label rows")
        self.name = name
        self._x = x
        self._labels = labels
        self.n_classes = n_classes
        self.batch_size = batch_size
        self.solver = solver  # readout.solve's solver for the local FedAvg readout

    @property
    def num_examples(self) -> int:
        return len(self._x)

    def fit_stats(self, res: Reservoir) -> StatsMessage:
        """IncFed: the client's ridge statistics."""
        return StatsMessage(ridge_stats(res, self._x, self._labels, self.n_classes, self.batch_size))

    def fit_readout(self, res: Reservoir, lam: float) -> ReadoutMessage:
        """FedAvg: a readout solved on the client's data alone."""
        stats = ridge_stats(res, self._x, self._labels, self.n_classes, self.batch_size)
        return ReadoutMessage(solve(stats, lam, self.solver), num_examples=self.num_examples)

    def evaluate(self, res: Reservoir, readouts: np.ndarray) -> Counts:
        return evaluate(res, self._x, self._labels, readouts, self.batch_size)


@dataclass(frozen=True)
class IncFedResult:
    stats: RidgeStats
    readouts: np.ndarray  # (L, C, N), one per λ


def incfed(
    res: Reservoir,
    clients: Sequence[Client],
    lambdas: Sequence[float],
    ledger: CommLedger | None = None,
    rnd: int = 0,
    solver: str = "cholesky",
) -> IncFedResult:
    """IncFed: every client uploads (A_c, B_c, n_c); the server sums and solves for each λ
    (``solver``: see :func:`esnfed_core.readout.solve`).

    Identical to centralised ridge on the pooled data. Each client then downloads one readout.
    """
    if not clients:
        raise ValueError("incfed: no clients")
    total: RidgeStats | None = None
    for c in clients:
        msg = c.fit_stats(res)
        if ledger is not None:
            ledger.record("incfed", rnd, c.name, "up", msg)
        total = msg.stats if total is None else total + msg.stats
    readouts = solve(total, list(lambdas), solver)
    if ledger is not None:
        for c in clients:
            ledger.record("incfed", rnd, c.name, "down", ReadoutMessage(readouts[0]))
    return IncFedResult(total, readouts)


def weighted_average(arrays: Sequence[np.ndarray], weights: Sequence[int]) -> np.ndarray:
    """Σ (n_c / n) · x_c in float64: the FedAvg aggregation used for readouts and for IP."""
    w = np.asarray(weights, dtype=np.float64)
    if np.any(w < 0) or w.sum() <= 0:
        raise ValueError(f"weighted_average: weights must be >= 0 with a positive sum, got {w.tolist()}")
    out = np.zeros(np.shape(arrays[0]), np.float64)
    for arr, wi in zip(arrays, w / w.sum()):
        out += wi * np.asarray(arr, np.float64)
    return out


def fedavg(
    res: Reservoir,
    clients: Sequence[Client],
    lam: float,
    ledger: CommLedger | None = None,
    rnd: int = 0,
) -> np.ndarray:
    """FedAvg of readouts: local ridge with the same λ, averaged by window count: (C, N)."""
    LAMBDA.check("lambda", lam)
    if not clients:
        raise ValueError("fedavg: no clients")
    msgs = []
    for c in clients:
        msg = c.fit_readout(res, lam)
        if ledger is not None:
            ledger.record("fedavg", rnd, c.name, "up", msg)
        msgs.append(msg)
    w = weighted_average([m.w for m in msgs], [m.num_examples for m in msgs])
    if ledger is not None:
        for c in clients:
            ledger.record("fedavg", rnd, c.name, "down", ReadoutMessage(w))
    return w
