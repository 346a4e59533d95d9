"""Replay memory of continual training: each client's reservoir-sampling buffer over its stream (one
uniform sample, or per-context quotas: params continual.replay.policy), and the replay mini-batches
that mix current and buffered windows (the replay strategy's IP data)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import numpy as np

from esnfed_core.data.windows import concat, take
from esnfed_core.continual_settings import check_policy
from esnfed_core.validation import ParameterError, check_param
from esnfed_core.vocabulary import ReplayPolicy

Split = tuple[np.ndarray, np.ndarray]  # (x (W,T,U) float32, in memory or lazy; y (W,T) int)


def proportional_quotas(sizes: Sequence[int], capacity: int) -> list[int]:
    """Buffer slots per context under the proportional policy (FedCLIP paper, Appendix A.3).

    With S = sum(sizes) windows seen and capacity n: if S <= n every context keeps all its
    windows; otherwise context j gets floor(n·sizes[j] / S) slots, and the n − Σ floor slots
    left over go one each to the contexts with the largest remainders n·sizes[j] mod S (the
    fractional parts, compared exactly in integers), ties to the earlier context. The quotas sum
    to min(n, S) and none exceeds its context's size.
    """
    total = int(sum(sizes))
    if total <= capacity:
        return [int(s) for s in sizes]
    quotas = [capacity * int(s) // total for s in sizes]
    remainders = [capacity * int(s) % total for s in sizes]
    left = capacity - sum(quotas)
    for j in sorted(range(len(sizes)), key=lambda j: (-remainders[j], j))[:left]:
        quotas[j] += 1
    return quotas


class ReplayBuffer:
    """A client's replay memory over its stream, by reservoir sampling (``policy``).

    Every window offered gets a uniform random key, drawn once (the same draws under both
    policies). ``uniform`` (the authors' code) keeps the ``capacity`` largest keys of all windows
    seen: a uniform sample without replacement of all past windows, whose per-context shares equal
    the context sizes only in expectation. ``proportional`` (the FedCLIP paper, Appendix A.3)
    keeps, after each context, the :func:`proportional_quotas` of every context seen so far, each
    filled with that context's windows of largest keys: a stratified sample, uniform within each
    context. Keys never change, so a window leaves the buffer only when its context's quota shrinks
    below its rank, and comes back only if that quota grows again. Entries are (context, window
    index) pairs into the client's own data, in stream order.
    """

    def __init__(self, capacity: int, rng: np.random.Generator, policy: str = "uniform"):
        check_param("capacity", capacity, integer=True, low=0)
        check_policy(policy)
        self.capacity = capacity
        self.policy = str(policy)
        self._rng = rng
        self.context = np.zeros(0, np.intp)
        self.index = np.zeros(0, np.intp)
        self._key = np.zeros(0)
        self._seen: dict[int, np.ndarray] = {}  # proportional: context -> the keys of all its windows

    def __len__(self) -> int:
        return len(self.index)

    def update(self, context: int, n_windows: int) -> None:
        """Offer the ``n_windows`` windows of ``context`` to the buffer (proportional: once per context)."""
        new_key = self._rng.random(n_windows)
        if self.policy == ReplayPolicy.proportional:
            self._update_proportional(context, new_key)
            return
        ctx = np.concatenate([self.context, np.full(n_windows, context, np.intp)])
        idx = np.concatenate([self.index, np.arange(n_windows, dtype=np.intp)])
        key = np.concatenate([self._key, new_key])
        if len(key) > self.capacity:
            top = np.argsort(-key, kind="stable")[: self.capacity]
            ctx, idx, key = ctx[top], idx[top], key[top]
        self._store(ctx, idx, key)

    def _update_proportional(self, context: int, new_key: np.ndarray) -> None:
        if context in self._seen:
            raise ParameterError(f"context: {context} already offered to the replay buffer")
        self._seen[context] = new_key
        contexts = sorted(self._seen)
        quotas = proportional_quotas([len(self._seen[c]) for c in contexts], self.capacity)
        ctx, idx, key = [], [], []
        for c, q in zip(contexts, quotas):
            top = np.argsort(-self._seen[c], kind="stable")[:q]  # the context's q largest keys
            ctx.append(np.full(q, c, np.intp))
            idx.append(top.astype(np.intp))
            key.append(self._seen[c][top])
        self._store(np.concatenate(ctx), np.concatenate(idx), np.concatenate(key))

    def _store(self, ctx: np.ndarray, idx: np.ndarray, key: np.ndarray) -> None:
        order = np.lexsort((idx, ctx))  # stored in stream order: gathers read data in order
        self.context, self.index, self._key = ctx[order], idx[order], key[order]

    def gather(self, contexts: Sequence[Split], positions: np.ndarray | None = None) -> Split:
        """The windows and labels at buffer ``positions`` (all by default), grouped by context."""
        pos = np.arange(len(self)) if positions is None else np.asarray(positions)
        ctx, idx = self.context[pos], self.index[pos]
        xs, ys = [], []
        for c in np.unique(ctx):
            sel = idx[ctx == c]
            xs.append(take(contexts[c][0], sel))  # lazy when the windows are on disk
            ys.append(contexts[c][1][sel])
        if not xs:
            x0, y0 = contexts[0]
            return x0[:0], y0[:0]
        return concat(xs), np.concatenate(ys)


def concat_splits(splits: Sequence[Split]) -> Split:
    return concat([s[0] for s in splits]), np.concatenate([s[1] for s in splits])


@dataclass
class StreamClient:
    """One client's stream of contexts, its IP shuffle generator, (replay) its buffer, and how
    its splits are joined (an accelerated engine keeps them as parts it already holds)."""

    name: str
    contexts: list[Split]
    rng: np.random.Generator  # IP mini-batch shuffles
    buffer: ReplayBuffer | None
    concat: Callable[[Sequence[Split]], Split] = concat_splits


def replay_batches(client: StreamClient, t: int, batch: int, replay_batch: int,
                    shuffle: bool = False) -> Iterator[np.ndarray]:
    """One epoch of replay mini-batches: ``batch`` current + ``replay_batch`` buffer windows;
    once one side runs out the batches hold only the other.

    At t = 0 (empty buffer) the current windows are shuffled, as every IP epoch. For t > 0,
    without ``shuffle`` (the authors' replay loader) both sides are taken in order: batch k is
    current windows [k·batch, (k+1)·batch) of context t and buffer entries [k·replay_batch,
    (k+1)·replay_batch) in the buffer's stored (stream) order; ``shuffle`` permutes each side
    once per epoch with the client's generator.
    """
    x_t = client.contexts[t][0]
    if shuffle or t == 0:
        cur = client.rng.permutation(len(x_t))
        mem = client.rng.permutation(len(client.buffer))
    else:
        cur = np.arange(len(x_t))
        mem = np.arange(len(client.buffer))
    n_batches = math.ceil(len(cur) / batch)
    if replay_batch > 0:
        n_batches = max(n_batches, math.ceil(len(mem) / replay_batch))
    for k in range(n_batches):
        parts = []
        ci = cur[k * batch : (k + 1) * batch]
        if len(ci):
            parts.append(x_t[ci])
        mi = mem[k * replay_batch : (k + 1) * replay_batch] if replay_batch > 0 else mem[:0]
        if len(mi):
            parts.append(np.asarray(client.buffer.gather(client.contexts, mi)[0]))
        yield parts[0] if len(parts) == 1 else np.concatenate(parts)


