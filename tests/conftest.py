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
    """Every report figure rendered as a 1-inch PNG that carries only the figure's title.

    Drawing the report's 20 figures is ~90% of an `esnfed report` run on the tests' inputs (~17
    of 19 s on a busy 2-core machine), most of it the density grids' 100 shared-axes panels.
    Tests whose subject is the tables, the plots' CSVs, the index or a refusal take this fixture:
    the density grids are not built, the other figures are built but not drawn. The figures
    themselves (names, titles, panels, byte-identical reruns) are checked on real renders in
    tests/test_report.py (`built` and the determinism test) and tests/test_report_figures.py.
    """
    from esnfed_stages import figures

    real = figures._png

    def title_png(title: str | None) -> bytes:
        small = figures._figure(figsize=(1, 1))
        if title:
            small.suptitle(title)
        return real(small)

    monkeypatch.setattr(figures, "_png", lambda fig: title_png(fig.get_suptitle()))
    monkeypatch.setattr(figures, "density_grid", lambda title, *args, **kwargs: title_png(title))
