"""From one user's rows of a table (time, label code, context code, features) to contract windows:
resampling to a target rate, windowing, per-user z-score. Pure array code, no I/O: the stage
esnfed_stages/import_data.py reads the files and calls :func:`user_windows`.

Semantics (docs/data-contract.md, "Importing your own data"):

* rows are sorted by time (stable); of rows with the same time, the first is kept;
* rows are cut into segments of one context (consecutive rows with the same context in time);
* with a ``rate``, each segment is resampled on the grid t0 + k/rate (t0 = its first time, up to its
  last time): features linearly interpolated, label and context held from the last row at or
  before each grid time; without a rate the rows are taken as they are; a segment whose grid
  would exceed :data:`MAX_UPSAMPLE` steps per row is an error (a time far off);
* each segment is cut into consecutive, non-overlapping windows of ``window`` steps (a shorter
  tail is dropped), so no window spans two contexts;
* windows are ordered by context index (stable: within a context, by time);
* features are z-scored per user over every step of its windows (population std; a constant
  feature, std 0, is centred only).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from esnfed_core.data.processed import UserData
from esnfed_core.errors import DataError

# Relative slack on the last grid point: t0 + k/rate may exceed the last time by float rounding.
_GRID_EPS = 1e-9
# Grid steps a segment may be resampled to per row it holds: a time far off (a typo, the wrong
# time_unit) would otherwise fill memory with interpolated steps, unbounded by the file's size.
MAX_UPSAMPLE = 100


@dataclass(frozen=True)
class Rows:
    """One user's rows: time in seconds, class index, context index, features (rows x F)."""

    time: np.ndarray
    label: np.ndarray
    context: np.ndarray
    features: np.ndarray


def _segments(context: np.ndarray) -> list[tuple[int, int]]:
    """[start, stop) of runs of equal context."""
    cuts = np.flatnonzero(np.diff(context)) + 1
    bounds = np.concatenate([[0], cuts, [context.size]])
    return [(int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:])]


def _grid_size(time: np.ndarray, rate: float) -> int:
    return int(np.floor(float(time[-1] - time[0]) * rate * (1 + _GRID_EPS))) + 1


def resample(time: np.ndarray, features: np.ndarray, label: np.ndarray, rate: float
             ) -> tuple[np.ndarray, np.ndarray]:
    """(features, labels) on the grid t0 + k/rate over [t0, t_last] of one segment."""
    n = _grid_size(time, rate)
    grid = time[0] + np.arange(n, dtype=np.float64) / rate
    out = np.empty((n, features.shape[1]), dtype=np.float64)
    for j in range(features.shape[1]):
        out[:, j] = np.interp(grid, time, features[:, j])
    held = np.searchsorted(time, grid, side="right") - 1
    return out, label[np.clip(held, 0, time.size - 1)]


def user_windows(rows: Rows, window: int, rate: float | None) -> UserData | None:
    """The user's windows (x z-scored float32, y int8, context int8), or None if none is whole."""
    order = np.argsort(rows.time, kind="stable")
    time, label = rows.time[order], rows.label[order]
    context, feats = rows.context[order], rows.features[order]
    keep = np.concatenate([[True], np.diff(time) > 0])
    time, label, context, feats = time[keep], label[keep], context[keep], feats[keep]
    xs, ys, cs = [], [], []
    for a, b in _segments(context):
        if rate is not None and _grid_size(time[a:b], rate) > MAX_UPSAMPLE * (b - a):
            raise DataError(f"the {b - a} rows from time {time[a]:g} s to {time[b - 1]:g} s (one context) span "
                            f"{_grid_size(time[a:b], rate)} steps at {rate:g} Hz, over {MAX_UPSAMPLE} per row: "
                            "a time far off? (check the time column and time_unit)")
        f, y = (feats[a:b], label[a:b]) if rate is None else resample(time[a:b], feats[a:b], label[a:b], rate)
        w = f.shape[0] // window
        if w == 0:
            continue
        xs.append(f[: w * window].reshape(w, window, -1))
        ys.append(y[: w * window].reshape(w, window))
        cs.append(np.full(w, context[a], dtype=np.int64))
    if not xs:
        return None
    ctx = np.concatenate(cs)
    order = np.argsort(ctx, kind="stable")
    x = np.concatenate(xs)[order]
    mean = x.reshape(-1, x.shape[2]).mean(axis=0)
    std = x.reshape(-1, x.shape[2]).std(axis=0)
    x = (x - mean) / np.where(std > 0, std, 1.0)
    return UserData(x.astype(np.float32), np.concatenate(ys)[order].astype(np.int8), ctx[order].astype(np.int8))
