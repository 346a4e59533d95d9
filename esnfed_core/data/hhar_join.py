"""One HHAR device copy's accelerometer and gyroscope rows joined and decimated: the nearest as-of
join on Arrival_Time (:func:`asof_nearest`, :func:`join_copy`), the choice between a model's two
physical copies (:func:`choose_copy`) and index decimation to the target rate
(:func:`decimation_indices`, :func:`kept_rows`). Pure functions over arrays."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from esnfed_core.data.hhar_csv import Stream

NATIVE = "native"  # target_rate: no decimation


def asof_nearest(left: np.ndarray, right: np.ndarray, tolerance: float) -> np.ndarray:
    """For each sorted ``left`` time, the index of the nearest sorted ``right`` time within
    ``tolerance`` (inclusive), or -1. Ties between an earlier and a later candidate go to the
    earlier one, and among equal times to the last (backward) or first (forward) row — the rules
    of ``pandas.merge_asof(direction="nearest")``."""
    n = right.size
    if n == 0:
        return np.full(left.size, -1, dtype=np.int64)
    back = np.searchsorted(right, left, side="right") - 1
    fwd = np.searchsorted(right, left, side="left")
    bdiff = np.where(back >= 0, left - right[np.maximum(back, 0)], np.inf)
    fdiff = np.where(fwd < n, right[np.minimum(fwd, n - 1)] - left, np.inf)
    bok = bdiff <= tolerance
    fok = fdiff <= tolerance
    take_fwd = fok & (~bok | (fdiff < bdiff))
    return np.where(take_fwd, fwd, np.where(bok, back, -1)).astype(np.int64)


@dataclass
class Joined:
    """One device copy after the join: time-sorted rows of 6 columns (NaN where a sensor is
    missing) and the activity (-1 for `null`)."""

    time: np.ndarray
    values: np.ndarray  # float64 (n, 6): acc x, y, z, gyro x, y, z
    label: np.ndarray  # int8

    def nan_fraction(self) -> float:
        """The worst column's missing fraction over the 6 signals and the activity (1.0 if empty)."""
        n = self.time.size
        if n == 0:
            return 1.0
        per_col = np.concatenate([np.isnan(self.values).sum(axis=0), [(self.label < 0).sum()]])
        return float(per_col.max() / n)


def join_copy(acc: Stream, gyro: Stream, tolerance: float) -> Joined:
    """Accelerometer rows get the nearest gyroscope values within ``tolerance``; gyroscope rows
    with no accelerometer row within it are appended; then all rows are stably time-sorted."""
    acc, gyro = acc.sorted(), gyro.sorted()
    m = asof_nearest(acc.time, gyro.time, tolerance)
    acc_rows = np.full((len(acc), 6), np.nan)
    acc_rows[:, :3] = acc.values
    hit = m >= 0
    acc_rows[hit, 3:] = gyro.values[m[hit]]
    lonely = asof_nearest(gyro.time, acc.time, tolerance) < 0
    gyro_rows = np.full((int(lonely.sum()), 6), np.nan)
    gyro_rows[:, 3:] = gyro.values[lonely]
    time = np.concatenate([acc.time, gyro.time[lonely]])
    order = np.argsort(time, kind="stable")
    return Joined(time[order], np.concatenate([acc_rows, gyro_rows])[order],
                  np.concatenate([acc.label, gyro.label[lonely]])[order].astype(np.int8))


def choose_copy(copies: dict[str, Joined]) -> tuple[str, dict[str, float]]:
    """The copy whose worst column has the lowest NaN fraction; ties go to the first name."""
    fractions = {name: copies[name].nan_fraction() for name in sorted(copies)}
    best = min(fractions, key=lambda name: fractions[name])  # min keeps the first of equals
    return best, fractions


def decimation_indices(n: int, rate: float, target: float) -> np.ndarray:
    """Rows round(k·rate/target) for the k with k·rate/target below n − 1, as the authors'
    ``np.around(np.arange(0, len - 1, rate / target))``: the bound applies before rounding (numpy
    half-to-even), so a last position just below n − 1 that rounds up keeps row n − 1."""
    if n <= 1:
        return np.zeros(0, dtype=np.int64)
    return np.around(np.arange(0, n - 1, rate / target)).astype(np.int64)


def kept_rows(n: int, rate: float, target: float | str) -> np.ndarray:
    """The rows decimation keeps of ``n`` joined rows: every row for ``target`` ``native``, else
    :func:`decimation_indices`."""
    return np.arange(n, dtype=np.int64) if target == NATIVE else decimation_indices(n, rate, target)
