"""Model-selection plans: seeded random search over a hyperparameter space (PROTOCOL §6), the
continual budget grids derived from the best stationary config, and deterministic seed derivation.

A search space is a mapping ``name -> spec`` where a spec is one of
  - a list of values: a uniform choice among them;
  - ``{low, high, step}``: the inclusive grid low, low+step, ..., high (uniform choice; at most
    MAX_GRID_POINTS points);
  - ``{low, high}``: a uniform float in [low, high).
Every hyperparameter of trial ``i`` is drawn from its own generator keyed by (dataset, share, i,
name), so two methods whose spaces share a name draw the same value for it at the same trial index
(common random numbers: ridge, IncFed and FedAvg are compared on the very same reservoirs), and
adding or reordering keys never changes the values of the others.
"""

from __future__ import annotations

import hashlib
import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from esnfed_core.errors import ConfigError
from esnfed_core.quote import quote
from esnfed_core.validation import Bound, ParameterError

# Grid points are rounded to this many decimals so 0.3 + 13*0.05 prints as 0.95, not 0.9500000000000001.
_GRID_DECIMALS = 10
# The most points a {low, high, step} grid may have; counted before any is built, so a typo such as
# step 1e-12 is one error at once instead of exhausting memory. The finest in-range grid of the
# widest-ranged hyperparameter (units 1..MAX_UNITS step 1: 16384 points) fits ten times over, and it
# is 1000 times the trials of the largest budget (params.yaml paper: 100): a finer grid only
# approximates a uniform range, which {low, high} (no step) draws from directly. The grid's values
# are also written to the heterogeneity report (esnfed_core/heterogeneity.py).
MAX_GRID_POINTS = 100_000


SEED = Bound(integer=True, low=0)  # the root seed (params.yaml seed)
# A budget's trials per share and retrains per selected config (params.yaml budgets.*). The caps
# only catch typos: select plans every trial's config before the first runs, so `trials: 1e9`
# would exhaust memory instead of stopping with one line. The paper budget draws 100 trials and 5
# retrains; a million trials at the cheapest trial (~0.1 s) is over a CPU-day per share.
TRIALS = Bound(integer=True, low=1, high=1_000_000)
RETRAINS = Bound(integer=True, low=1, high=10_000)


def derive_seed(seed: int, *parts: str | int) -> int:
    """A 32-bit seed determined by ``seed`` and the labelled ``parts`` (e.g. "select", "wesad", 3).

    Uses numpy's SeedSequence over (seed, sha256 of the parts), so nearby labels give unrelated
    streams and the value is the same on every platform and Python version.
    """
    try:
        SEED.check("seed", seed)
    except ParameterError as exc:
        raise ConfigError(str(exc)) from None
    label = "\x1f".join(str(p) for p in parts).encode("utf-8")
    word = int.from_bytes(hashlib.sha256(label).digest()[:16], "little")
    return int(np.random.SeedSequence([int(seed), word]).generate_state(1, np.uint32)[0])


@dataclass(frozen=True)
class Dimension:
    """One searched hyperparameter: a finite set of ``values`` or a uniform range [low, high)."""

    name: str
    values: tuple | None = None
    low: float | None = None
    high: float | None = None

    def sample(self, rng: np.random.Generator) -> Any:
        if self.values is not None:
            return self.values[int(rng.integers(len(self.values)))]
        return float(rng.uniform(self.low, self.high))

    @property
    def size(self) -> float:
        """Number of distinct values (inf for a continuous range)."""
        return len(self.values) if self.values is not None else math.inf


def _number(where: str, value: Any) -> float:
    try:
        finite = not isinstance(value, bool) and isinstance(value, numbers.Real) and math.isfinite(value)
    except OverflowError:  # an int past float's range
        finite = False
    if not finite:
        raise ConfigError(f"{where}: expected a finite number, got {quote(value)}")
    return value


