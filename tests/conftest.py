"""Shared pytest fixtures: small seeded data sets that keep the suite fast."""

from __future__ import annotations

import numpy as np
import pytest

from figure_stub import title_only_figures as title_only


@pytest.fixture
def make_windows():
    """Factory of seeded windows x (W, T, U) float32 and per-step labels y (W, T) int8 in [0, C)."""

    def make(n_windows: int, steps: int, n_inputs: int, n_classes: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        x = rng.standard_normal((n_windows, steps, n_inputs)).astype(np.float32)
        y = rng.integers(0, n_classes, size=(n_windows, steps)).astype(np.int8)
        return x, y

    return make


# Cost markers (registered in pyproject.toml): `pipeline`, `ray` and `sigkill` tests run stage
# commands end to end and `dvc` tests run DVC on a copy of the project, so they are `slow` too;
# `make test-fast` runs `-m "not slow"`.
_SLOW_MARKERS = ("pipeline", "ray", "sigkill", "dvc")


def pytest_collection_modifyitems(config, items):
    for item in items:
        if any(item.get_closest_marker(m) for m in _SLOW_MARKERS):
            item.add_marker(pytest.mark.slow)


@pytest.fixture
def title_only_figures(monkeypatch):
    """figure_stub.title_only_figures for one test."""
    title_only(monkeypatch)
