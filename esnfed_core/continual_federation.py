"""The server side of a continual run and the strategy interface it calls: a strategy
(:class:`ContinualStrategy`) says what data each client trains on at a context, how a client fits
locally and how training on a context runs; :class:`_Federation` runs the IP rounds (FedAvg of
(g, b), client sampling, or one centralised epoch) and the IncFed readouts, and counts the
messages. :func:`stream_client` builds a client at the start of a run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from esnfed_core.continual_engine import ContinualEngine
from esnfed_core.continual_types import ContinualConfig, ContinualResult
from esnfed_core.federated import Client, incfed
from esnfed_core.messages import CommLedger, PlasticityMessage, StatsMessage
from esnfed_core.plasticity import fedip_round
from esnfed_core.replay import ReplayBuffer, Split, StreamClient, concat_splits
from esnfed_core.reservoir import Reservoir
from esnfed_core.sampling import FULL, ROSTER_POOL, sample_clients
from esnfed_core.validation import ParameterError

ALGORITHM = "fedclip"  # ledger name of FedCLIP's (g, b) messages; readout messages are "incfed"


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


def stream_client(strategy: ContinualStrategy, config: ContinualConfig, name: str, contexts: list[Split],
                  concat: Callable[[Sequence[Split]], Split] = concat_splits) -> StreamClient:
    """A client at the start of a run: its shuffle generator seeded with ``config.seed`` (the same
    for every client) and the strategy's buffer over its ``contexts``."""
    return StreamClient(name, contexts, np.random.default_rng(config.seed),
                        strategy.buffer(sum(len(x) for x, _ in contexts), config.seed), concat)


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