def _native(value: Any) -> Any:
    """Plain Python scalars so configs serialise to JSON identically however they were parsed."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    raise ConfigError(f"search value {quote(value)}: expected a number, string or boolean")


def parse_dimension(name: str, spec: Any, where: str = "space",
                    domain: Callable[[Any], None] | None = None) -> Dimension:
    """Parse one spec (list, grid or range); errors name ``where.name``.

    A grid of more than MAX_GRID_POINTS points is refused before any point is built; ``domain``
    (which raises on a value out of the hyperparameter's range) is first called on its first and
    last points, so a grid out of range is reported as such rather than as too fine.
    """
    key = f"{where}.{name}"
    if isinstance(spec, (list, tuple)):
        if not spec:
            raise ConfigError(f"{key}: empty list of values")
        return Dimension(name, values=tuple(_native(v) for v in spec))
    if isinstance(spec, Mapping):
        unknown = set(spec) - {"low", "high", "step"}
        if unknown:
            raise ConfigError(f"{key}: unknown field(s) {quote(sorted(unknown, key=str))} (expected low, high, step)")
        if "low" not in spec or "high" not in spec:
            raise ConfigError(f"{key}: a range needs both 'low' and 'high'")
        low, high = _number(f"{key}.low", spec["low"]), _number(f"{key}.high", spec["high"])
        if "step" in spec:
            step = _number(f"{key}.step", spec["step"])
            if step <= 0:
                raise ConfigError(f"{key}.step: must be > 0, got {quote(step)}")
            if high < low:
                raise ConfigError(f"{key}: high ({high}) is below low ({low})")
            integral = all(isinstance(v, numbers.Integral) for v in (spec["low"], spec["step"]))

            def point(k: int) -> Any:
                value = round(low + k * step, _GRID_DECIMALS)
                return int(value) if integral else value

            span = (high - low) / step + 1e-9  # inf when high - low overflows or step is tiny
            if span >= MAX_GRID_POINTS:
                if domain is not None:
                    domain(point(0))
                    domain(point(int(span)) if math.isfinite(span) else high)
                raise ConfigError(f"{key}: the grid has {_count(span)} points, more than {MAX_GRID_POINTS} "
                                  "(use a coarser step, or {low, high} without step for a uniform range)")
            return Dimension(name, values=tuple(point(k) for k in range(int(span) + 1)))
        if not high > low:
            raise ConfigError(f"{key}: high ({high}) must exceed low ({low})")
        return Dimension(name, low=float(low), high=float(high))
    raise ConfigError(f"{key}: expected a list of values or a mapping with low/high[/step], got {quote(spec)}")


def _count(span: float) -> str:
    """The number of points of a grid spanning ``span`` steps, for a message (about, when huge)."""
    return f"{int(span) + 1}" if span < 1e15 else (f"about {span:.0e}" if math.isfinite(span) else "too many")


def parse_space(space: Any, where: str = "space") -> list[Dimension]:
    """Parse a whole space (mapping name -> spec), sorted by name for order independence."""
    if space is None:
        return []
    if not isinstance(space, Mapping):
        raise ConfigError(f"{where}: expected a mapping of hyperparameter -> values, got {quote(space)}")
    return [parse_dimension(str(k), space[k], where) for k in sorted(space)]


def sample_config(dims: Sequence[Dimension], seed: int, *key: str | int) -> dict[str, Any]:
    """The config of one trial: each dimension from its own generator keyed by ``key`` + its name."""
    return {d.name: d.sample(np.random.default_rng(derive_seed(seed, "config", *key, d.name))) for d in dims}


def space_size(dims: Sequence[Dimension]) -> float:
    """Number of distinct configs (inf if any dimension is continuous)."""
    return math.prod(d.size for d in dims) if dims else 1


def clip_budgets(rounds: int) -> list[int]:
    """CLIP epochs per context: R//2-2 ... R//2+2 (PROTOCOL §6), keeping only values >= 1."""
    _check_rounds(rounds)
    return [e for e in range(rounds // 2 - 2, rounds // 2 + 3) if e >= 1]


def fedclip_budgets(rounds: int, n_contexts: int) -> list[int]:
    """FedCLIP rounds per context: range(R//T, (R//T)(T-1)) (PROTOCOL §6).

    When that range is empty (small R: R//T < 1, or T <= 2) the grid is the single value
    max(1, R//T), so a small budget still trains every context.
    """
    _check_rounds(rounds)
    if isinstance(n_contexts, bool) or not isinstance(n_contexts, numbers.Integral) or n_contexts < 1:
        raise ConfigError(f"n_contexts: expected a positive integer, got {quote(n_contexts)}")
    per = rounds // n_contexts
    grid = [r for r in range(per, per * (n_contexts - 1)) if r >= 1]
    return grid or [max(1, per)]


def continual_budgets(rounds: int, n_contexts: int, federated: bool) -> list[int]:
    """The budget grid of a continual method from the best stationary config's ``rounds``."""
    return fedclip_budgets(rounds, n_contexts) if federated else clip_budgets(rounds)


def _check_rounds(rounds: Any) -> None:
    if isinstance(rounds, bool) or not isinstance(rounds, numbers.Integral) or rounds < 1:
        raise ConfigError(f"rounds: expected a positive integer in the stationary config, got {quote(rounds)}")
