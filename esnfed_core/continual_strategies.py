"""The continual strategies (PROTOCOL §5): :class:`Naive` (a fixed IP budget per context, (g, b)
carried over), :class:`Replay` (naive with a per-client replay buffer) and :class:`Joint` (reset
per context, train on every context so far with early stopping, :class:`JointStopping`), and
:func:`make_strategy`, the strategy of a method id's suffix."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from esnfed_core.continual_federation import ContinualStrategy
from esnfed_core.continual_settings import BUDGET, CONTINUAL_BOUNDS, JOINT_MAX_ROUNDS, check_policy
from esnfed_core.quote import quote
from esnfed_core.replay import ReplayBuffer, replay_batches
from esnfed_core.reservoir import Reservoir
from esnfed_core.validation import ParameterError
from esnfed_core.vocabulary import STRATEGIES


@dataclass(frozen=True)
class Naive(ContinualStrategy):
    """``budget`` IP rounds on D_t per context, (g, b) carried over; ridge on D_t."""

    budget: int
    name = "naive"

    def __post_init__(self) -> None:
        BUDGET.check("budget", self.budget)

    def train_context(self, fed, res, cur, t, validation, result):
        part = fed.participants(t, self)
        for _ in range(self.budget):
            cur = fed.ip_round(cur, part)
        return cur, fed.readout(cur, part), self.budget


@dataclass(frozen=True)
class Replay(Naive):
    """As naive, with a per-client reservoir-sampling buffer of capacity max(1, ⌊fraction · the
    client's windows over all contexts⌋), updated after each context (``policy``: one uniform
    sample of all past windows, or per-context quotas in proportion to their sizes, see
    :class:`esnfed_core.replay.ReplayBuffer`); mini-batches of
    ``ip.batch_size`` current + ``batch`` buffer windows, in order for t > 0 unless ``shuffle``
    (see :func:`esnfed_core.replay.replay_batches`); FedAvg weight |D_t,c| + |M_t,c|; ridge on
    D_t ∪ M_t."""

    fraction: float = 0.05
    batch: int = 32
    shuffle: bool = False
    policy: str = "uniform"
    name = "replay"

    def __post_init__(self) -> None:
        super().__post_init__()
        CONTINUAL_BOUNDS["replay_fraction"].check("replay_fraction", self.fraction)
        CONTINUAL_BOUNDS["replay_batch"].check("replay_batch", self.batch)
        if not isinstance(self.shuffle, bool):
            raise ParameterError(f"replay_shuffle: expected true or false, got {quote(self.shuffle)}")
        check_policy(self.policy)

    def buffer(self, n_windows, seed):
        return ReplayBuffer(max(1, int(self.fraction * n_windows)), np.random.default_rng([seed, 1]), self.policy)

    def data(self, client, t):
        if len(client.buffer):
            return client.concat([client.contexts[t], client.buffer.gather(client.contexts)])
        return client.contexts[t]

    def local_fit(self, fed, client, t, split):
        def fit(start: Reservoir) -> Reservoir:
            for _ in range(fed.epochs):
                start = fed.engine.ip_pass(
                    start, replay_batches(client, t, fed.ip.batch_size, self.batch, self.shuffle), fed.ip)
            return start
        return fit

    def end_context(self, client, t):
        """Offer context ``t``'s windows to the client's buffer (every client, even one that sat
        the context out: it offers none)."""
        client.buffer.update(t, len(client.contexts[t][0]))

    def train_context(self, fed, res, cur, t, validation, result):
        result.buffer_sizes.append([len(c.buffer) for c in fed.clients])
        out = super().train_context(fed, res, cur, t, validation, result)
        for c in fed.clients:
            self.end_context(c, t)
        return out


@dataclass(frozen=True)
class Joint(ContinualStrategy):
    """Per context, reset (g, b) = (1, 0), then loop {one IP round/epoch on D_0..D_t, ridge on
    D_0..D_t, stream accuracy on the validation contexts 0..t}; keep the best; stop after
    ``patience`` rounds without a strict improvement (None: 3 federated, 5 centralised), or at
    ``max_rounds`` when one is set (None, the default: no cap, as PROTOCOL §5)."""

    patience: int | None = None
    max_rounds: int | None = JOINT_MAX_ROUNDS
    name = "joint"
    needs_validation = True

    def __post_init__(self) -> None:
        if self.patience is not None:
            CONTINUAL_BOUNDS["patience"].check("patience", self.patience)
        if self.max_rounds is not None:
            CONTINUAL_BOUNDS["max_joint_rounds"].check("max_joint_rounds", self.max_rounds)

    def data(self, client, t):
        return client.concat(client.contexts[: t + 1])

    def patience_for(self, federated: bool) -> int:
        """The rounds without a strict improvement that stop a context (None: 3 federated, 5
        centralised)."""
        return (3 if federated else 5) if self.patience is None else self.patience

    def rounds(self) -> Iterable[int]:
        """A context's round indices: 0, 1, ... up to ``max_rounds`` (None: without end, early
        stopping ends them)."""
        return itertools.count() if self.max_rounds is None else range(self.max_rounds)

    def train_context(self, fed, res, cur, t, validation, result):
        part = fed.participants(t, self)
        cand = res.with_ip(np.ones(res.units), np.zeros(res.units))
        best: tuple[Reservoir, np.ndarray, int] | None = None
        stop = JointStopping(self.patience_for(fed.federated))
        for r in self.rounds():
            cand = fed.ip_round(cand, part)
            w = fed.readout(cand, part)
            # Each validation user's contexts 0..t on their own (a federated server's evaluation
            # nodes count so too); the integer counts are then pooled.
            counts = [fed.engine.counts(cand, x, y, w) for user in validation for x, y in user[: t + 1] if len(y)]
            if stop.update(pooled_accuracy(sum(int(c.correct[0]) for c in counts), sum(c.total for c in counts))):
                best = (cand, w, r + 1)
            if stop.done:
                break
        result.joint_trace.append(stop.trace)
        result.joint_capped.append(not stop.done)
        return best


def pooled_accuracy(correct: int, total: int) -> float:
    """Joint's validation stream accuracy at a round: correct steps over all steps of the
    validation contexts so far, pooled (NaN without steps)."""
    return correct / total if total else float("nan")


@dataclass
class JointStopping:
    """Joint's early stopping over one context's rounds (:meth:`Joint.train_context`, and a server
    that gathers the validation counts itself, esnfed_flower/fedclip_joint.py): the first round is
    the best so far, a later one when its accuracy is strictly higher; :attr:`done` after
    ``patience`` rounds in a row without one (the caller stops at its max rounds too, if set)."""

    patience: int
    trace: list[float] = field(default_factory=list)  # the accuracy of every round so far
    best: int = 0  # rounds up to the best one (1-based; 0 before the first)
    since: int = 0  # rounds since the best

    def update(self, acc: float) -> bool:
        """Record the next round's accuracy; True when it is the new best."""
        self.trace.append(acc)
        if self.best == 0 or acc > self.trace[self.best - 1]:
            self.best, self.since = len(self.trace), 0
            return True
        self.since += 1
        return False

    @property
    def done(self) -> bool:
        return self.since >= self.patience


def make_strategy(name: str, *, budget: int = 0, replay_fraction: float = 0.05, replay_batch: int = 32,
                  replay_shuffle: bool = False, replay_policy: str = "uniform", patience: int | None = None,
                  max_joint_rounds: int | None = JOINT_MAX_ROUNDS) -> ContinualStrategy:
    """The strategy called ``name`` (a method id's suffix) with the settings that concern it."""
    if name == "naive":
        return Naive(budget)
    if name == "replay":
        return Replay(budget, replay_fraction, replay_batch, replay_shuffle, replay_policy)
    if name == "joint":
        return Joint(patience, max_joint_rounds)
    raise ParameterError(f"strategy: expected one of {', '.join(STRATEGIES)}, got {quote(name)}")
