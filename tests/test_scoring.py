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


def _reservoir():
    from esnfed_core.reservoir import ReservoirConfig, build_reservoir  # noqa: PLC0415

    return build_reservoir(ReservoirConfig(3, 12, 0.9, 0.5, 1.0), 4)


def test_group_histograms_bin_each_groups_windows_as_alone():
    """One pass over every window, batches shared across groups: each group's counts are those of
    its windows alone (activation_histogram), a group without windows has none. States of one
    window do not depend on its batch-mates mathematically; float32 BLAS may round a row
    differently in another batch shape, so a value may cross a bin edge: at most 1 in 10⁴ moves."""
    from esnfed_core.metrics import activation_histogram, group_histograms  # noqa: PLC0415

    rng = np.random.default_rng(1)
    res = _reservoir()
    x = rng.normal(size=(37, 15, 3)).astype(np.float32)
    x[rng.permutation(37)[:12]] *= 3.0  # groups of different states
    groups = rng.integers(0, 4, size=37)
    groups[groups == 2] = 3  # group 2: no window
    hists = group_histograms(res, x, groups, 5, bins=10, batch_size=8)
    assert len(hists) == 5
    for g, h in enumerate(hists):
        alone = activation_histogram(res, x[groups == g], bins=10, batch_size=256)
        np.testing.assert_array_equal(h.edges, alone.edges)
        assert h.counts.sum() == alone.counts.sum() == (groups == g).sum() * 15 * 12
        assert np.abs(h.counts - alone.counts).sum() <= max(2, 2e-4 * alone.counts.sum())
    assert hists[1].counts.sum() and not hists[2].counts.any() and not hists[4].counts.any()
    with pytest.raises(ValueError, match="groups in 0..4"):
        group_histograms(res, x, np.full(37, 5), 5, bins=10)


def test_densities_per_user_and_context_are_each_users_windows_of_that_context():
    """activation_densities runs each reservoir once over the users' windows together; its
    per-user densities are each user's windows of each context binned alone, the pooled ones the
    users' together (a context a user has no window of: NaN, and nothing in the pool)."""
    from esnfed_core.data.processed import UserData  # noqa: PLC0415
    from esnfed_core.metrics import activation_histogram  # noqa: PLC0415
    from esnfed_core.scoring import activation_densities  # noqa: PLC0415

    rng = np.random.default_rng(2)
    res = _reservoir()

    def user(n, contexts, shift):
        x = (rng.normal(size=(n, 10, 3)) + shift).astype(np.float32)
        return UserData(x, np.zeros((n, 10), np.int8), np.asarray(contexts, np.int8))

    users = [user(6, [0, 0, 1, 1, 1, 0], 0.0), user(4, [1, 1, 1, 1], 1.0), user(5, [0, 1, 0, 1, 0], -1.0)]
    dens = activation_densities([res], users, 2, 16, batch_size=4)
    for i, u in enumerate(users):
        for j in range(2):
            part = u.of_context(j)
            if not part.windows:
                assert np.isnan(dens.per_user[0, i, j]).all()
                continue
            alone = activation_histogram(res, part.x, bins=16).density()
            np.testing.assert_allclose(dens.per_user[0, i, j], alone, atol=1e-3)
    pooled = activation_histogram(res, np.concatenate([u.of_context(1).x for u in users]), bins=16).density()
    np.testing.assert_allclose(dens.pooled[0, 1], pooled, atol=1e-3)
