"""Method ids: which methods exist (:data:`METHODS`) and what an id says about its trial
(:class:`Method`: algorithm, continual strategy, align strength, the hyperparameters it needs).
What each algorithm does is its family object in the registry, :mod:`esnfed_core.methods`.

Method ids and what they train:

  random          uniform random prediction per step (no model)
  ridge           centralised ridge readout on the pooled training windows
  incfed          IncFed: clients upload (A, B), the server sums and solves (== ridge)
  fedavg          FedAvg of locally solved readouts, weighted by window counts
  ip / fedip      centralised IP epochs / FedIP rounds on (g, b), then ridge / IncFed
  clip-S / fedclip-S   continual IP (S = naive | replay | joint) over the contexts, λ fixed
  deep-incfed / deep-fedip   IncFed / FedIP on a deep reservoir: ``layers`` stacked reservoirs
                  sharing ``units`` (esnfed_core.deep, docs/deep.md)
  local / ensemble / align-α   heterogeneous reservoirs, one per client (esnfed_core.heterogeneous)
"""

from __future__ import annotations

from dataclasses import dataclass

from esnfed_core.errors import ConfigError
from esnfed_core.quote import quote
from esnfed_core.reservoir import CONNECTIVITY_BOUNDS
from esnfed_core.methods import REGISTRY, Family, Traffic, family_of
from esnfed_core.vocabulary import STRATEGIES

# The continual methods: CLIP and FedCLIP, each with every strategy.
CONTINUAL_METHODS = tuple(f"{a}-{s}" for a in ("clip", "fedclip") for s in STRATEGIES)
METHODS = ("random", "ridge", "incfed", "fedavg", "ip", "fedip") + CONTINUAL_METHODS + (
    "deep-incfed", "deep-fedip") + ("local", "ensemble", "align-0.5")
# align-<α> for any α in [0, 1]: 0.5 stands for them.
RESERVOIR_KEYS = ("units", "spectral_radius", "leak", "input_scaling")
# Optional reservoir hyperparameters: sparse W_in and Ŵ (percent nonzero; absent = dense, PROTOCOL §2).
CONNECTIVITY_KEYS = tuple(CONNECTIVITY_BOUNDS)


def _fact(name: str, doc: str) -> property:
    """A property of :class:`Method` that reads the fact ``name`` of its family."""
    return property(lambda self: getattr(self.family, name), doc=doc)


@dataclass(frozen=True)
class Method:
    """A method id split into its algorithm and (continual methods) strategy. What the algorithm
    does is its :attr:`family`'s (esnfed_core.methods); the properties below read it."""

    algo: str
    strategy: str | None = None
    alpha: float | None = None  # align only: the alignment strength α in [0, 1]

    def __post_init__(self) -> None:
        family = family_of(self.algo)
        if family.takes_alpha:
            if isinstance(self.alpha, bool) or not isinstance(self.alpha, (int, float)) \
                    or not 0.0 <= self.alpha <= 1.0:
                raise ConfigError(f"alpha: {self.algo} needs an alignment strength in [0, 1], got {quote(self.alpha)}")
        elif self.alpha is not None:
            raise ConfigError(f"alpha: {self.algo} takes no alignment strength")
        if self.continual and self.strategy not in STRATEGIES:
            raise ConfigError(
                f"strategy: {self.algo} needs --strategy {'|'.join(STRATEGIES)}, got {quote(self.strategy)}"
            )
        if not self.continual and self.strategy is not None:
            raise ConfigError(f"strategy: {self.algo} is not a continual method and takes no strategy")

    @classmethod
    def parse(cls, method_id: str) -> "Method":
        if method_id in REGISTRY:  # an algorithm whose name has a hyphen (deep-incfed)
            return cls(method_id)
        algo, _, strategy = method_id.partition("-")
        if algo in REGISTRY and REGISTRY[algo].takes_alpha:  # align-<α>, e.g. align-0.25
            try:
                return cls(algo, alpha=float(strategy))
            except ValueError:
                raise ConfigError(f"method {quote(method_id)}: expected {algo}-<alpha>, e.g. {algo}-0.5") from None
        return cls(algo, strategy or None)

    @property
    def family(self) -> Family:
        """What the algorithm does (esnfed_core.methods.REGISTRY)."""
        return family_of(self.algo)

    @property
    def id(self) -> str:
        if self.family.takes_alpha:
            return f"{self.algo}-{self.alpha:g}"
        return f"{self.algo}-{self.strategy}" if self.strategy else self.algo

    @property
    def cli_options(self) -> str:
        """The options of an experiment command (``esnfed select ...``) that name this method."""
        if self.family.takes_alpha:
            return f"--algo {self.algo} --alpha {self.alpha:g}"
        return f"--algo {self.algo}" + (f" --strategy {self.strategy}" if self.strategy else "")

    heterogeneous = _fact("heterogeneous", "Every client its own reservoir: local, ensemble, align-α.")
    continual = _fact("continual", "Trained over the stream of contexts with a strategy: CLIP, FedCLIP.")
    deep = _fact("deep", "A deep-reservoir method: its config has ``layers`` (esnfed_core.deep).")
    baseline = _fact("baseline", "The random baseline: no model, nothing to search, no λ.")
    selects_lambda = _fact("selects_lambda", "Whether a trial chooses the ridge λ on the validation users.")
    federated = _fact("federated", "Whether clients train and a server aggregates.")
    uses_ip = _fact("uses_ip", "Whether it trains the reservoir with intrinsic plasticity.")
    shared_model = _fact("shared_model", "Whether its model holds one reservoir and readout for every client "
                         "(align-α: the server's target and the shared readout).")
    readout_per_lambda = _fact("readout_per_lambda", "Whether its clients solve their readouts at a given λ "
                               "(FedAvg): each λ is a round, and a DP release, of its own.")
    spaces = _fact("spaces", "The budgets.<budget>.space entries it searches besides the dataset's.")
    base = _fact("base", "The stationary method whose selected config this method builds on: a continual "
                 "method reuses its best config (PROTOCOL §6); a deep method its selected ``units`` (docs/deep.md).")

    @property
    def stops_early(self) -> bool:
        """Whether it trains each context until early stopping on the validation users (joint)."""
        return self.family.stops_early(self.strategy)

    @property
    def traffic(self) -> Traffic:
        """What a retrain sends (esnfed_core.methods.Traffic), as esnfed_core.communication counts it."""
        return self.family.traffic(self.strategy)

    @property
    def replays(self) -> bool:
        """Whether its clients replay buffered windows of past contexts (replay)."""
        return self.family.replays(self.strategy)

    @property
    def config_keys(self) -> tuple[str, ...]:
        """Hyperparameters a trial of this method needs (``lambda`` is chosen inside the trial)."""
        if self.baseline:
            return ()
        keys = RESERVOIR_KEYS
        if self.uses_ip:
            keys += ("sigma",)
            if not self.continual:
                keys += ("rounds",)
            elif not self.stops_early:  # a fixed budget of IP rounds per context
                keys += ("budget",)
            if self.family.fedip_rounds:
                keys += ("local_epochs",)
        if self.deep:
            keys += ("layers",)
        return keys

    @property
    def optional_keys(self) -> tuple[str, ...]:
        """Hyperparameters a config of this method may hold besides :attr:`config_keys`: the
        connectivity of a sparse reservoir (every method with a reservoir; absent = dense)."""
        return () if self.baseline else CONNECTIVITY_KEYS
