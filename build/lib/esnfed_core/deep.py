"""Deep reservoirs: L stacked reservoirs, layer l driven by layer l−1's states, one readout over the
concatenated states of every layer (docs/deep.md).

A :class:`DeepReservoir` speaks the layer protocol of :class:`esnfed_core.reservoir.Reservoir`
(``layers``, ``segments``, ``units``, ``gain``, ``bias``, ``with_ip``), so the batched recurrence
(``run_batch``/``iter_states``), the ridge statistics, IncFed, the IP gradients and FedIP run it
unchanged: the states of a batch are (T, B, N) with N = Σ N_l, layer l in units ``segments[l]``.
Statistics of concatenated states add over clients exactly as the shallow ones, so IncFed stays
equal to centralised ridge. The IP rule is local to each unit (its own x_net and h), so the
concatenated gain and bias are every layer's; the step is normalised per layer (plasticity.py).

A one-layer deep reservoir is the shallow reservoir: the same draws from the same seed and the
same recurrence on the same memory, hence the same bytes (tests/test_deep.py).
"""

from __future__ import annotations

from dataclasses import dataclass
import numpy as np

from esnfed_core.reservoir import UNITS, Reservoir, ReservoirConfig, build_reservoir
from esnfed_core.validation import COUNT, ParameterError

LAYERS = COUNT  # the searched ``layers`` hyperparameter (params.yaml budgets.*.space.deep)


def split_units(units: int, layers: int) -> tuple[int, ...]:
    """``units`` split over ``layers`` as evenly as possible, the first layers one larger when it
    does not divide: the total (the readout's size) is the shallow reservoir's."""
    UNITS.check("units", units)
    LAYERS.check("layers", layers)
    if layers > units:
        raise ParameterError(f"layers: {layers} layers cannot share {units} units (at least one each)")
    q, r = divmod(int(units), int(layers))
    return tuple(q + (1 if i < r else 0) for i in range(int(layers)))


@dataclass(frozen=True)
class DeepConfig:
    """Hyperparameters of a deep reservoir: one :class:`ReservoirConfig` per layer, layer 0 reading
    the ``n_inputs`` inputs and layer l the ``units`` of layer l−1."""

    layers: tuple[ReservoirConfig, ...]

    def __post_init__(self) -> None:
        if not self.layers:
            raise ParameterError("layers: a deep reservoir needs at least one layer")
        for i in range(1, len(self.layers)):
            if self.layers[i].n_inputs != self.layers[i - 1].units:
                raise ParameterError(f"layers[{i}].n_inputs: {self.layers[i].n_inputs}, expected the "
                                     f"{self.layers[i - 1].units} units of layer {i - 1}")

    @classmethod
    def shared(cls, n_inputs: int, units: int, layers: int, spectral_radius: float, leak: float,
               input_scaling: float, input_connectivity: float | None = None,
               recurrent_connectivity: float | None = None) -> "DeepConfig":
        """The pipeline's deep config: ``units`` in total split over ``layers`` (split_units), the
        same spectral radius, leak, input scaling and connectivity in every layer (docs/deep.md;
        a layer's input connectivity applies to its W_in, from the inputs or the layer below)."""
        sizes = split_units(units, layers)
        inputs = (n_inputs,) + sizes[:-1]
        return cls(tuple(ReservoirConfig(u, n, spectral_radius, leak, input_scaling, input_connectivity,
                                         recurrent_connectivity)
                         for u, n in zip(inputs, sizes)))


@dataclass(frozen=True, eq=False)
class DeepReservoir:
    """Stacked :class:`Reservoir` layers; gain and bias are the layers' concatenated (N,) vectors."""

    layers: tuple[Reservoir, ...]

    def __post_init__(self) -> None:
        layers = tuple(self.layers)
        if not layers or not all(isinstance(r, Reservoir) for r in layers):
            raise ParameterError("layers: expected a non-empty sequence of Reservoir")
        for i in range(1, len(layers)):
            if layers[i].n_inputs != layers[i - 1].units:
                raise ParameterError(f"layers[{i}]: {layers[i].n_inputs} inputs, expected the "
                                     f"{layers[i - 1].units} units of layer {i - 1}")
        object.__setattr__(self, "layers", layers)

    @property
    def segments(self) -> tuple[tuple[int, int], ...]:
        """Unit ranges [lo, hi) of each layer in the concatenated state."""
        bounds = np.cumsum([0] + [r.units for r in self.layers])
        return tuple((int(a), int(b)) for a, b in zip(bounds[:-1], bounds[1:]))

    @property
    def units(self) -> int:
        return sum(r.units for r in self.layers)

    @property
    def n_inputs(self) -> int:
        return self.layers[0].n_inputs

    @property
    def leak(self) -> np.ndarray:
        """Each unit's leak rate (float64, (N,)): the IP sums recover a·h from the states per unit."""
        return np.concatenate([np.full(r.units, r.leak) for r in self.layers])

    @property
    def gain(self) -> np.ndarray:
        return np.concatenate([r.gain for r in self.layers])

    @property
    def bias(self) -> np.ndarray:
        return np.concatenate([r.bias for r in self.layers])

    @property
    def has_ip(self) -> bool:
        return any(r.has_ip for r in self.layers)

    def with_ip(self, gain: np.ndarray, bias: np.ndarray) -> "DeepReservoir":
        """Copy with new concatenated gain and bias, split over the layers (weights shared)."""
        gain, bias = np.asarray(gain), np.asarray(bias)
        if gain.shape != (self.units,) or bias.shape != (self.units,):
            raise ParameterError(f"gain/bias: expected ({self.units},), got {gain.shape} and {bias.shape}")
        return DeepReservoir(tuple(r.with_ip(gain[a:b], bias[a:b])
                                   for r, (a, b) in zip(self.layers, self.segments)))


def build_deep_reservoir(config: DeepConfig, seed: int | np.random.Generator) -> DeepReservoir:
    """Draw every layer as :func:`build_reservoir` does, in order, from one generator: layer 0 gets
    exactly the shallow reservoir's draws for the same seed."""
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    return DeepReservoir(tuple(build_reservoir(c, rng) for c in config.layers))
