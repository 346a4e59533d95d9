"""Scores of trained models on sets of users (PROTOCOL §3, §6): pooled per-step accuracy, the
correct-step counts of the continual models on every context, and activation densities.

Accuracy is always pooled over every time step of every window of the evaluated users, never a
mean of per-user accuracies. Evaluation streams batch by batch (memory bounded by the batch).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from esnfed_core.data.processed import UserData
from esnfed_core.readout import Counts, evaluate, grid_scores, predict, random_baseline
from esnfed_core.metrics import ActivationHistogram, group_histograms
from esnfed_core.reservoir import Reservoir, iter_states

__all__ = ["accuracy", "step_predictions", "pooled_counts", "random_accuracy", "context_matrix",
    "ActivationDensities", "activation_densities", "activation_density"]


def pooled_counts(
    res: Reservoir, users: Sequence[UserData], readouts: np.ndarray, batch_size: int = 256
) -> Counts:
    """Correct/total steps of each readout of ``readouts`` ((L, C, N) or (C, N)) over all users."""
    grid = readouts if readouts.ndim == 3 else readouts[None]
    total = Counts(np.zeros(len(grid), np.int64), 0)
    for u in users:
        if u.windows:
            total = total + evaluate(res, u.x, u.y, grid, batch_size)
    return total


def accuracy(res: Reservoir, readout: np.ndarray, users: Sequence[UserData], batch_size: int = 256) -> float:
    """Share of correctly classified time steps of one readout (C, N), pooled over ``users``."""
    return float(pooled_counts(res, users, readout, batch_size).accuracy[0])


def step_predictions(res: Reservoir, readout: np.ndarray, x: np.ndarray, batch_size: int = 256) -> np.ndarray:
    """Per-step class predictions (W, T) int64 of one readout (C, N) — or (C, N+1), the last column
    the bias — on windows ``x`` (W, T, U), streamed batch by batch: the argmax that
    :func:`~esnfed_core.readout.count_correct` scores (a one-readout grid), so that the share of
    predictions equal to the labels is :func:`accuracy`'s value for the same batches."""
    out = np.empty(x.shape[:2], np.int64)
    grid = np.asarray(readout)[None]
    for sb in iter_states(res, x, batch_size):
        t_len, b, n = sb.states.shape
        out[sb.index] = grid_scores(sb.states.reshape(t_len * b, n), grid).argmax(axis=1).reshape(t_len, b).T
    return out


def random_accuracy(users: Sequence[UserData], n_classes: int, seed: int) -> float:
    """The random baseline: one uniform draw per time step of the users' labels, concatenated in
    the given user order and flattened row-major (window by window, step by step)."""
    labels = np.concatenate([u.y.reshape(-1) for u in users]) if users else np.zeros(0, np.int8)
    return float(random_baseline(labels, n_classes, seed).accuracy[0])


def context_matrix(
    reservoirs: Sequence[Reservoir],
    readouts: Sequence[np.ndarray],
    users: Sequence[UserData],
    batch_size: int = 256,
) -> tuple[np.ndarray, np.ndarray]:
    """Continual evaluation: ``correct[i, j]`` = correct steps of the model after context i on
    context j of ``users``; ``total[j]`` = steps of context j. Shapes (T, T) and (T,).

    Each model runs once over all windows of the users (full batches whatever the context
    sizes); correct steps are then summed per window and binned by the window's context.
    """
    n_ctx = len(reservoirs)
    if len(readouts) != n_ctx:
        raise ValueError(f"context_matrix: {n_ctx} reservoirs but {len(readouts)} readouts")
    correct = np.zeros((n_ctx, n_ctx), np.int64)
    total = np.zeros(n_ctx, np.int64)
    if not users:
        return correct, total
    pooled, total = pooled_contexts(users, n_ctx)
    for i, (res, w) in enumerate(zip(reservoirs, readouts)):
        correct[i] = _correct_by_context(res, w, pooled, n_ctx, batch_size)
    return correct, total


def pooled_contexts(users: Sequence[UserData], n_ctx: int) -> tuple[UserData, np.ndarray]:
    """``users`` concatenated, and the steps of each of their ``n_ctx`` contexts (n_ctx,); a
    ValueError when a window's context is outside 0..n_ctx − 1 (context_matrix's data check)."""
    pooled = UserData.concat(list(users))
    if pooled.windows and (pooled.context.min() < 0 or pooled.context.max() >= n_ctx):
        raise ValueError(f"context_matrix: window contexts outside 0..{n_ctx - 1}")
    total = np.bincount(pooled.context, minlength=n_ctx)[:n_ctx].astype(np.int64) * pooled.x.shape[1]
    return pooled, total


