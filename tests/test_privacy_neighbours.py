"""User-level DP on neighbouring *raw* data sets: one user's raw recording removed before the
pipeline's per-user z-scoring and windowing (esnfed_core.data.hhar_windows.zscore, to_windows). The
mechanisms' deterministic parts (the clipped sums of esnfed_core.privacy that the noise is added
to) are computed on both; the released quantity moves by at most the sensitivity the noise is
calibrated for: C = clip·√(N + N²) for IncFed's statistics, C_ip for a FedIP round."""

from __future__ import annotations

import numpy as np
import pytest

from esnfed_core.data.hhar_windows import to_windows, zscore
from esnfed_core.federated import fedip
from esnfed_core.ip_rule import IPConfig
from esnfed_core.privacy import (
    DPSpec, clipped_mean_stats, clipped_stats_sum, clipped_update_sum, released_vector, stats_bound, stats_sigma,
)
from esnfed_core.readout import ridge_stats
from esnfed_core.reservoir import ReservoirConfig, build_reservoir

WINDOW, N_CLASSES, UNITS = 20, 3, 12
USERS = ("u0", "u1", "u2", "u3")


def _raw() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Each user's raw recording: (rows, 3 channels) at its own offset and scale, and a label per row."""
    rng = np.random.default_rng(5)
    out = {}
    for i, name in enumerate(USERS):
        rows = 200 + 40 * i
        values = (3.0 + i) * rng.normal(size=(rows, 3)) + 10.0 * i
        out[name] = values, np.repeat(rng.integers(0, N_CLASSES, rows // WINDOW + 1), WINDOW)[:rows]
    return out


def _preprocess(raw: dict[str, tuple[np.ndarray, np.ndarray]]) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """The pipeline's per-user steps: z-score over the user's own rows, then windows."""
    return {name: to_windows(zscore(values)[0], label, WINDOW) for name, (values, label) in raw.items()}


def _neighbours():
    raw = _raw()
    removed = "u2"
    return _preprocess(raw), _preprocess({k: v for k, v in raw.items() if k != removed}), removed


def test_removing_one_raw_user_moves_the_clipped_statistics_sum_by_at_most_c():
    full, less, removed = _neighbours()
    # the users the neighbour keeps are processed identically (per-user normalisation)
    assert all(np.array_equal(full[k][0], less[k][0]) for k in less)
    res = build_reservoir(ReservoirConfig(3, UNITS, 0.9, 1.0, 5.0), 2)  # near-saturated: B̄ weighs most
    spec = DPSpec(1.0, 1e-5, clip=0.05)
    bound = spec.clip * stats_bound(UNITS)

    def released(data) -> np.ndarray:
        return released_vector(*clipped_stats_sum([ridge_stats(res, x, y, N_CLASSES, 8) for x, y in data.values()],
                                                  bound))

    moved = float(np.linalg.norm(released(full) - released(less)))
    # the removed user is clipped (its mean statistics exceed C): the bound is what limits the move
    a, b = clipped_mean_stats(ridge_stats(res, *full[removed], N_CLASSES, 8), np.inf)
    assert np.sqrt(np.sum(a * a) + np.sum(b * b)) > bound
    assert 0.5 * bound < moved <= bound * (1 + 1e-12)
    assert stats_sigma(spec, UNITS) == spec.multiplier() * bound  # the noise is calibrated for that C


def _first_round_sum(data, ip_clip: float) -> np.ndarray:
    """Σ clip(Δ_c) of FedIP's first round over ``data``'s clients, from the same start."""
    res = build_reservoir(ReservoirConfig(3, UNITS, 0.9, 0.5, 0.8), 2)
    got = []

    def aggregate(start, gains, biases, weights):
        x0 = np.concatenate([start.gain, start.bias]).astype(np.float64)
        got.append(clipped_update_sum(x0, [np.concatenate([g, b]) - x0 for g, b in zip(gains, biases)], ip_clip))
        return start.gain, start.bias

    fedip(res, [x for x, _ in data.values()], IPConfig(sigma=0.3, batch_size=8), rounds=1, local_epochs=1, seed=3,
          client_names=list(data), aggregate=aggregate)
    return got[0]


@pytest.mark.parametrize("ip_clip", [1e-3, 1e-2])
def test_removing_one_raw_user_moves_a_fedip_rounds_clipped_sum_by_at_most_ip_clip(ip_clip):
    """Each round is noised for sensitivity C_ip (esnfed_core.privacy.ip_sigma); from the same
    broadcast start, the round's clipped sum without the user differs by at most C_ip (here by
    exactly C_ip: every update is longer than the clip)."""
    full, less, _ = _neighbours()
    moved = float(np.linalg.norm(_first_round_sum(full, ip_clip) - _first_round_sum(less, ip_clip)))
    assert 0.99 * ip_clip < moved <= ip_clip * (1 + 1e-12)
