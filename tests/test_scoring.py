"""esnfed_core.scoring's activation densities: each model's histogram of every user and context
together (``totals``) and its KL divergence to the IP target (``target_kl``), which assess records
beside the densities the figures draw."""

from __future__ import annotations

import numpy as np
import pytest

from esnfed_core.metrics import gaussian_kl, histogram_values
from esnfed_core.scoring import densities_of


def _hist(rng, n, loc):
    return histogram_values(np.tanh(rng.normal(loc, 0.3, size=(n, 4))), bins=20)


def test_totals_sum_every_user_and_context_and_their_kl_is_the_histograms():
    rng = np.random.default_rng(0)
    empty = histogram_values(np.zeros((0, 4)), bins=20)  # a user without windows of a context
    # hists[model][user][context]: two models, two users, two contexts of different sizes
    hists = [[[_hist(rng, 50, 0.0), _hist(rng, 150, 0.4)], [_hist(rng, 80, -0.2), empty]] for _ in range(2)]
    dens = densities_of(hists, 2, 20)
    assert len(dens.totals) == 2
    for m, rows in enumerate(hists):
        want = sum(rows[0][1:] + rows[1], rows[0][0])
        np.testing.assert_array_equal(dens.totals[m].counts, want.counts)
        assert dens.totals[m].n_values == 50 + 150 + 80
    pooled, unit = dens.target_kl(0.0, 0.25)
    assert pooled == [pytest.approx(t.pooled_kl(0.0, 0.25), rel=1e-12) for t in dens.totals]
    assert unit == [pytest.approx(t.mean_kl(0.0, 0.25), rel=1e-12) for t in dens.totals]
    # the contexts weigh by their values (130 and 150 per unit), not as the mean of their densities
    unweighted = gaussian_kl(dens.pooled[0].mean(axis=0) * np.diff(dens.edges), dens.edges, 0.0, 0.25)
    assert abs(pooled[0] - unweighted) > 1e-3
    # a model without any window: NaN, as an empty histogram's KL
    none = densities_of([[[empty, empty]]], 2, 20)
    assert all(np.isnan(v[0]) for v in none.target_kl(0.0, 0.25))
