"""The method registry: one object per algorithm that says what the algorithm does.

The stages and the core ask a method (``Method.family``, or the :class:`esnfed_core.method.Method`
properties that read it) whether it selects a λ, is federated, runs IP, keeps one reservoir per
client, must run sequentially, which search-space entries it draws from, whether its model is one
shared reservoir and readout, whether its clients solve a readout per λ, and how its trial is
fitted (:meth:`Family.fit`); they do not test its name. The families:

  :class:`Baseline`        the random baseline: no model, nothing to search, labels only
  :class:`SharedReservoir` one reservoir shared by every client, a ridge readout (ridge, IncFed,
                           FedAvg), optionally after IP / FedIP epochs; deep variants stack reservoirs
  :class:`Continual`       CLIP / FedCLIP: IP over a stream of contexts (esnfed_core.continual)
  :class:`Heterogeneous`   one reservoir per client (local, ensemble, align-α; esnfed_core.heterogeneous)

:data:`REGISTRY` maps each algorithm name (esnfed_core.vocabulary.ALGOS, the ``--algo`` values) to
its family object; :func:`family_of` is the one place a name is looked up. What a federated
method's clients send is its family's :meth:`Family.traffic` (a :class:`Traffic`). Adding a method:
docs/adding-a-method.md.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Mapping

from esnfed_core.errors import ConfigError
from esnfed_core.quote import quote
from esnfed_core.vocabulary import Name, Strategy

__all__ = ["Family", "Baseline", "SharedReservoir", "Continual", "Heterogeneous", "REGISTRY", "family_of",
           "register", "resolve", "Sends", "Traffic", "CENTRAL"]


class Sends(Name):
    """What a federated method's clients send in training (:attr:`Traffic.sends`)."""

    nothing = "nothing"  # each client alone: nothing crosses the network (local)
    model = "model"  # each client uploads its own reservoir and readout once, downloads nothing (ensemble)
    statistics = "statistics"  # IncFed: ridge statistics up, the readout down, one round (IncFed, align-α)
    readout = "readout"  # FedAvg: a locally solved readout up, the average down
    ip = "ip"  # IP rounds of (g, b) each way, then IncFed readouts (FedIP, FedCLIP)


@dataclass(frozen=True)
class Traffic:
    """What one retrain of a method sends, as esnfed_core.communication counts it against the
    PROTOCOL §3 and §5 formulas and adds the traffic a deployment's validation clients would.

    ``sends``: its training messages (None: not federated, nothing modelled). ``per_context``: its
    rounds run per context of a stream, one readout each (FedCLIP; the clients and IP rounds of each
    context may be recorded). ``readout_every_round``: it re-solves the readout after every IP round
    and scores (g, b) and that readout on the validation users each time (FedCLIP joint's early
    stopping). ``validation_modelled``: its validation traffic is modelled (one reservoir shared by
    every client; the heterogeneous methods' validation clients would need the clients' own
    reservoirs). ``lambda_on_validation``: a retrain and every selection trial score its λ grid on
    the validation users. ``round_per_lambda``: its training clients send a round per λ (FedAvg).
    """

    sends: Sends | None = None
    per_context: bool = False
    readout_every_round: bool = False
    validation_modelled: bool = False
    lambda_on_validation: bool = False
    round_per_lambda: bool = False

    @property
    def ip_rounds(self) -> bool:
        """Whether its rounds split into IP rounds of (g, b) and IncFed readouts (FedIP, FedCLIP)."""
        return self.sends == Sends.ip


# A method that is not federated: no messages are counted or modelled.
CENTRAL = Traffic()


