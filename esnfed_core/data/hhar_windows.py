"""From one HHAR user-device's joined rows to its windows (:func:`process_device`): NaN drop, the
IncFed paper's 32 features (:func:`ijcnn32`, with ``features: ijcnn32``), per-column z-score
(:func:`zscore`) and non-overlapping windows (:func:`to_windows`). Pure functions over arrays."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from esnfed_core.data.hhar_join import Joined, choose_copy, kept_rows
from esnfed_core.errors import DataError

FEATURE_NAMES = ("acc_x", "acc_y", "acc_z", "gyro_x", "gyro_y", "gyro_z")
FEATURE_SETS = ("raw", "ijcnn32")
STATISTICS = ("mean", "std", "min", "max")  # ijcnn32's windowed statistics, in column order
IJCNN32_NAMES = (FEATURE_NAMES + tuple(f"{a}_{s}" for s in STATISTICS for a in FEATURE_NAMES)
                 + ("acc_mag", "gyro_mag"))


def zscore(values: np.ndarray, ddof: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-column z-score; returns (normalised, mean, std)."""
    mean = values.mean(axis=0)
    std = values.std(axis=0, ddof=ddof)
    with np.errstate(divide="ignore", invalid="ignore"):  # a constant column is reported by the caller
        return (values - mean) / std, mean, std


def feature_names(p: dict) -> tuple[str, ...]:
    """The columns of the processed ``x`` under resolved params ``p`` (``features``)."""
    return IJCNN32_NAMES if p["features"] == "ijcnn32" else FEATURE_NAMES


def ijcnn32(values: np.ndarray, stats_window: int, stats_hop: int) -> np.ndarray:
    """The IncFed paper's 32 features of ``values`` (n, 6) (acc x, y, z, gyro x, y, z), one row per
    step t >= ``stats_window`` - 1, so (n - stats_window + 1, 32); (0, 32) when n < stats_window.

    Columns: the 6 axes at t; the mean, std (population), min and max of each axis (stat-major,
    :data:`IJCNN32_NAMES`) over the statistics window k = (t - stats_window + 1) // stats_hop, rows
    [k·hop, k·hop + stats_window): the latest window ending at or before t, so a statistic is held
    for the ``stats_hop`` steps from its window's last row and never reads a row after t (causal);
    |acc| and |gyro| at t (per step, not windowed).
    """
    n = values.shape[0]
    if n < stats_window:
        return np.zeros((0, 32), dtype=values.dtype)
    # (K, 6, stats_window) view of windows k at rows k·hop .. k·hop + stats_window - 1
    win = np.lib.stride_tricks.sliding_window_view(values, stats_window, axis=0)[::stats_hop]
    stats = np.concatenate([win.mean(axis=2), win.std(axis=2), win.min(axis=2), win.max(axis=2)], axis=1)
    steps = np.arange(stats_window - 1, n)
    held = stats[(steps - stats_window + 1) // stats_hop]
    now = values[steps]
    mags = np.stack([np.linalg.norm(now[:, :3], axis=1), np.linalg.norm(now[:, 3:], axis=1)], axis=1)
    return np.concatenate([now, held, mags], axis=1)


def to_windows(values: np.ndarray, label: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Non-overlapping windows of ``window`` steps; the tail that does not fill one is dropped."""
    w = values.shape[0] // window
    x = values[: w * window].reshape(w, window, values.shape[1]).astype(np.float32)
    y = label[: w * window].reshape(w, window).astype(np.int8)
    return x, y


@dataclass
class DeviceResult:
    x: np.ndarray
    y: np.ndarray
    info: dict


def process_device(copies: dict[str, Joined], rate: float, p: dict, where: str) -> DeviceResult | None:
    """Copy choice, decimation, NaN drop, z-score and windows for one user-device; None when the
    device is skipped by ``max_nan_fraction``. ``where`` prefixes error messages."""
    chosen, fractions = choose_copy(copies)
    info = {"copy": chosen, "nan_fraction": fractions}
    if fractions[chosen] >= p["max_nan_fraction"] and p["max_nan_fraction"] < 1.0:
        info.update(skipped=f"NaN fraction {fractions[chosen]:.3f} >= max_nan_fraction", windows=0)
        return DeviceResult(np.zeros((0, p["window"], len(feature_names(p))), np.float32),
                            np.zeros((0, p["window"]), np.int8), info)
    j = copies[chosen]
    idx = kept_rows(j.time.size, rate, p["target_rate"])
    values, label = j.values[idx], j.label[idx]
    ok = ~np.isnan(values).any(axis=1) & (label >= 0)
    values, label = values[ok], label[ok]
    info.update(rows_joined=int(j.time.size), rows_decimated=int(idx.size), rows_kept=int(values.shape[0]))
    if values.shape[0] == 0:
        raise DataError(f"{where}: no usable rows ({j.time.size} joined rows of {chosen}, all with "
                        "null activity or a missing sensor)")
    if p["features"] == "ijcnn32":  # features before the z-score, as the paper's order of steps
        # the first stats_window - 1 rows have no complete statistics window and are dropped
        need = p["window"] + p["stats_window"] - 1
        if values.shape[0] < need:
            raise DataError(f"{where}: only {values.shape[0]} usable rows after decimation, fewer than one "
                            f"window of {p['window']} feature rows ({need} rows with stats_window "
                            f"{p['stats_window']})")
        label = label[p["stats_window"] - 1:]
        values = ijcnn32(values, p["stats_window"], p["stats_hop"])
        info.update(rows_featured=int(values.shape[0]))
    if values.shape[0] < p["window"]:
        raise DataError(f"{where}: only {values.shape[0]} usable rows after decimation, fewer than one "
                        f"window of {p['window']}")
    z, mean, std = zscore(values, p["std_ddof"])
    flat = np.flatnonzero(~(std > 0) | ~np.isfinite(std))
    if flat.size:
        raise DataError(f"{where}: column {feature_names(p)[flat[0]]} is constant over the kept rows "
                        "(cannot z-score)")
    x, y = to_windows(z, label, p["window"])
    info.update(windows=int(x.shape[0]), mean=mean.tolist(), std=std.tolist())
    return DeviceResult(x, y, info)
