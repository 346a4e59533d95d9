"""Continual intrinsic plasticity over a stream of contexts: CLIP (centralised) and FedCLIP
(federated) with the naive, replay and joint strategies (PROTOCOL §5), evaluated after each context.

A strategy is an object (Flower-style): it says what data each client's IP rounds and the readout
see at a context, how a client fits locally, and when training on a context stops; the loop in
:func:`run_continual` and the server (:class:`_Federation`) are the same for all three.
Centralised runs use the federated code path with one client and no messages, so CLIP equals
FedCLIP on a single client with one local epoch per round.

The heavy work (IP epochs and passes, ridge statistics, correct counts, joining contexts) goes
through a :class:`ContinualEngine`: the default runs the numpy core; the accelerated path
(:mod:`esnfed_core.accel.continual`) gives each trial of a batch an engine that runs it on torch,
batched over the trials.

A client that keeps no state between messages (a Flower ClientApp) rebuilds itself at any round
with :class:`LocalClient` (its generators and buffer replayed by a :class:`DryEngine`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Sequence

import numpy as np

from esnfed_core import metrics
from esnfed_core.continual_settings import BUDGET, CONTINUAL_BOUNDS, JOINT_MAX_ROUNDS, check_policy  # noqa: F401 (re-exported)
from esnfed_core.data.windows import Windows
from esnfed_core.federated import Client, incfed
from esnfed_core.messages import CommLedger
from esnfed_core.plasticity import (
    IPConfig,
    broadcast_reservoir,
    client_names_or_default,
    fedip_round,
    ip_epoch,
    ip_pass,
    shuffled_batches,
)
from esnfed_core.messages import PlasticityMessage, StatsMessage
from esnfed_core.quote import quote
from esnfed_core.readout import LAMBDA, Counts, RidgeStats, check_solver, ridge_stats
from esnfed_core.readout import evaluate as evaluate_counts
from esnfed_core.replay import ReplayBuffer, Split, StreamClient, concat_splits, replay_batches
from esnfed_core.reservoir import Reservoir
from esnfed_core.sampling import CLIENT_FRACTION, CONTEXT_POOL, FULL, KEY, ROSTER_POOL, check_pool, sample_clients
from esnfed_core.validation import ParameterError, check_param
from esnfed_core.vocabulary import STRATEGIES

if TYPE_CHECKING:
    from esnfed_core.plasticity import Aggregate

# The server's readout from the participants' statistics at a context, given the reservoir and the
# readout's number (0, 1, ... in the run): the DP readout of esnfed_core.private_trial.
ReadoutFn = Callable[[Reservoir, Sequence[RidgeStats], int], np.ndarray]

ALGORITHM = "fedclip"  # ledger name of FedCLIP's (g, b) messages; readout messages are "incfed"


@dataclass(frozen=True)
class ContinualResult:
    reservoirs: list[Reservoir]  # after each context
    readouts: list[np.ndarray]  # (C,N) after each context ((C,N+1) with ContinualConfig.bias)
    correct: dict[str, np.ndarray]  # eval set name -> (T_ctx, T_ctx) int: model after i on context j
    total: dict[str, np.ndarray]  # eval set name -> (T_ctx,) int: steps of context j
    ip_rounds: list[int] = field(default_factory=list)  # IP rounds/epochs behind each model
    joint_trace: list[list[float]] = field(default_factory=list)  # joint: validation stream acc per round
    joint_capped: list[bool] = field(default_factory=list)  # joint: max_rounds, not early stopping, ended context t
    buffer_sizes: list[list[int]] = field(default_factory=list)  # replay: |M_t,c| used at context t
    # clients that trained at each context (those with windows there: the others sit it out) and the
    # IP rounds run there (joint: every round of its loop, kept or not): the message counts follow
    participants: list[int] = field(default_factory=list)
    context_rounds: list[int] = field(default_factory=list)

    def stream_accuracy(self, name: str) -> np.ndarray:
        """(T_ctx,): after context i, accuracy pooled over contexts 0..i of eval set ``name``."""
        return metrics.stream_accuracy(self.correct[name], self.total[name])

    def accuracy_matrix(self, name: str) -> np.ndarray:
        """(T_ctx, T_ctx): accuracy of the model after context i on context j."""
        return metrics.accuracy_matrix(self.correct[name], self.total[name])


@dataclass(frozen=True)
class ContinualConfig:
    """What every strategy shares: federated or centralised, the IP rule, local epochs per round
    (federated), classes, the readout's λ and solver, and the seed of shuffles and buffer keys.
    ``bias`` (params.yaml readout.bias): every ridge readout (D_t, D_t ∪ M_t, D_0..t) is solved from
    the statistics of the augmented states [S, 1] (:class:`esnfed_core.readout.RidgeStats`),
    readouts (C, N+1) whose last column is the unpenalised b_out."""

    federated: bool
    ip: IPConfig
    n_classes: int
    local_epochs: int = 1
    lam: float = 1e-5
    seed: int = 0
    solver: str = "cholesky"
    bias: bool = False
    # Federated server hooks (None: FedAvg of (g, b), IncFed sum solved at λ): DP-FedCLIP's
    # private IP rounds (esnfed_core.privacy.fedip_aggregate) and private readout.
    aggregate: "Aggregate | None" = field(default=None, compare=False)
    readout: ReadoutFn | None = field(default=None, compare=False)
    # params.yaml federated.client_fraction: the share of a context's participants each FedCLIP IP
    # round samples (esnfed_core.sampling; 1 = all of them). Readouts still sum every participant.
    client_fraction: float = FULL
    # federated.sampling_pool: ``context`` draws max(1, ⌊f·P_t⌋) of the P_t participants of context t;
    # ``roster`` draws max(1, ⌊f·K⌋) of all K clients (data-independent sets) and the drawn
    # participants train (a drawn client without windows there sends nothing; none: no update).
    sampling_pool: str = CONTEXT_POOL

    def __post_init__(self) -> None:
        check_param("local_epochs", self.local_epochs, integer=True, low=1)
        CLIENT_FRACTION.check(KEY, self.client_fraction)
        check_pool(self.sampling_pool)
        check_param("n_classes", self.n_classes, integer=True, low=1)
        check_solver(self.solver)
        if not isinstance(self.bias, bool):
            raise ParameterError(f"bias: expected true or false, got {quote(self.bias)}")
        CONTINUAL_BOUNDS["lambda"].check("lambda", self.lam)


class ContinualEngine:
    """Where a continual run's heavy work runs: the numpy core (this class, the default). An
    accelerated engine overrides every method with the same meaning (results equal within
    float32 rounding)."""

    def concat(self, splits: Sequence[Split]) -> Split:
        """The windows and labels of ``splits`` one after the other."""
        return concat_splits(splits)

    def ip_epoch(self, res: Reservoir, x: np.ndarray, cfg: IPConfig, rng: np.random.Generator) -> Reservoir:
        """One shuffled IP epoch (:func:`esnfed_core.plasticity.ip_epoch`)."""
        return ip_epoch(res, x, cfg, rng)

    def ip_pass(self, res: Reservoir, batches: Iterable[np.ndarray], cfg: IPConfig) -> Reservoir:
        """One IP step per given mini-batch (:func:`esnfed_core.plasticity.ip_pass`)."""
        return ip_pass(res, batches, cfg)

    def fit_clients(self, start: Reservoir, fits: Sequence[Callable[[Reservoir], Reservoir]]) -> list[Reservoir]:
        """Every client's local fit of one FedCLIP round from ``start`` (one after the other
        here; an accelerated engine runs them side by side)."""
        return [fit(start) for fit in fits]

    def stats(self, res: Reservoir, x: np.ndarray, y: np.ndarray, n_classes: int,
              bias: bool = False) -> RidgeStats:
        """A client's ridge statistics (as :meth:`esnfed_core.federated.Client.fit_stats`), of
        the augmented states [S, 1] with ``bias``."""
        return ridge_stats(res, x, y, n_classes, bias=bias)

    def counts(self, res: Reservoir, x: np.ndarray, y: np.ndarray, w: np.ndarray) -> Counts:
        """Correct steps of readout ``w`` (C, N), or (C, N+1) with the bias, on windows ``x``."""
        return evaluate_counts(res, x, y, w)


NUMPY_ENGINE = ContinualEngine()


class ContinualStrategy:
    """One continual strategy: what data each IP round and the readout see at context t
    (:meth:`data`), how a client fits locally (:meth:`local_fit`), and how training on a context
    runs and stops (:meth:`train_context`)."""

    name = ""
    needs_validation = False

    def buffer(self, n_windows: int, seed: int) -> ReplayBuffer | None:
        """A client's replay memory for a stream of ``n_windows`` windows (none by default)."""
        return None

    def data(self, client: StreamClient, t: int) -> Split:
        """The windows a client trains on at context ``t``: D_t by default."""
        return client.contexts[t]

    def local_fit(self, fed: "_Federation", client: StreamClient, t: int,
                  split: Split) -> Callable[[Reservoir], Reservoir]:
        return fed.epochs_fit(split[0], client.rng)

    def end_context(self, client: StreamClient, t: int) -> None:
        """What a client keeps of context ``t`` once it is trained (nothing by default)."""

    def train_context(self, fed: "_Federation", res: Reservoir, cur: Reservoir, t: int,
                      validation: Sequence[Sequence[Split]] | None, result: ContinualResult
                      ) -> tuple[Reservoir, np.ndarray, int]:
        """Train on context ``t`` from ``cur`` (``res`` = the reservoir given to the run); return
        the model after it: reservoir, readout and the IP rounds it took."""
        raise NotImplementedError


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