@dataclass(frozen=True)
class Family:
    """What one algorithm does. The facts default to a shared-reservoir ridge readout's."""

    name: str
    federated: bool = False
    uses_ip: bool = False  # trains the reservoir's gain and bias with intrinsic plasticity
    deep: bool = False  # a deep reservoir: its config has ``layers`` (esnfed_core.deep)
    train_scored: bool = False  # assess also scores it on its training users (cheap, no IP)
    torch_kernels: bool = False  # the batched torch kernels (esnfed_core.accel) implement it
    # Modules its trial runs besides the shared trial code (esnfed_stages.experiment.fingerprint.TRIAL_MODULES):
    # their source enters the keys of its trials and models, so editing them recomputes its results.
    modules: tuple[str, ...] = ()
    # Its numpy trial function as "module:function" (resolved when a trial runs: the trial modules
    # import esnfed_core.method, which imports this registry, so the registry names them, not imports).
    trainer: str = "esnfed_core.trial:fit"
    # The entries of params.yaml's budgets.<budget>.space it searches besides the dataset's
    # reservoir space, in order (space.ip / space.fedip: IP's σ and rounds; space.deep: layers).
    spaces: tuple[str, ...] = ()

    continual = False  # trains over the stream of contexts (strategy naive | replay | joint)
    heterogeneous = False  # every client its own reservoir
    ensemble = False  # every client's model serves together: one combined prediction, not one per client
    baseline = False  # no model: nothing to search, no λ, no reservoir hyperparameters
    takes_alpha = False  # the method id carries a strength: align-<α>
    base: str | None = None  # the stationary algorithm whose selected config it builds on

    @property
    def selects_lambda(self) -> bool:
        """Whether a trial chooses the ridge λ on the validation users (else it is fixed or absent)."""
        return not self.continual and not self.baseline

    @property
    def fedip_rounds(self) -> bool:
        """Whether its reservoir is trained by federated IP rounds (FedIP, deep FedIP, FedCLIP),
        whose clients ``federated.client_fraction`` samples."""
        return self.federated and self.uses_ip

    @property
    def shared_model(self) -> bool:
        """Whether its model holds one reservoir and readout for every client (align-α: the server's
        target reservoir and the shared readout), which its model file stores as w_in ... readout."""
        return not self.baseline

    @property
    def readout_per_lambda(self) -> bool:
        """Whether its clients solve their readouts at a given λ (FedAvg): every λ of a grid is a
        round, and under differential privacy a release, of its own, so DP trains at the selected λ."""
        return False

    @property
    def sequential(self) -> bool:
        """Whether its trials run in the stage's process (worker start-up would cost more than the work)."""
        return self.baseline

    def stops_early(self, strategy: str | None) -> bool:
        """Whether, with continual ``strategy``, it trains each context until early stopping on the
        validation users instead of a fixed budget of IP rounds."""
        return False

    def replays(self, strategy: str | None) -> bool:
        """Whether, with continual ``strategy``, its clients replay buffered windows of past contexts
        (continual.replay_* settings)."""
        return False

    def traffic(self, strategy: str | None = None) -> Traffic:
        """What a retrain with continual ``strategy`` sends (:class:`Traffic`): nothing modelled
        unless a family that is federated says otherwise."""
        return CENTRAL

    def fit(self, m: Any, config: Mapping[str, Any], seed: int, data: Any, settings: Any,
            *, score: bool = True) -> Any:
        """One trial (a FittedModel) of ``m`` (a Method) on ``data`` (a TrialData) with ``settings``,
        on the kernels ``settings`` choose: its :attr:`trainer` (the numpy path) or, on torch-cpu |
        cuda, a batch of one on the torch kernels (:data:`ACCEL_TRAINER`)."""
        if settings.accelerated(m):  # a batch of one (the module imports torch)
            return resolve(ACCEL_TRAINER)(m, [config], [int(seed)], data, settings, score=score)[0]
        return resolve(self.trainer)(m, config, seed, data, settings, score=score)


@dataclass(frozen=True)
class Baseline(Family):
    """Uniform random prediction per step: no model (esnfed_core.trial.fit_random)."""

    baseline = True
    train_scored: bool = True


@dataclass(frozen=True)
class SharedReservoir(Family):
    """One reservoir for every client and a ridge readout: ``aggregation`` says how the readout is
    solved: ``pooled`` (centralised statistics of every training window), ``incfed`` (the clients'
    summed statistics) or ``fedavg`` (the window-weighted mean of locally solved readouts)."""

    aggregation: str = "pooled"

    @property
    def readout_per_lambda(self) -> bool:  # type: ignore[override]
        return self.aggregation == "fedavg"

    def traffic(self, strategy: str | None = None) -> Traffic:
        """IncFed's statistics or FedAvg's readouts (by ``aggregation``), after FedIP's IP rounds with
        ``uses_ip``; λ chosen on the validation users."""
        if not self.federated:
            return CENTRAL
        sends = Sends.ip if self.uses_ip else _AGGREGATION_SENDS[self.aggregation]
        return Traffic(sends, validation_modelled=True, lambda_on_validation=self.selects_lambda,
                       round_per_lambda=self.readout_per_lambda)


