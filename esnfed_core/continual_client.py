"""A FedCLIP client that keeps no state between messages (a Flower ClientApp): :class:`LocalClient`
rebuilds it at any (context, round) of a run, its shuffle generator and replay buffer replayed
with the dry engine, and fits and sends as the pipeline's client does."""

from __future__ import annotations

from typing import Sequence

from esnfed_core.continual_engine import DRY_ENGINE, NUMPY_ENGINE, ContinualEngine
from esnfed_core.continual_federation import (ContinualStrategy, _Federation, fedavg_weight, stream_client,
                                              takes_part)
from esnfed_core.continual_strategies import Joint, Naive
from esnfed_core.continual_types import ContinualConfig
from esnfed_core.quote import quote
from esnfed_core.readout import RidgeStats
from esnfed_core.replay import Split
from esnfed_core.reservoir import Reservoir
from esnfed_core.sampling import FULL, KEY
from esnfed_core.validation import ParameterError, check_param


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
