"""The parameters of the intrinsic plasticity rule and their bounds: :class:`IPConfig` (one trial's
rule, σ included) and :class:`IPSettings` (params.yaml ``plasticity``: the fixed fields, σ is
searched). A light module apart from the IP kernels (esnfed_core.plasticity), so that every
trial's settings can hold the plasticity section without loading them (see
esnfed_stages/experiment/fingerprint.py: a trial's key hashes only the modules it runs)."""

from __future__ import annotations

from dataclasses import dataclass

from esnfed_core.quote import quote
from esnfed_core.validation import COUNT, POSITIVE, Bound, ParameterError

__all__ = ["IPConfig", "IPSettings"]


# IPConfig's ranges (params.yaml plasticity.* and the searched sigma are checked against them).
# μ is the mean of a target on tanh's open range (−1, 1); η = 0 is a valid no-op step.
IP_BOUNDS = {"sigma": POSITIVE, "mu": Bound(low=-1.0, high=1.0, low_open=True, high_open=True),
             "eta": Bound(low=0.0), "batch_size": COUNT}


@dataclass(frozen=True)
class IPConfig:
    """IP hyperparameters (PROTOCOL §4): target N(μ, σ²), SGD step η, windows per mini-batch."""

    sigma: float
    mu: float = 0.0
    eta: float = 0.01
    batch_size: int = 100
    normalize_step: bool = True  # per-vector L2 normalisation of the step (the authors' code)

    def __post_init__(self) -> None:
        for name, bound in IP_BOUNDS.items():
            bound.check(name, getattr(self, name))
        if not isinstance(self.normalize_step, bool):
            raise ParameterError(f"normalize_step: expected true or false, got {quote(self.normalize_step)}")


@dataclass(frozen=True)
class IPSettings:
    """The fixed IP fields of every trial (params.yaml ``plasticity``): IPConfig without the searched
    σ, checked by IPConfig's own bounds when built."""

    mu: float = IPConfig.mu
    eta: float = IPConfig.eta
    batch_size: int = IPConfig.batch_size
    normalize_step: bool = IPConfig.normalize_step

    def __post_init__(self) -> None:
        self.config(sigma=1.0)  # the bounds live in IPConfig (IP_BOUNDS)

    def config(self, sigma: float) -> IPConfig:
        """The IP rule of a trial with target std ``sigma``."""
        return IPConfig(sigma=sigma, mu=self.mu, eta=self.eta, batch_size=self.batch_size,
                        normalize_step=self.normalize_step)

    def as_dict(self) -> dict[str, object]:
        return {"mu": self.mu, "eta": self.eta, "batch_size": self.batch_size,
                "normalize_step": self.normalize_step}