# What a federated readout's aggregation sends (SharedReservoir.aggregation)
_AGGREGATION_SENDS = {"incfed": Sends.statistics, "fedavg": Sends.readout}


@dataclass(frozen=True)
class Continual(Family):
    """CLIP / FedCLIP: IP over the contexts with a strategy, λ fixed (continual.lambda)."""

    continual = True
    uses_ip: bool = True
    torch_kernels: bool = True
    base: str | None = None

    def stops_early(self, strategy: str | None) -> bool:
        """joint trains each context until early stopping; naive and replay run a fixed budget."""
        return strategy == Strategy.joint

    def replays(self, strategy: str | None) -> bool:
        """replay buffers past contexts' windows; naive and joint do not."""
        return strategy == Strategy.replay

    def traffic(self, strategy: str | None = None) -> Traffic:
        """FedCLIP: IP rounds and a readout at each context (joint: a readout after every IP round)."""
        if not self.federated:
            return CENTRAL
        return Traffic(Sends.ip, per_context=True, readout_every_round=self.stops_early(strategy),
                       validation_modelled=True, lambda_on_validation=self.selects_lambda)


@dataclass(frozen=True)
class Heterogeneous(Family):
    """Every client its own reservoir: ``aligned`` (interpolated toward the server's target, one
    shared IncFed readout), ``ensemble`` (every client's model uploaded once, predictions combined),
    or neither (local: each client alone)."""

    heterogeneous = True
    federated: bool = True
    aligned: bool = False
    ensemble: bool = False
    trainer: str = "esnfed_core.heterogeneous:fit"

    @property
    def takes_alpha(self) -> bool:  # type: ignore[override]
        return self.aligned

    @property
    def shared_model(self) -> bool:  # type: ignore[override]
        """align-α keeps the server's target reservoir and one shared readout; local and ensemble
        keep only the clients' own."""
        return self.aligned

    def traffic(self, strategy: str | None = None) -> Traffic:
        """The ensemble's one upload of each client's model, align-α's IncFed statistics, or nothing
        (local); their validation traffic is not modelled."""
        return Traffic(Sends.model if self.ensemble else Sends.statistics if self.aligned else Sends.nothing)


# The batched torch trials of every family with torch_kernels (runner.device torch-cpu | cuda).
ACCEL_TRAINER = "esnfed_core.accel.trials:fit_batch"


def resolve(trainer: str):
    """The function a "module:function" name names."""
    module, _, name = trainer.partition(":")
    return getattr(importlib.import_module(module), name)


REGISTRY: dict[str, Family] = {}


def register(family: Family) -> Family:
    """Add ``family`` under its name (one algorithm each); ConfigError when the name is taken."""
    if family.name in REGISTRY:
        raise ConfigError(f"algo: {quote(family.name)} is already registered")
    REGISTRY[family.name] = family
    return family


def family_of(algo: str) -> Family:
    """The family of algorithm ``algo``; ConfigError naming the known ones otherwise."""
    try:
        return REGISTRY[algo]
    except (KeyError, TypeError):
        raise ConfigError(f"algo: unknown algorithm {quote(algo)} (expected one of {', '.join(REGISTRY)})") from None


for _family in (
    Baseline("random"),
    SharedReservoir("ridge", train_scored=True, torch_kernels=True),
    SharedReservoir("incfed", federated=True, aggregation="incfed", train_scored=True, torch_kernels=True),
    SharedReservoir("fedavg", federated=True, aggregation="fedavg", train_scored=True, torch_kernels=True),
    SharedReservoir("ip", uses_ip=True, torch_kernels=True, spaces=("ip",)),
    SharedReservoir("fedip", federated=True, uses_ip=True, aggregation="incfed", torch_kernels=True,
                    spaces=("fedip",)),
    Continual("clip", base="ip"),
    Continual("fedclip", federated=True, base="fedip"),
    # deep reservoirs (docs/deep.md): IncFed / FedIP on stacked reservoirs, numpy path only
    SharedReservoir("deep-incfed", federated=True, aggregation="incfed", deep=True, base="incfed",
                    spaces=("deep",)),
    SharedReservoir("deep-fedip", federated=True, uses_ip=True, aggregation="incfed", deep=True, base="fedip",
                    spaces=("fedip", "deep")),
    Heterogeneous("local"),
    Heterogeneous("ensemble", ensemble=True),
    Heterogeneous("align", aligned=True),
):
    register(_family)
