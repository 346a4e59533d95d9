"""The server's aggregation shared by the federated algorithms: FedAvg's readouts and FedIP's
(g, b) are both window-weighted means of the clients' uploads."""

from __future__ import annotations

from typing import Sequence

import numpy as np


def weighted_average(arrays: Sequence[np.ndarray], weights: Sequence[int]) -> np.ndarray:
    """Σ (n_c / n) · x_c in float64: the FedAvg aggregation used for readouts and for IP."""
    w = np.asarray(weights, dtype=np.float64)
    if np.any(w < 0) or w.sum() <= 0:
        raise ValueError(f"weighted_average: weights must be >= 0 with a positive sum, got {w.tolist()}")
    out = np.zeros(np.shape(arrays[0]), np.float64)
    for arr, wi in zip(arrays, w / w.sum()):
        out += wi * np.asarray(arr, np.float64)
    return out