def stream_client(strategy: ContinualStrategy, config: ContinualConfig, name: str, contexts: list[Split],
                  concat: Callable[[Sequence[Split]], Split] = concat_splits) -> StreamClient:
    """A client at the start of a run: its shuffle generator seeded with ``config.seed`` (the same
    for every client) and the strategy's buffer over its ``contexts``."""
    return StreamClient(name, contexts, np.random.default_rng(config.seed),
                        strategy.buffer(sum(len(x) for x, _ in contexts), config.seed), concat)


def run_continual(
    res: Reservoir,
    train: Sequence[Sequence[Split]],
    strategy: ContinualStrategy,
    config: ContinualConfig,
    *,
    validation: Sequence[Sequence[Split]] | None = None,
    evaluate: dict[str, Sequence[Split]] | None = None,
    ledger: CommLedger | None = None,
    client_names: Sequence[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
    engine: ContinualEngine = NUMPY_ENGINE,
) -> ContinualResult:
    """Train over the contexts of ``train`` ([client][context] splits) with ``strategy`` and
    evaluate the model after each context on each set of ``evaluate``. ``validation``
    ([validation user][context] splits) is what joint's early stopping scores, user by user.

    Centralised (``config.federated`` false) pools the clients' windows per context and records
    no messages. Federated runs record the reservoir broadcast and 2N floats each way per client
    and round under "fedclip", the ridge statistics and readouts under "incfed". Readouts are
    solved with ``config.solver`` (:func:`esnfed_core.readout.solve`). Shuffles and buffer keys
    come from generators seeded with ``config.seed`` (the same for every client, as in
    :func:`esnfed_core.federated.fedip`); the run is deterministic. ``engine`` runs the heavy
    work (the numpy core by default).
    """
    if not isinstance(strategy, ContinualStrategy):
        raise ParameterError(f"strategy: expected a ContinualStrategy (make_strategy), got {quote(strategy)}")
    if not train or not train[0]:
        raise ParameterError("train: no clients or no contexts")
    n_ctx = len(train[0])
    names = client_names_or_default(client_names, len(train))
    steps: list[int] = []
    for name, splits in zip(names, train):
        _check_splits(res, f"train[{name}]", splits, n_ctx, steps)
    if strategy.needs_validation:
        if validation is None:
            raise ParameterError(f"validation: required by strategy {quote(strategy.name)} (early stopping)")
        if not validation:
            raise ParameterError("validation: no validation users")
        for i, splits in enumerate(validation):
            _check_splits(res, f"validation[{i}]", splits, n_ctx, steps)
    evaluate = dict(evaluate or {})
    for set_name, splits in evaluate.items():
        _check_splits(res, f"evaluate[{set_name}]", splits, n_ctx, steps)
    if len(set(steps)) > 1:
        raise ParameterError(f"windows: all contexts must have the same length, got {', '.join(map(str, sorted(set(steps))))}")

    if config.federated:
        streams = [[(x if isinstance(x, Windows) else np.asarray(x), np.asarray(y)) for x, y in splits]
                   for splits in train]
    else:  # CLIP: one client holding the pooled windows of each context
        streams = [[engine.concat([splits[t] for splits in train]) for t in range(n_ctx)]]
        names, ledger = ["central"], None
    clients = [stream_client(strategy, config, name, contexts, engine.concat)
               for name, contexts in zip(names, streams)]
    fed = _Federation(clients, config, ledger, engine)
    if config.federated:
        broadcast_reservoir(res, [c.name for c in clients], ledger, ALGORITHM)
    result = ContinualResult(
        [], [], {k: np.zeros((n_ctx, n_ctx), np.int64) for k in evaluate},
        {k: np.zeros(n_ctx, np.int64) for k in evaluate},
    )
    cur = res  # naive and replay carry (g, b) over from the reservoir given
    for t in range(n_ctx):
        rounds_before = fed.ip_rounds_run
        cur, w, used = strategy.train_context(fed, res, cur, t, validation, result)
        result.participants.append(fed.taking_part)
        result.context_rounds.append(fed.ip_rounds_run - rounds_before)
        result.reservoirs.append(cur)
        result.readouts.append(w)
        result.ip_rounds.append(used)
        for set_name, splits in evaluate.items():
            for j, (x, y) in enumerate(splits):
                c = engine.counts(cur, x, y, w)
                result.correct[set_name][t, j] = int(c.correct[0])
                result.total[set_name][j] = c.total
        if progress is not None:
            progress(t + 1, n_ctx)
    return result


def takes_part(split: Split) -> bool:
    """Whether a client trains at a context, given what it would train on (a client without
    windows there sits the context out: no IP rounds, no statistics)."""
    return len(split[0]) > 0


def fedavg_weight(split: Split) -> int:
    """A client's FedAvg weight n_c at a context: its windows there (replay: |D_t,c| + |M_t,c|)."""
    return len(split[0])


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

    def __init__(self, clients: list[StreamClient], config: ContinualConfig, ledger: CommLedger | None,
                 engine: ContinualEngine):
        self.clients, self.federated, self.ip, self.engine = clients, config.federated, config.ip, engine
        self.epochs = config.local_epochs if config.federated else 1
        self.n_classes, self.lam, self.solver, self.ledger = config.n_classes, config.lam, config.solver, ledger
        self.bias = config.bias
        self.aggregate, self.private_readout = config.aggregate, config.readout
        self.client_fraction, self.seed, self.pool = config.client_fraction, config.seed, config.sampling_pool
        # Each algorithm numbers its own rounds in the ledger: FedCLIP's IP rounds, IncFed's solves.
        self._rounds = 0
        self._solves = 0
        self.taking_part = 0  # clients training at the current context (``participants``)

    def participants(self, t: int, strategy: ContinualStrategy) -> _Participants:
        """Clients with windows at context ``t`` (the others sit the context out)."""
        names, data, weights, fits = [], [], [], []
        for c in self.clients:
            split = strategy.data(c, t)
            if not takes_part(split):
                continue
            names.append(c.name)
            data.append(split)
            weights.append(fedavg_weight(split))
            fits.append(strategy.local_fit(self, c, t, split))
        if not names:
            raise ParameterError(f"train: context {t} has no windows in any client")
        self.taking_part = len(names)
        return _Participants(names, data, weights, fits)

    @property
    def ip_rounds_run(self) -> int:
        """IP rounds (centralised: epochs) run so far, over every context."""
        return self._rounds

    def epochs_fit(self, x: np.ndarray, rng: np.random.Generator) -> Callable[[Reservoir], Reservoir]:
        """A client's local fit: ``epochs`` shuffled IP epochs on ``x``."""
        def fit(start: Reservoir) -> Reservoir:
            for _ in range(self.epochs):
                start = self.engine.ip_epoch(start, x, self.ip, rng)
            return start
        return fit

    def sampled(self, part: _Participants) -> _Participants:
        """The participants of the next IP round: all of them, or with ``client_fraction`` < 1 those
        :func:`esnfed_core.sampling.sample_clients` draws for the run's round index (the others
        neither fit nor send in it): among the participants, or with the ``roster`` pool among all
        clients, keeping the drawn participants (possibly none)."""
        if self.client_fraction == FULL:
            return part
        if self.pool == ROSTER_POOL:  # over all K clients, whoever has windows: the drawn participants
            drawn = {self.clients[i].name for i in sample_clients(len(self.clients), self.client_fraction,
                                                                  self.seed, self._rounds)}
            s = [j for j, name in enumerate(part.names) if name in drawn]
        else:
            s = sample_clients(len(part.names), self.client_fraction, self.seed, self._rounds)
        return _Participants(*([getattr(part, f)[j] for j in s] for f in ("names", "data", "weights", "fits")))

    def ip_round(self, cur: Reservoir, part: _Participants) -> Reservoir:
        """One FedIP round (federated) or one local pass of the single client (centralised)."""
        if self.federated:
            part = self.sampled(part)
            if not part.names:  # roster: no drawn client has windows here (DP: the noise alone, / m)
                if self.aggregate is not None:
                    cur = cur.with_ip(*self.aggregate(cur, [], [], []))
                self._rounds += 1
                return cur
            # The clients' fits first (side by side on an accelerated engine), then the round with
            # its messages: each client starts from the downloaded (g, b), as in fedip_round.
            down = PlasticityMessage(cur.gain, cur.bias)
            fitted = self.engine.fit_clients(cur.with_ip(down.gain, down.bias), part.fits)
            fits = [lambda _start, r=r: r for r in fitted]
            cur = fedip_round(cur, fits, part.weights, part.names, self.ledger, ALGORITHM, self._rounds,
                              self.aggregate)
        else:
            cur = part.fits[0](cur)
        self._rounds += 1
        return cur

    def readout(self, cur: Reservoir, part: _Participants) -> np.ndarray:
        """IncFed sums of (A_c, B_c) solved at λ: with one client, the centralised ridge."""
        clients = [_EngineClient(n, x, y, self.n_classes, self.engine, self.bias)
                   for n, (x, y) in zip(part.names, part.data)]
        if self.private_readout is not None:  # the clients' statistics, released by the hook
            w = self.private_readout(cur, [c.fit_stats(cur).stats for c in clients], self._solves)
        else:
            w = incfed(cur, clients, [self.lam], self.ledger, self._solves, self.solver).readouts[0]
        self._solves += 1
        return w


class _EngineClient(Client):
    """An IncFed client whose statistics come from the run's engine."""

    def __init__(self, name: str, x: np.ndarray, y: np.ndarray, n_classes: int, engine: ContinualEngine,
                 bias: bool = False):
        super().__init__(name, x, y, n_classes, bias=bias)
        self.engine = engine

    def fit_stats(self, res: Reservoir) -> StatsMessage:
        return StatsMessage(self.engine.stats(res, self._x, self._labels, self.n_classes, self.bias))


class DryEngine(ContinualEngine):
    """An engine that computes nothing but draws what the real fits draw: an IP epoch draws its
    shuffle (:func:`esnfed_core.plasticity.shuffled_batches`), an IP pass runs its batch iterator
    to the end (replay batches draw their permutations and read the buffer) and the reservoir
    comes back unchanged. It replays a client's history to rebuild its generators
    (:meth:`LocalClient.at`)."""

    def ip_epoch(self, res, x, cfg, rng):
        shuffled_batches(x, cfg.batch_size, rng)  # draws the epoch's permutation, reads nothing
        return res

    def ip_pass(self, res, batches, cfg):
        for _ in batches:
            pass
        return res


DRY_ENGINE = DryEngine()


class LocalClient:
    """One FedCLIP client on its own, for a client that keeps no state between messages (a Flower
    ClientApp, esnfed_flower/fedclip.py): built from its contexts, the run's strategy and config
    as :func:`run_continual` builds it, then brought to a point of the run by :meth:`at`.

    What it trains on at a context, whether it takes part, its FedAvg weight, its local fit and its
    ridge statistics are the pipeline's own (strategy, :class:`_Federation`, engine); a run of
    :func:`run_continual` and a server that averages these clients' fits in client order
    (:func:`esnfed_core.aggregate.weighted_average`) and sums their statistics give the same bits.
    Naive and replay run a fixed budget per context; joint's rounds per context depend on the
    validation users, so its server sends the rounds run at each earlier context (``history``).
    """

    def __init__(self, strategy: ContinualStrategy, config: ContinualConfig, contexts: list[Split],
                 name: str = "client", engine: ContinualEngine = NUMPY_ENGINE):
        if not isinstance(strategy, (Naive, Joint)):
            raise ParameterError(f"strategy: a stateless client runs naive, replay or joint, not {quote(strategy)}")
        if config.client_fraction != FULL:  # it replays the fits it is told (at), not a sample
            raise ParameterError(f"{KEY}: a stateless client replays the rounds it fitted (history, round), "
                                 f"its server samples; set it to 1")
        self.strategy = strategy
        self.client = stream_client(strategy, config, name, contexts, engine.concat)
        self._fed = _Federation([self.client], config, None, engine)
        self._dry = _Federation([self.client], config, None, DRY_ENGINE)

    @classmethod
    def at(cls, strategy: ContinualStrategy, config: ContinualConfig, contexts: list[Split], t: int, r: int,
           name: str = "client", engine: ContinualEngine = NUMPY_ENGINE,
           history: Sequence[int] | None = None) -> "LocalClient":
        """The client as the pipeline's is before its local fit ``r`` (0-based) of context ``t``:
        its shuffle generator advanced past every earlier local fit (at each earlier context s it
        took part in, ``history[s]`` fits: the rounds the server ran there, or under client
        sampling those it was sampled in; without ``history``, the strategy's ``budget``; then
        ``r``), its buffer updated after each earlier context."""
        check_param("context", t, integer=True, low=0, high=len(contexts) - 1)
        budget = getattr(strategy, "budget", None)
        if history is None:
            if budget is None:
                raise ParameterError(f"history: strategy {quote(strategy.name)} needs the rounds run at each "
                                     f"earlier context")
            history = [budget] * t
        if len(history) < t:
            raise ParameterError(f"history: {len(history)} contexts, expected at least {t}")
        for s, rounds in enumerate(history[:t]):
            check_param(f"history[{s}]", rounds, integer=True, low=0)
        check_param("round", r, integer=True, low=0, high=budget)
        c = cls(strategy, config, contexts, name, engine)
        for s in range(t):
            c._dry_rounds(s, int(history[s]))
            strategy.end_context(c.client, s)
        c._dry_rounds(t, r)
        return c

    def _dry_rounds(self, t: int, rounds: int) -> None:
        if rounds and self.takes_part(t):
            fit = self.strategy.local_fit(self._dry, self.client, t, self.data(t))
            for _ in range(rounds):
                fit(None)  # the dry engine never looks at the reservoir

    def data(self, t: int) -> Split:
        """What the client trains on at context ``t`` (replay: D_t ∪ M_t)."""
        return self.strategy.data(self.client, t)

    def takes_part(self, t: int) -> bool:
        return takes_part(self.data(t))

    def weight(self, t: int) -> int:
        """The client's FedAvg weight at context ``t``."""
        return fedavg_weight(self.data(t))

    def fit(self, start: Reservoir, t: int) -> Reservoir:
        """The client's local fit of its next IP round at context ``t`` from the broadcast ``start``."""
        return self.strategy.local_fit(self._fed, self.client, t, self.data(t))(start)

    def stats(self, res: Reservoir, t: int) -> RidgeStats:
        """The client's ridge statistics at context ``t`` on the trained ``res`` (its IncFed upload)."""
        x, y = self.data(t)
        return self._fed.engine.stats(res, x, y, self._fed.n_classes, self._fed.bias)
