"""Shared pytest fixtures: small seeded data sets that keep the suite fast."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def make_windows():
    """Factory of seeded windows x (W, T, U) float32 and per-step labels y (W, T) int8 in [0, C)."""

    def make(n_windows: int, steps: int, n_inputs: int, n_classes: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((n_windows, steps, n_inputs)).astype(np.float32)
        y = rng.integers(0, n_classes, size=(n_windows, steps)).astype(np.int8)
        return x, y

    return make
