"""Tests of boundary validation: every invalid hyperparameter or input raises ParameterError (a
ValueError) whose one-line message names the parameter and the offending value."""

from __future__ import annotations

import re

import numpy as np
import pytest

from esnfed_core.errors import EsnfedError
from esnfed_core.readout import RidgeStats, StatsAccumulator, random_baseline, ridge_stats, solve
from esnfed_core.reservoir import ReservoirConfig, build_reservoir, iter_states, run_batch
from esnfed_core.validation import ParameterError, check_finite, check_param

GOOD = dict(n_inputs=3, units=10, spectral_radius=0.9, leak=0.5, input_scaling=1.0)
RES = build_reservoir(ReservoirConfig(**GOOD), 0)
X = np.zeros((2, 5, 3), np.float32)
Y = np.zeros((2, 5), np.int8)


def _with(**kw):
    return lambda: ReservoirConfig(**{**GOOD, **kw})


def _nan_at(index, value):
    x = X.copy()
    x[index] = value
    return lambda: run_batch(RES, x)


def _states_with_labels(labels):
    acc = StatsAccumulator(RES.units, 4)
    return lambda: acc.add(np.zeros((5, 2, RES.units), np.float32), labels)


CASES = {
    "units < 1": (_with(units=0), "units: must be >= 1, got 0"),
    "units not integer": (_with(units=2.5), "units: expected an integer, got 2.5"),
    "units bool": (_with(units=True), "units: expected a number, got True"),
    "n_inputs < 1": (_with(n_inputs=0), "n_inputs: must be >= 1, got 0"),
    "rho zero": (_with(spectral_radius=0.0), "spectral_radius: must be > 0.0, got 0.0"),
    "rho negative": (_with(spectral_radius=-0.5), "spectral_radius: must be > 0.0, got -0.5"),
    "rho inf": (_with(spectral_radius=float("inf")), "spectral_radius: must be finite, got inf"),
    "leak zero": (_with(leak=0.0), "leak: must be > 0.0, got 0.0"),
    "leak above one": (_with(leak=1.2), "leak: must be <= 1.0, got 1.2"),
    "leak negative": (_with(leak=-0.1), "leak: must be > 0.0, got -0.1"),
    "leak nan": (_with(leak=float("nan")), "leak: must be finite, got nan"),
    "input scaling": (_with(input_scaling=0), "input_scaling: must be > 0.0, got 0"),
    "lambda negative": (lambda: solve(RidgeStats.zeros(4, 2), [0.1, -1.0]), "lambda: must be >= 0.0, got -1.0"),
    "lambda nan": (lambda: solve(RidgeStats.zeros(4, 2), float("nan")), "lambda: must be finite, got nan"),
    "input nan": (_nan_at((1, 2, 0), np.nan), "input: contains 1 NaN or infinite value(s), first nan at index (1, 2, 0)"),
    "input inf": (_nan_at((0, 4, 2), -np.inf), "input: contains 1 NaN or infinite value(s), first -inf at index (0, 4, 2)"),
    "input width": (lambda: run_batch(RES, np.zeros((2, 5, 4))), "input: width 4 does not match reservoir n_inputs 3"),
    "input rank": (lambda: run_batch(RES, np.zeros((5, 3))), "input: expected (windows, steps, features), got shape (5, 3)"),
    "x0 shape": (lambda: run_batch(RES, X, x0=np.zeros((3, 10))), "x0: expected shape (2, 10), got (3, 10)"),
    "out shape": (lambda: run_batch(RES, X, out=np.zeros((5, 2, 9), np.float32)), "out: expected float32 (5, 2, 10), got float32 (5, 2, 9)"),
    "batch size": (lambda: next(iter_states(RES, X, 0)), "batch_size: must be >= 1, got 0"),
    "label rows": (lambda: ridge_stats(RES, X, Y[:1], 4), "labels: expected one row per window ((2, 5)), got shape (1, 5)"),
    "label shape": (_states_with_labels(np.zeros((2, 6), np.int8)), "labels: expected shape (2, 5), got (2, 6)"),
    "label too big": (_states_with_labels(np.array([[0, 1, 2, 3, 4]] * 2)), "labels: values must lie in [0, 4), got 0..4"),
    "label negative": (_states_with_labels(np.full((2, 5), -1)), "labels: values must lie in [0, 4), got -1..-1"),
    "label fraction": (_states_with_labels(np.full((2, 5), 0.5)), "labels: expected integer class indices, got dtype float64"),
    "n_classes": (lambda: random_baseline(Y, 0, seed=0), "n_classes: must be >= 1, got 0"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_invalid_input_raises_parameter_error_naming_it(name):
    call, message = CASES[name]
    with pytest.raises(ParameterError, match=f"^{re.escape(message)}$") as info:
        call()
    assert isinstance(info.value, ValueError) and isinstance(info.value, EsnfedError)
    assert "\n" not in str(info.value)


def test_boundary_values_are_accepted():
    cfg = ReservoirConfig(**{**GOOD, "leak": 1.0, "units": 1})
    assert (cfg.leak, cfg.units) == (1.0, 1)
    assert build_reservoir(cfg, 0).w.shape == (1, 1)
    # λ = 0 is allowed: with B = I the readout is A itself.
    a = np.arange(8.0).reshape(2, 4)
    np.testing.assert_array_equal(solve(RidgeStats(a, np.eye(4), 1, 1), 0.0), a)
    # Integral floats are class indices: label 3.0 puts every step's state into class 3's row.
    acc = StatsAccumulator(RES.units, 4)
    states = np.random.default_rng(0).standard_normal((5, 2, RES.units)).astype(np.float32)
    acc.add(states, np.full((2, 5), 3.0))
    got = acc.result()
    assert (got.n_steps, got.n_windows) == (10, 2)
    # A float32 sum of 10 rows of |s| < 5 is off by at most 10·5·2⁻²⁴ < 1e-5.
    np.testing.assert_allclose(got.a[3], states.astype(np.float64).sum(axis=(0, 1)), rtol=0, atol=1e-5)
    assert not got.a[:3].any()
    check_param("x", 0, low=0)  # closed bounds include the bound itself: no ParameterError
    check_param("x", 1, high=1)


def test_check_param_open_and_closed_bounds():
    with pytest.raises(ParameterError, match=r"^x: must be < 1, got 1$"):
        check_param("x", 1, high=1, high_open=True)
    with pytest.raises(ParameterError, match=r"^x: expected a number, got 'a'$"):
        check_param("x", "a")
    check_finite("ok", np.ones(3))
