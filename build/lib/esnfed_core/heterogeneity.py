"""How independently provisioned clients' reservoirs differ, and structural alignment.

A :class:`Heterogeneity` spec says what each client draws on its own: mode ``seed`` = the trial's
hyperparameters with the client's own reservoir seed; mode ``space`` = also some of units,
spectral radius, leak and input scaling drawn per client from the dataset's search space.
Draws are deterministic: client c of a trial uses the c-th SeedSequence child of
(heterogeneity seed, trial reservoir seed), split into one stream for its hyperparameters and one
for its weights (so mode ``seed`` and mode ``space`` draw the same Ŵ and W_in shapes' values).

:func:`align` interpolates a client's reservoir toward the server's target (docs/heterogeneous.md):
W(α) = (1−α)W_c + αW_T and W_in(α) = (1−α)W_in,c + αW_in,T, Ŵ rescaled to the interpolated radius
(1−α)ρ_c + αρ_T, W_in rescaled to the interpolated Frobenius norm (1−α)‖W_in,c‖ + α‖W_in,T‖, leak
(1−α)a_c + αa_T. α = 0 is the client's reservoir and α = 1 the target, bit for bit. Alignment
needs equal units: a spec that varies ``units`` serves local and ensemble only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from esnfed_core.errors import ConfigError
from esnfed_core.method import CONNECTIVITY_KEYS, RESERVOIR_KEYS
from esnfed_core.quote import quote
from esnfed_core.reservoir import Reservoir, spectral_radius
from esnfed_core.search import Dimension
from esnfed_core.trial import make_reservoir

MODES = ("seed", "space")
COMBINE = ("softmax", "vote")


@dataclass(frozen=True)
class Heterogeneity:
    """What each client draws for itself: ``space`` lists the varied hyperparameters' dimensions
    (mode ``space``; empty in mode ``seed``); ``combine`` is the ensemble's combination rule."""

    mode: str = "seed"
    seed: int = 0
    space: tuple[Dimension, ...] = ()
    combine: str = "softmax"

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"heterogeneity.mode: expected one of {', '.join(MODES)}, got {quote(self.mode)}")
        if self.combine not in COMBINE:
            raise ConfigError(f"heterogeneity.combine: expected one of {', '.join(COMBINE)}, got {quote(self.combine)}")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"heterogeneity.seed: expected a non-negative integer, got {quote(self.seed)}")
        if self.mode == "seed" and self.space:
            raise ConfigError("heterogeneity.vary: mode seed varies no hyperparameter (use mode space)")
        for d in self.space:
            if d.name not in RESERVOIR_KEYS:
                raise ConfigError(f"heterogeneity.vary: {quote(d.name)} is not one of {', '.join(RESERVOIR_KEYS)}")

    @property
    def varies_units(self) -> bool:
        return any(d.name == "units" for d in self.space)

    def as_dict(self) -> dict[str, Any]:
        """Everything that decides the draws (part of a trial's key)."""
        return {"mode": self.mode, "seed": self.seed, "combine": self.combine,
                "space": [{"name": d.name, "values": None if d.values is None else list(d.values),
                           "low": d.low, "high": d.high} for d in self.space]}


def heterogeneity_of(settings: Any) -> Heterogeneity:
    """The trial settings' spec (None: the default, mode seed)."""
    het = getattr(settings, "heterogeneity", None)
    if het is None:
        return Heterogeneity()
    if not isinstance(het, Heterogeneity):
        raise ConfigError(f"heterogeneity: expected a Heterogeneity spec, got {type(het).__name__}")
    return het


@dataclass(frozen=True, eq=False)
class ClientReservoir:
    """One client's own draw: its hyperparameters and reservoir."""

    config: dict[str, Any]
    reservoir: Reservoir


def draw_clients(het: Heterogeneity, config: Mapping[str, Any], n_inputs: int, n_clients: int,
                 seed: int) -> list[ClientReservoir]:
    """The ``n_clients`` reservoirs of a trial whose reservoir seed is ``seed`` (client c's draw
    does not depend on how many clients there are)."""
    out = []
    for child in np.random.SeedSequence([int(het.seed), int(seed)]).spawn(n_clients):
        hyper, weights = child.spawn(2)
        rng = np.random.default_rng(hyper)
        cfg = {k: config[k] for k in RESERVOIR_KEYS + CONNECTIVITY_KEYS if k in config}  # sparse: every client
        for d in het.space:
            cfg[d.name] = d.sample(rng)
        out.append(ClientReservoir(cfg, make_reservoir(cfg, n_inputs, np.random.default_rng(weights))))
    return out


def align(client: ClientReservoir, target: ClientReservoir, alpha: float) -> Reservoir:
    """The client's reservoir moved a fraction ``alpha`` toward ``target`` (module docstring).

    Both matrices are rescaled after the interpolation, because a convex combination of two
    independent draws is smaller than either: entrywise, (1−α)X_c + αX_T has √((1−α)² + α²) times
    their scale (0.71 at α = 0.5), so without a rescale a mid-α reservoir would be less recurrent
    and less driven than both the client's and the target's. Ŵ goes to the interpolated spectral radius.
    W_in (U(−1, 1)·input_scaling, masked when sparse) goes to the interpolated Frobenius norm
    (1−α)‖W_in,c‖_F + α‖W_in,T‖_F: the Frobenius norm sets the input drive (E‖W_in u‖² =
    σ²‖W_in‖²_F for inputs of independent components of variance σ²) and is proportional to the
    input scaling of a given draw, so the target is (1−α)s_c‖U_c‖_F + αs_T‖U_T‖_F for the unit
    draws U, ≈ the norm a fresh draw has at the interpolated input scaling (1−α)s_c + αs_T (equal
    shapes and connectivity give ‖U_c‖_F ≈ ‖U_T‖_F); and as Ŵ's radius it is exactly the
    client's at α = 0 and the target's at α = 1, so W_in(α) tends to W_in,T as α → 1.
    """
    if alpha == 0.0:
        return client.reservoir
    if alpha == 1.0:
        return target.reservoir
    c, t = client.reservoir, target.reservoir
    if c.w.shape != t.w.shape or c.w_in.shape != t.w_in.shape:
        raise ConfigError(f"heterogeneity.vary: align needs equal units, got {c.units} and {t.units}")
    a = float(alpha)
    w = (1.0 - a) * c.w.astype(np.float64) + a * t.w.astype(np.float64)
    rho = (1.0 - a) * float(client.config["spectral_radius"]) + a * float(target.config["spectral_radius"])
    current = spectral_radius(w)
    if current > 0.0:
        w *= rho / current
    w_in_c, w_in_t = c.w_in.astype(np.float64), t.w_in.astype(np.float64)
    w_in = (1.0 - a) * w_in_c + a * w_in_t
    norm = (1.0 - a) * np.linalg.norm(w_in_c) + a * np.linalg.norm(w_in_t)
    interpolated = float(np.linalg.norm(w_in))
    if interpolated > 0.0:
        w_in *= norm / interpolated
    leak = (1.0 - a) * float(c.leak) + a * float(t.leak)
    return Reservoir(w_in=w_in, w=w, leak=leak, gain=np.ones(c.units), bias=np.zeros(c.units))


def aligned_reservoirs(clients: Sequence[ClientReservoir], target: ClientReservoir,
                       alpha: float) -> list[Reservoir]:
    if any(c.reservoir.units != target.reservoir.units for c in clients):
        raise ConfigError("heterogeneity.vary: align needs equal units (leave units out of vary)")
    return [align(c, target, alpha) for c in clients]
