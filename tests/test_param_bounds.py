"""Every bounded parameter of params.yaml, at and just past each bound: the stage-start check
(the schema, then experiment_params and privacy_params) accepts a value exactly when the core
value type that consumes it does. The bounds are defined once, in the core
(``esnfed_core.validation.Bound`` objects beside the types they constrain)."""

from __future__ import annotations

import copy
import math
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pytest

from continual_call import run_named
from esnfed_core.continual import CONTINUAL_BOUNDS
from esnfed_core.errors import ConfigError
from esnfed_core.metrics import BINS, histogram_values
from esnfed_core.plasticity import IP_BOUNDS, IPConfig
from esnfed_core.privacy import PRIVACY_BOUNDS, DPSpec
from esnfed_core.readout import LAMBDA, RidgeStats, solve
from esnfed_core.reservoir import BATCH_SIZE, RESERVOIR_BOUNDS, ReservoirConfig, build_reservoir, iter_states
from esnfed_core.search import SEED, derive_seed
from esnfed_core.stats import ALPHA, ttest
from esnfed_core.validation import Bound, ParameterError
from esnfed_stages.params.experiment import experiment_params
from esnfed_stages.params.schema import validate
from esnfed_stages.params.privacy import privacy_params
from esnfed_stages.params.load import load_params

PARAMS = load_params(Path(__file__).resolve().parents[1] / "params.yaml")
SPACE = f"budgets.{PARAMS['budget']}.space"
RES = build_reservoir(ReservoirConfig(2, 4, 0.9, 0.5, 1.0), 0)
X = np.zeros((3, 4, 2), np.float32)
Y = np.zeros((3, 4), np.int64)
GOOD_RES = dict(n_inputs=2, units=4, spectral_radius=0.9, leak=0.5, input_scaling=1.0)


def _continual(**kw: Any) -> None:
    """A two-window, two-step continual run: the bounds are checked before any work."""
    strategy = "replay" if any(k.startswith("replay") for k in kw) else "joint"  # the one the key concerns
    run_named(RES, [[(X[:2], Y[:2])]], strategy, False, IPConfig(sigma=0.3, batch_size=2), 1, 1, 2,
              validation=[[(X[2:], Y[2:])]], **kw)  # one validation user, one context


# params.yaml key -> (the core bound, how the core consumes a value, whether the key holds a list)
CASES: dict[str, tuple[Bound, Callable[[Any], Any], bool]] = {
    "plasticity.mu": (IP_BOUNDS["mu"], lambda v: IPConfig(sigma=0.3, mu=v), False),
    "plasticity.eta": (IP_BOUNDS["eta"], lambda v: IPConfig(sigma=0.3, eta=v), False),
    "plasticity.batch_size": (IP_BOUNDS["batch_size"], lambda v: IPConfig(sigma=0.3, batch_size=v), False),
    f"{SPACE}.ip.sigma": (IP_BOUNDS["sigma"], lambda v: IPConfig(sigma=v), True),
    f"{SPACE}.fedip.sigma": (IP_BOUNDS["sigma"], lambda v: IPConfig(sigma=v), True),
    **{f"{SPACE}.{ds}.{name}": (bound, lambda v, n=name: ReservoirConfig(**{**GOOD_RES, n: v}), True)
       for ds in ("wesad", "hhar") for name, bound in RESERVOIR_BOUNDS.items()},
    "readout.lambdas": (LAMBDA, lambda v: solve(RidgeStats.zeros(4, 2), [v]), True),
    "readout.batch_size": (BATCH_SIZE, lambda v: next(iter_states(RES, X, v)), False),
    "continual.lambda": (CONTINUAL_BOUNDS["lambda"], lambda v: _continual(lam=v), False),
    "continual.replay.fraction": (CONTINUAL_BOUNDS["replay_fraction"],
                                  lambda v: _continual(replay_fraction=v), False),
    "continual.replay.batch": (CONTINUAL_BOUNDS["replay_batch"], lambda v: _continual(replay_batch=v), False),
    "continual.joint.patience": (CONTINUAL_BOUNDS["patience"], lambda v: _continual(patience=v), False),
    "continual.joint.max_rounds": (CONTINUAL_BOUNDS["max_joint_rounds"],
                                   lambda v: _continual(max_joint_rounds=v), False),
    "ttest.alpha": (ALPHA, lambda v: ttest([0.5, 0.6, 0.7], [0.1, 0.2, 0.3], alpha=v), False),
    "assess.activation_bins": (BINS, lambda v: histogram_values(np.zeros((2, 3)), bins=v), False),
    "seed": (SEED, lambda v: derive_seed(v, "trial"), False),
    "privacy.epsilons": (PRIVACY_BOUNDS["epsilon"], lambda v: DPSpec(v, 0.5), True),
    "privacy.delta": (PRIVACY_BOUNDS["delta"], lambda v: DPSpec(1.0, v), False),
    "privacy.clip": (PRIVACY_BOUNDS["clip"], lambda v: DPSpec(1.0, 0.5, clip=v), False),
    "privacy.ip_clip": (PRIVACY_BOUNDS["ip_clip"], lambda v: DPSpec(1.0, 0.5, ip_clip=v), False),
}


