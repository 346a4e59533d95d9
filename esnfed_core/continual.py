"""Continual intrinsic plasticity over a stream of contexts: CLIP (centralised) and FedCLIP
(federated) with the naive, replay and joint strategies (PROTOCOL §5), evaluated after each context.

Centralised runs use the federated code path with one client and no messages, so CLIP equals
FedCLIP on a single client with one local epoch per round.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Iterator, Sequence

import numpy as np

from esnfed_core import metrics
from esnfed_core.data.windows import Windows, concat, take
from esnfed_core.federated import Client, incfed
from esnfed_core.messages import CommLedger
from esnfed_core.plasticity import (
    IPConfig,
    broadcast_reservoir,
    client_names_or_default,
    fedip_round,
    ip_epoch,
    ip_pass,
)
from esnfed_core.readout import LAMBDA, check_solver
from esnfed_core.readout import evaluate as evaluate_counts
from esnfed_core.reservoir import Reservoir
from esnfed_core.validation import COUNT, Bound, ParameterError, check_param
from esnfed_core.vocabulary import STRATEGIES

# run_continual's ranges (params.yaml continual.* is checked against them).
CONTINUAL_BOUNDS = {"lambda": LAMBDA, "replay_fraction": Bound(low=0.0, high=1.0, low_open=True),
                    "replay_batch": Bound(integer=True, low=0), "patience": COUNT, "max_joint_rounds": COUNT}

Split = tuple[np.ndarray, np.ndarray]  # (x (W,T,U) float32, in memory or lazy; y (W,T) int)

ALGORITHM = "fedclip"  # ledger name of FedCLIP's (g, b) messages; readout messages are "incfed"
# Joint's safety cap on IP rounds (or epochs) per context when early stopping has not fired:
# patience (3 or 5) normally stops it long before.
JOINT_MAX_ROUNDS = 50


@dataclass(frozen=True)
class ContinualResult:
    reservoirs: list[Reservoir]  # after each context
    readouts: list[np.ndarray]  # (C,N) after each context
    correct: dict[str, np.ndarray]  # eval set name -> (T_ctx, T_ctx) int: model after i on context j
    total: dict[str, np.ndarray]  # eval set name -> (T_ctx,) int: steps of context j
    ip_rounds: list[int] = field(default_factory=list)  # IP rounds/epochs behind each model
    joint_trace: list[list[float]] = field(default_factory=list)  # joint: validation stream acc per round
    buffer_sizes: list[list[int]] = field(default_factory=list)  # replay: |M_t,c| used at context t

    def stream_accuracy(self, name: str) -> np.ndarray:
        """(T_ctx,): after context i, accuracy pooled over contexts 0..i of eval set ``name``."""
        return metrics.stream_accuracy(self.correct[name], self.total[name])

    def accuracy_matrix(self, name: str) -> np.ndarray:
        """(T_ctx, T_ctx): accuracy of the model after context i on context j."""
        return metrics.accuracy_matrix(self.correct[name], self.total[name])


class ReplayBuffer:
    """A client's replay memory, filled by reservoir sampling over its whole stream.

    Every window seen gets a uniform random key and the buffer keeps the ``capacity`` largest
    keys: a uniform sample without replacement of all past windows, whatever the context sizes.
    Entries are (context, window index) pairs into the client's own data.
    """

    def __init__(self, capacity: int, rng: np.random.Generator):
        check_param("capacity", capacity, integer=True, low=0)
        self.capacity = capacity
        self._rng = rng
        self.context = np.zeros(0, np.intp)
        self.index = np.zeros(0, np.intp)
        self._key = np.zeros(0)

    def __len__(self) -> int:
        return len(self.index)

    def update(self, context: int, n_windows: int) -> None:
        """Offer the ``n_windows`` windows of ``context`` to the buffer."""
        ctx = np.concatenate([self.context, np.full(n_windows, context, np.intp)])
        idx = np.concatenate([self.index, np.arange(n_windows, dtype=np.intp)])
        key = np.concatenate([self._key, self._rng.random(n_windows)])
        if len(key) > self.capacity:
            top = np.argsort(-key, kind="stable")[: self.capacity]
            ctx, idx, key = ctx[top], idx[top], key[top]
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


@dataclass
class _StreamClient:
    name: str
    contexts: list[Split]
    rng: np.random.Generator  # IP mini-batch shuffles
    buffer: ReplayBuffer | None


def _concat(splits: Sequence[Split]) -> Split:
    return concat([s[0] for s in splits]), np.concatenate([s[1] for s in splits])


def _check_splits(res: Reservoir, name: str, splits: Sequence[Split], n_ctx: int,
                  steps: list[int]) -> None:
    if len(splits) != n_ctx:
        raise ParameterError(f"{name}: {len(splits)} contexts, expected {n_ctx}")
    for j, (x, y) in enumerate(splits):
        shape = np.shape(x)  # never materialises lazy windows
        if len(shape) != 3 or shape[2] != res.n_inputs:
            raise ParameterError(
                f"{name}[{j}]: windows must be (W, T, {res.n_inputs}), got shape {shape}")
        if np.shape(y) != shape[:2]:
            raise ParameterError(f"{name}[{j}]: labels shape {np.shape(y)}, expected {shape[:2]}")
        if shape[0]:
            steps.append(shape[1])


def _replay_batches(client: _StreamClient, t: int, batch: int, replay_batch: int,
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


def run_continual(
    res: Reservoir,
    train: Sequence[Sequence[Split]],
    strategy: str,
    federated: bool,
    ip: IPConfig,
    budget: int,
    local_epochs: int,
    n_classes: int,
    lam: float = 1e-5,
    seed: int = 0,
    validation: Sequence[Split] | None = None,
    evaluate: dict[str, Sequence[Split]] | None = None,
    ledger: CommLedger | None = None,
    client_names: Sequence[str] | None = None,
    replay_fraction: float = 0.05,
    replay_batch: int = 32,
    patience: int | None = None,
    max_joint_rounds: int | None = None,
    solver: str = "cholesky",
    replay_shuffle: bool = False,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> ContinualResult:
    """Train over the contexts of ``train`` ([client][context] splits) and evaluate after each.

    - naive: per context, ``budget`` IP rounds (federated: FedIP rounds of ``local_epochs``
      epochs; centralised: epochs on the pooled windows), (g, b) carried over; ridge on D_t.
    - replay: as naive with a per-client reservoir-sampling buffer of capacity
      max(1, ⌊replay_fraction · the client's windows over all contexts⌋), updated after each
      context; mini-batches of ``ip.batch_size`` current + ``replay_batch`` buffer windows,
      taken in order for t > 0 unless ``replay_shuffle`` (see ``_replay_batches``); FedAvg weight |D_t,c| + |M_t,c|; ridge on D_t ∪ M_t.
    - joint: per context, reset (g, b) = (1, 0), then loop {one IP round/epoch on D_0..D_t,
      ridge on D_0..D_t, stream accuracy on ``validation`` contexts 0..t}; keep the best; stop
      after ``patience`` rounds without improvement (default 3 federated, 5 centralised) or
      ``max_joint_rounds`` (default JOINT_MAX_ROUNDS = 50). ``budget`` is not used.

    Centralised (``federated=False``) pools the clients' windows per context and records no
    messages. Federated runs record the reservoir broadcast and 2N floats each way per client
    and round under "fedclip", the ridge statistics and readouts under "incfed".
    Readouts are solved with ``solver`` (:func:`esnfed_core.readout.solve`).
    Shuffles and buffer keys come from generators seeded with ``seed`` (the same for every
    client, as in :func:`esnfed_core.federated.fedip`); the run is deterministic.
    """
    if strategy not in STRATEGIES:
        raise ParameterError(f"strategy: expected one of {list(STRATEGIES)}, got {strategy!r}")
    check_param("budget", budget, integer=True, low=0)
    check_param("local_epochs", local_epochs, integer=True, low=1)
    check_param("n_classes", n_classes, integer=True, low=1)
    check_solver(solver)
    if not isinstance(replay_shuffle, bool):
        raise ParameterError(f"replay_shuffle: expected true or false, got {replay_shuffle!r}")
    patience = (3 if federated else 5) if patience is None else patience
    max_joint_rounds = JOINT_MAX_ROUNDS if max_joint_rounds is None else max_joint_rounds
    for name, value in (("lambda", lam), ("replay_fraction", replay_fraction), ("replay_batch", replay_batch),
                        ("patience", patience), ("max_joint_rounds", max_joint_rounds)):
        CONTINUAL_BOUNDS[name].check(name, value)
    if not train or not train[0]:
        raise ParameterError("train: no clients or no contexts")
    n_ctx = len(train[0])
    names = client_names_or_default(client_names, len(train))
    steps: list[int] = []
    for name, splits in zip(names, train):
        _check_splits(res, f"train[{name}]", splits, n_ctx, steps)
    if strategy == "joint":
        if validation is None:
            raise ParameterError("validation: required by strategy 'joint' (early stopping)")
        _check_splits(res, "validation", validation, n_ctx, steps)
    evaluate = dict(evaluate or {})
    for set_name, splits in evaluate.items():
        _check_splits(res, f"evaluate[{set_name}]", splits, n_ctx, steps)
    if len(set(steps)) > 1:
        raise ParameterError(f"windows: all contexts must have the same length, got {sorted(set(steps))}")

    if federated:
        streams = [[(x if isinstance(x, Windows) else np.asarray(x), np.asarray(y)) for x, y in splits]
                   for splits in train]
    else:  # CLIP: one client holding the pooled windows of each context
        streams = [[_concat([splits[t] for splits in train]) for t in range(n_ctx)]]
        names, ledger = ["central"], None
    clients = []
    for name, contexts in zip(names, streams):
        buffer = None
        if strategy == "replay":
            n_total = sum(len(x) for x, _ in contexts)
            capacity = max(1, int(replay_fraction * n_total))
            buffer = ReplayBuffer(capacity, np.random.default_rng([seed, 1]))
        clients.append(_StreamClient(name, contexts, np.random.default_rng(seed), buffer))

    fed = _Federation(clients, federated, ip, local_epochs if federated else 1, n_classes, lam,
                      ledger, replay_batch, solver, replay_shuffle)
    if federated:
        broadcast_reservoir(res, [c.name for c in clients], ledger, ALGORITHM)
    result = ContinualResult(
        [], [], {k: np.zeros((n_ctx, n_ctx), np.int64) for k in evaluate},
        {k: np.zeros(n_ctx, np.int64) for k in evaluate},
    )
    cur = res  # naive and replay carry (g, b) over from the reservoir given
    for t in range(n_ctx):
        if strategy == "joint":
            cur, w, used, trace = _joint_context(fed, res, t, validation, patience, max_joint_rounds)
            result.joint_trace.append(trace)
        else:
            if strategy == "replay":
                result.buffer_sizes.append([len(c.buffer) for c in clients])
            part = fed.participants(t, strategy)
            for _ in range(budget):
                cur = fed.ip_round(cur, part)
            w, used = fed.readout(cur, part), budget
            if strategy == "replay":
                for c in clients:
                    c.buffer.update(t, len(c.contexts[t][0]))
        result.reservoirs.append(cur)
        result.readouts.append(w)
        result.ip_rounds.append(used)
        for set_name, splits in evaluate.items():
            for j, (x, y) in enumerate(splits):
                c = evaluate_counts(cur, x, y, w)
                result.correct[set_name][t, j] = int(c.correct[0])
                result.total[set_name][j] = c.total
        if progress is not None:
            progress(t + 1, n_ctx)
    return result


@dataclass
class _Participants:
    """Who trains at a context, on which windows, and each client's local IP fit."""

    names: list[str]
    data: list[Split]  # what the ridge statistics are computed on
    weights: list[int]  # FedAvg weights n_c
    fits: list[Callable[[Reservoir], Reservoir]]


class _Federation:
    """The server's view of a continual run: IP rounds (FedAvg of (g, b), or one centralised
    epoch), IncFed readouts, and the message counters of the ledger."""

    def __init__(self, clients: list[_StreamClient], federated: bool, ip: IPConfig, epochs: int,
                 n_classes: int, lam: float, ledger: CommLedger | None, replay_batch: int,
                 solver: str = "cholesky", replay_shuffle: bool = False):
        self.clients, self.federated, self.ip, self.epochs = clients, federated, ip, epochs
        self.n_classes, self.lam, self.ledger, self.replay_batch = n_classes, lam, ledger, replay_batch
        self.solver, self.replay_shuffle = solver, replay_shuffle
        # Each algorithm numbers its own rounds in the ledger: FedCLIP's IP rounds, IncFed's solves.
        self._rounds = 0
        self._solves = 0

    def participants(self, t: int, strategy: str) -> _Participants:
        """Clients with windows at context ``t`` (the others sit the context out)."""
        names, data, weights, fits = [], [], [], []
        for c in self.clients:
            if strategy == "joint":
                split = _concat(c.contexts[: t + 1])
            elif strategy == "replay" and len(c.buffer):
                split = _concat([c.contexts[t], c.buffer.gather(c.contexts)])
            else:
                split = c.contexts[t]
            if len(split[0]) == 0:
                continue
            names.append(c.name)
            data.append(split)
            weights.append(len(split[0]))  # replay: |D_t,c| + |M_t,c|
            fits.append(self._replay_fit(c, t) if strategy == "replay" else self._epochs_fit(split[0], c.rng))
        if not names:
            raise ParameterError(f"train: context {t} has no windows in any client")
        return _Participants(names, data, weights, fits)

    def _epochs_fit(self, x: np.ndarray, rng: np.random.Generator) -> Callable[[Reservoir], Reservoir]:
        def fit(start: Reservoir) -> Reservoir:
            for _ in range(self.epochs):
                start = ip_epoch(start, x, self.ip, rng)
            return start
        return fit

    def _replay_fit(self, client: _StreamClient, t: int) -> Callable[[Reservoir], Reservoir]:
        def fit(start: Reservoir) -> Reservoir:
            for _ in range(self.epochs):
                batches = _replay_batches(client, t, self.ip.batch_size, self.replay_batch,
                                          self.replay_shuffle)
                start = ip_pass(start, batches, self.ip)
            return start
        return fit

    def ip_round(self, cur: Reservoir, part: _Participants) -> Reservoir:
        """One FedIP round (federated) or one local pass of the single client (centralised)."""
        if self.federated:
            cur = fedip_round(cur, part.fits, part.weights, part.names, self.ledger, ALGORITHM, self._rounds)
        else:
            cur = part.fits[0](cur)
        self._rounds += 1
        return cur

    def readout(self, cur: Reservoir, part: _Participants) -> np.ndarray:
        """IncFed sums of (A_c, B_c) solved at λ: with one client, the centralised ridge."""
        clients = [Client(n, x, y, self.n_classes) for n, (x, y) in zip(part.names, part.data)]
        w = incfed(cur, clients, [self.lam], self.ledger, self._solves, self.solver).readouts[0]
        self._solves += 1
        return w


def _joint_context(fed: _Federation, res: Reservoir, t: int, validation: Sequence[Split],
                   patience: int, max_rounds: int) -> tuple[Reservoir, np.ndarray, int, list[float]]:
    """Joint at context ``t``: from (g, b) = (1, 0), alternate an IP round on D_0..D_t and a ridge
    solve, scored by validation stream accuracy on contexts 0..t; return the best model, its
    round count and the trace. Stops after ``patience`` rounds without a strict improvement."""
    part = fed.participants(t, "joint")
    cand = res.with_ip(np.ones(res.units), np.zeros(res.units))
    best: tuple[float, Reservoir, np.ndarray, int] | None = None
    trace: list[float] = []
    since = 0
    for r in range(max_rounds):
        cand = fed.ip_round(cand, part)
        w = fed.readout(cand, part)
        counts = [evaluate_counts(cand, x, y, w) for x, y in validation[: t + 1]]
        total = sum(c.total for c in counts)
        acc = sum(int(c.correct[0]) for c in counts) / total if total else float("nan")
        trace.append(acc)
        if best is None or acc > best[0]:
            best, since = (acc, cand, w, r + 1), 0
        else:
            since += 1
            if since >= patience:
                break
    _, cand, w, used = best
    return cand, w, used, trace