def _correct_by_context(res: Reservoir, readout: np.ndarray, data: UserData, n_ctx: int,
                        batch_size: int) -> np.ndarray:
    """Correct steps of one model per context of ``data``'s windows: (n_ctx,). A call per model,
    so the last state batch is released before the next model's buffer is allocated."""
    correct = np.zeros(n_ctx, np.int64)
    for sb in iter_states(res, data.x, batch_size):
        per_window = (predict(sb.states, readout) == data.y[sb.index]).sum(axis=1)
        correct += np.bincount(data.context[sb.index], weights=per_window,
                               minlength=n_ctx)[:n_ctx].astype(np.int64)
    return correct


@dataclass(frozen=True)
class ActivationDensities:
    """Densities of post-leak states on fixed bins over [-1, 1] (the papers' activation figures):
    ``per_user`` (M, U, T, bins) of each model on each user's windows of each context, ``pooled``
    (M, T, bins) over the users' windows together; NaN where a user has no window of a context.
    ``totals``: each model's per-unit histogram of every user and context together (its fit to the
    IP target: ``target_kl``)."""

    edges: np.ndarray
    per_user: np.ndarray
    pooled: np.ndarray
    totals: tuple[ActivationHistogram, ...] = ()

    def target_kl(self, mu: float, sigma: float) -> tuple[list[float], list[float]]:
        """Each model's KL divergence to N(μ, σ²) of its states on every user and context: of all
        units' values pooled (the density the figures draw; ActivationHistogram.pooled_kl), and
        of each unit's, averaged over the units (what IP minimises; mean_kl). NaN without data."""
        return ([h.pooled_kl(mu, sigma) for h in self.totals], [h.mean_kl(mu, sigma) for h in self.totals])


def activation_densities(
    reservoirs: Sequence[Reservoir], users: Sequence[UserData], n_contexts: int, bins: int,
    batch_size: int = 256,
) -> ActivationDensities:
    """Density of every unit's post-leak states of each reservoir in ``reservoirs`` (the final one,
    or a continual model after each context) on each user and context of ``users``: each reservoir
    runs once over the users' windows together, binned by (user, context)."""
    if not users:
        return densities_of([[] for _ in reservoirs], n_contexts, bins)
    pooled = UserData.concat(list(users))
    owner = np.repeat(np.arange(len(users)), [u.windows for u in users])
    inside = (pooled.context >= 0) & (pooled.context < n_contexts)
    if not inside.all():  # a window of no listed context is in none of the densities
        pooled, owner = pooled.select(inside), owner[inside]
    groups = owner * n_contexts + pooled.context
    hists = [group_histograms(res, pooled.x, groups, len(users) * n_contexts, bins=bins, batch_size=batch_size)
             for res in reservoirs]
    return densities_of([[h[i * n_contexts:(i + 1) * n_contexts] for i in range(len(users))] for h in hists],
                        n_contexts, bins)


def densities_of(hists: Sequence[Sequence[Sequence[ActivationHistogram]]], n_contexts: int,
                 bins: int) -> ActivationDensities:
    """ActivationDensities of per-unit histograms ``hists[model][user][context]`` (a context a user
    has no window of: an empty histogram, NaN density); the pooled density sums the users'."""
    edges = np.linspace(-1.0, 1.0, bins + 1)
    per_user, pooled, totals = [], [], []
    for rows in hists:
        sums: list[ActivationHistogram | None] = [None] * n_contexts
        for row in rows:
            for j, hist in enumerate(row):
                edges = hist.edges
                sums[j] = hist if sums[j] is None else sums[j] + hist
        per_user.append([[h.density() for h in row] for row in rows])
        pooled.append([h.density() if h is not None else np.full(bins, np.nan) for h in sums])
        found = [h for h in sums if h is not None]
        totals.append(sum(found[1:], found[0]) if found else None)
    n_models, n_users = len(hists), len(hists[0]) if hists else 0
    return ActivationDensities(
        np.asarray(edges, np.float64),
        np.asarray(per_user, np.float64).reshape(n_models, n_users, n_contexts, bins),
        np.asarray(pooled, np.float64).reshape(n_models, n_contexts, bins),
        tuple(ActivationHistogram(np.asarray(edges, np.float64), np.zeros((1, bins), np.int64))
              if t is None else t for t in totals),
    )


def activation_density(
    res: Reservoir, users: Sequence[UserData], n_contexts: int, bins: int, batch_size: int = 256
) -> tuple[np.ndarray, np.ndarray]:
    """Density of the post-leak states of ``res`` over every unit, step and window of each
    context of ``users`` on ``bins`` fixed bins over [-1, 1]: (edges (bins+1,), density (T, bins))."""
    dens = activation_densities([res], users, n_contexts, bins, batch_size)
    return dens.edges, dens.pooled[0]
