"""From one user's rows of a table (time, label code, context code, features) to contract windows:
resampling to a target rate, windowing, per-user z-score. Pure array code, no I/O: the stage
esnfed_stages/import_data.py reads the files and calls :func:`user_windows`.

Semantics (docs/data-contract.md, "Importing your own data"):

* rows are sorted by time (stable); of rows with the same time, the first is kept;
* rows are cut into runs of one context (consecutive rows with the same context in time), and a
  run is cut again wherever two consecutive rows lie more than ``max_gap`` seconds apart (a gap:
  the sensor was off; default :func:`default_max_gap`), so each segment holds one context and no
  gap; the time inside a gap is not imported (never interpolated);
* with a ``rate``, each segment is resampled on the grid t0 + k/rate (t0 = its first time, up to its
  last time): features linearly interpolated, label and context held from the last row at or
  before each grid time; without a rate the rows are taken as they are; a segment whose grid
  would exceed :data:`MAX_UPSAMPLE` steps per row is an error (a time far off);
* each segment is cut into consecutive, non-overlapping windows of ``window`` steps (a shorter
  tail is dropped), so no window spans two contexts or a gap;
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
# (A time far off is a gap, cut at max_gap, unless max_gap is set far above the sampling interval.)
MAX_UPSAMPLE = 100
# Default max_gap (default_max_gap): a gap is an interval over GAP_INTERVALS sampling intervals and
# over MIN_GAP seconds. Five intervals: linear interpolation over a few missed samples (a dropped
# packet, clock jitter) is harmless, over more it invents the signal. At least one second: at
# wearable rates (25-100 Hz) five intervals are 50-200 ms, and cutting there at every hiccup would
# drop a window's tail each time, while a second of straight line is still below the length of one
# movement; slower data (1 Hz heart rate) gets five of its own intervals.
GAP_INTERVALS = 5
MIN_GAP = 1.0


@dataclass(frozen=True)
class Rows:
    """One user's rows: time in seconds, class index, context index, features (rows x F)."""

    time: np.ndarray
    label: np.ndarray
    context: np.ndarray
    features: np.ndarray


def default_max_gap(time: np.ndarray, rate: float | None) -> float:
    """The gap threshold (seconds) of one user's sorted, distinct times when ``max_gap`` is not set:
    GAP_INTERVALS sampling intervals (the median interval between its rows, or 1/rate if longer),
    and at least MIN_GAP."""
    steps = np.diff(time)
    interval = float(np.median(steps)) if steps.size else 0.0
    if rate is not None:
        interval = max(interval, 1.0 / rate)
    return max(MIN_GAP, GAP_INTERVALS * interval)


@dataclass(frozen=True)
class Cuts:
    """What one user's gaps did (user_windows): ``gaps`` intervals over ``max_gap`` seconds inside a
    context, ``gap_seconds`` of time in them (not imported), ``lost_windows`` whole windows the
    segments' steps would fill without the cuts but no longer do (their tails), ``longest`` the
    duration (s) of the longest segment and ``span`` of all segments together."""

    max_gap: float
    gaps: int = 0
    gap_seconds: float = 0.0
    lost_windows: int = 0
    longest: float = 0.0
    span: float = 0.0


def _runs(time: np.ndarray, context: np.ndarray, max_gap: float) -> list[list[tuple[int, int]]]:
    """The [start, stop) segments of each run of equal context, cut at gaps over ``max_gap``."""
    ctx_cuts = np.flatnonzero(np.diff(context)) + 1
    gap_cuts = np.flatnonzero(np.diff(time) > max_gap) + 1
    bounds = np.concatenate([[0], ctx_cuts, [context.size]]).tolist()
    runs = []
    for a, b in zip(bounds[:-1], bounds[1:]):
        inner = gap_cuts[np.searchsorted(gap_cuts, a, side="right"):np.searchsorted(gap_cuts, b)].tolist()
        cuts = [a, *inner, b]
        runs.append(list(zip(cuts[:-1], cuts[1:])))
    return runs


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


def user_windows(rows: Rows, window: int, rate: float | None, max_gap: float | None = None
                 ) -> tuple[UserData | None, Cuts]:
    """The user's windows (x z-scored float32, y int8, context int8), or None if none is whole, and
    what its gaps cut (``max_gap`` seconds; None: :func:`default_max_gap`)."""
    order = np.argsort(rows.time, kind="stable")
    time, label = rows.time[order], rows.label[order]
    context, feats = rows.context[order], rows.features[order]
    keep = np.concatenate([[True], np.diff(time) > 0])
    time, label, context, feats = time[keep], label[keep], context[keep], feats[keep]
    limit = default_max_gap(time, rate) if max_gap is None else float(max_gap)
    xs, ys, cs = [], [], []
    gaps, gap_seconds, lost, longest, span = 0, 0.0, 0, 0.0, 0.0
    for run in _runs(time, context, limit):
        gaps += len(run) - 1
        gap_seconds += sum(float(time[a] - time[a - 1]) for a, _ in run[1:])
        steps = 0  # of the run's segments together, for the windows its cuts lose
        for a, b in run:
            duration = float(time[b - 1] - time[a])
            longest, span = max(longest, duration), span + duration
            n = b - a if rate is None else _grid_size(time[a:b], rate)
            steps += n
            w = n // window
            lost -= w
            if w == 0:  # before resampling: many short segments (a small max_gap) stay cheap
                continue
            if rate is not None and n > MAX_UPSAMPLE * (b - a):
                raise DataError(f"the {b - a} rows from time {time[a]:g} s to {time[b - 1]:g} s (one context, no "
                                f"gap over {limit:g} s) span {n} steps at {rate:g} Hz, over {MAX_UPSAMPLE} per "
                                "row: a time far off? (check the time column and time_unit)")
            f, y = (feats[a:b], label[a:b]) if rate is None else resample(time[a:b], feats[a:b], label[a:b], rate)
            xs.append(f[: w * window].reshape(w, window, -1))
            ys.append(y[: w * window].reshape(w, window))
            cs.append(np.full(w, context[a], dtype=np.int64))
        lost += steps // window
    cuts = Cuts(limit, gaps, gap_seconds, lost, longest, span)
    if not xs:
        return None, cuts
    ctx = np.concatenate(cs)
    order = np.argsort(ctx, kind="stable")
    x = np.concatenate(xs)[order]
    mean = x.reshape(-1, x.shape[2]).mean(axis=0)
    std = x.reshape(-1, x.shape[2]).std(axis=0)
    x = (x - mean) / np.where(std > 0, std, 1.0)
    return (UserData(x.astype(np.float32), np.concatenate(ys)[order].astype(np.int8), ctx[order].astype(np.int8)),
            cuts)
