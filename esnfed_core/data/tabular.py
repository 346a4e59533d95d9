"""From one user's rows of a table (time, label code, context code, features) to contract windows:
resampling to a target rate, windowing, per-user z-score. Pure array code, no I/O: the stage
esnfed_stages/data/import_data.py reads the files and calls :func:`user_windows`.

Semantics (docs/data-contract.md, "Importing your own data"):

* rows are sorted by time (stable); of rows with the same time, the first is kept;
* rows are cut into runs of one context (consecutive rows with the same context in time), and a
  run is cut again wherever two consecutive rows lie more than ``max_gap`` seconds apart (a gap:
  the sensor was off; default :func:`default_max_gap`), so each segment holds one context and no
  gap; the time inside a gap is not imported (never interpolated);
* missing feature values (NaN, :func:`fill_missing`): with ``missing="drop"`` each row holding
  one is removed; with ``"interpolate"`` each is interpolated linearly in time from its channel's
  neighbours in its segment where the run of them spans at most ``max_gap`` (the interval from
  the value before to the value after), else its row is removed, as are rows missing a value at
  a segment's start or end (no extrapolation); the segments are then cut again as above, so a
  hole over ``max_gap`` cuts the recording exactly as a gap in time does;
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
from esnfed_core.quote import quote
from esnfed_core.data.import_options import MISSING

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
    duration (s) of the longest segment and ``span`` of all segments together; ``interpolated``
    missing values filled in and ``dropped`` rows removed for a missing value (fill_missing)."""

    max_gap: float
    gaps: int = 0
    gap_seconds: float = 0.0
    lost_windows: int = 0
    longest: float = 0.0
    span: float = 0.0
    interpolated: int = 0
    dropped: int = 0


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


def fill_missing(time: np.ndarray, context: np.ndarray, features: np.ndarray, max_gap: float, missing: str
                 ) -> tuple[np.ndarray, np.ndarray]:
    """(rows kept, features) of one user's sorted, distinct rows whose features may hold NaN (a
    missing value), as ``missing`` says (module doc): ``"drop"`` keeps the complete rows;
    ``"interpolate"`` fills each missing value in from its channel's values before and after it in
    its segment (_runs: one context, no gap over ``max_gap``) when they lie at most ``max_gap``
    seconds apart, and keeps the rows so filled in. A row missing a value that is not filled in is
    not kept: removing the rows of a longer hole leaves a gap over ``max_gap``, which _runs cuts."""
    nan = np.isnan(features)
    if not nan.any():
        return np.ones(time.size, dtype=bool), features
    if missing not in MISSING[1:]:
        raise DataError(f"a feature value is missing at time {time[np.flatnonzero(nan.any(axis=1))[0]]:g} s and "
                        f"missing is {quote(missing)} (expected {' or '.join(MISSING[1:])} to import it)")
    if missing == "drop":
        return ~nan.any(axis=1), features
    out, keep = features.copy(), np.ones(time.size, dtype=bool)
    for a, b in (segment for run in _runs(time, context, max_gap) for segment in run):
        for j in np.flatnonzero(nan[a:b].any(axis=0)):
            holes, known = np.flatnonzero(nan[a:b, j]) + a, np.flatnonzero(~nan[a:b, j]) + a
            after = np.searchsorted(known, holes)  # the next known value (its index in known)
            inside = (after > 0) & (after < known.size)
            fill = inside.copy()
            fill[inside] = time[known[after[inside]]] - time[known[after[inside] - 1]] <= max_gap
            if fill.any():
                out[holes[fill], j] = np.interp(time[holes[fill]], time[known], features[known, j])
            keep[holes[~fill]] = False
    return keep, out


# Grid sizes are capped here (far past any MAX_UPSAMPLE bound): a time of 1e300 s would make a
# 300-digit int, or none at all (an infinite float).
_GRID_CAP = 2 ** 62


def _grid_size(time: np.ndarray, rate: float) -> int:
    steps = float(time[-1] - time[0]) * rate * (1 + _GRID_EPS)
    return int(np.floor(steps)) + 1 if steps < _GRID_CAP else _GRID_CAP


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


def user_windows(rows: Rows, window: int, rate: float | None, max_gap: float | None = None,
                 missing: str = "refuse") -> tuple[UserData | None, Cuts]:
    """The user's windows (x z-scored float32, y int8, context int8), or None if none is whole, and
    what its gaps cut (``max_gap`` seconds; None: :func:`default_max_gap`) and its missing feature
    values did (``missing``, :func:`fill_missing`; "refuse": a NaN feature is a DataError)."""
    order = np.argsort(rows.time, kind="stable")
    time, label = rows.time[order], rows.label[order]
    context, feats = rows.context[order], rows.features[order]
    keep = np.concatenate([[True], np.diff(time) > 0])
    time, label, context, feats = time[keep], label[keep], context[keep], feats[keep]
    limit = default_max_gap(time, rate) if max_gap is None else float(max_gap)  # of every row's time
    nan = np.isnan(feats)
    keep, feats = fill_missing(time, context, feats, limit, missing)
    interpolated, dropped = int(nan[keep].sum()), int(keep.size - keep.sum())
    time, label, context, feats = time[keep], label[keep], context[keep], feats[keep]
    xs, ys, cs = [], [], []
    gaps, gap_seconds, lost, longest, span = 0, 0.0, 0, 0.0, 0.0
    for run in _runs(time, context, limit) if time.size else []:  # every row dropped: no segment
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
                raise DataError(f"the {b - a} rows from time {time[a]:.6g} s to {time[b - 1]:.6g} s (one context, "
                                f"no gap over {limit:.6g} s) span {np.floor(float(time[b - 1] - time[a]) * rate) + 1:.6g} steps at {rate:.6g} Hz, over "
                                f"{MAX_UPSAMPLE} per "
                                "row: a time far off? (check the time column and time_unit)")
            f, y = (feats[a:b], label[a:b]) if rate is None else resample(time[a:b], feats[a:b], label[a:b], rate)
            xs.append(f[: w * window].reshape(w, window, -1))
            ys.append(y[: w * window].reshape(w, window))
            cs.append(np.full(w, context[a], dtype=np.int64))
        lost += steps // window
    cuts = Cuts(limit, gaps, gap_seconds, lost, longest, span, interpolated, dropped)
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