def edge_values(bound: Bound) -> list[tuple[Any, bool]]:
    """(value, inside) at each finite bound and one step past it either way."""
    out = []
    for edge, is_open, outward in ((bound.low, bound.low_open, -1), (bound.high, bound.high_open, 1)):
        if edge is None:
            continue
        if bound.integer:
            out += [(int(edge), not is_open), (int(edge) + outward, False), (int(edge) - outward, True)]
        else:
            out += [(float(edge), not is_open), (math.nextafter(edge, outward * math.inf), False),
                    (math.nextafter(edge, -outward * math.inf), True)]
    return out


def _set(params: dict, key: str, value: Any) -> dict:
    params = copy.deepcopy(params)
    *path, leaf = key.split(".")
    node = params
    for k in path:
        node = node[k]
    node[leaf] = value
    return params


def stage_accepts(key: str, value: Any, as_list: bool) -> bool:
    params = _set(PARAMS, key, [value] if as_list else value)
    try:
        validate(params)
        experiment_params(params)
        privacy_params(params)
    except ConfigError as exc:
        assert str(exc).startswith(f"params.yaml: {key}: "), exc  # one line naming the key
        return False
    return True


def core_accepts(consume: Callable[[Any], Any], value: Any) -> bool:
    try:
        consume(value)
    except (ParameterError, ConfigError):  # derive_seed reports a bad seed as a config error
        return False
    return True


@pytest.mark.parametrize("key", sorted(CASES))
def test_stage_start_check_and_core_agree_at_every_bound(key):
    bound, consume, as_list = CASES[key]
    values = edge_values(bound)
    assert {inside for _, inside in values} == {True, False}  # the walk crosses the bound
    for value, inside in values:
        assert core_accepts(consume, value) == inside, (key, value)
        assert stage_accepts(key, value, as_list) == inside, (key, value)


def test_epsilon_infinity_means_no_mechanism_in_both():
    assert stage_accepts("privacy.epsilons", math.inf, True) and not DPSpec(math.inf, 0.5).private
    assert not stage_accepts("privacy.epsilons", -math.inf, True)
    assert not core_accepts(lambda v: DPSpec(v, 0.5), -math.inf)


def test_plasticity_mu_one_is_refused_at_stage_start():
    """A former bug: mu 1.0 passed params.yaml and then failed every IP trial."""
    assert not stage_accepts("plasticity.mu", 1.0, False)
    with pytest.raises(ConfigError, match=r"^params.yaml: plasticity.mu: must be < 1.0, got 1.0$"):
        validate(_set(PARAMS, "plasticity.mu", 1.0))
