"""Where the mechanisms' noise comes from (esnfed_core.privacy.SystemGaussian, noise_source): without
a generator the library draws from the operating system's CSPRNG (two calls differ, the draws are
N(0, σ²) within stated tolerances, they are made from os.urandom's bytes); a seeded generator
passed explicitly (the pipeline's noise_rng) still reproduces its release."""

from __future__ import annotations

import math
import os

import numpy as np
import pytest
import scipy.stats

from esnfed_core.privacy import (
    DPSpec, SystemGaussian, add_noise, client_stats_share, client_update_share, fedavg_aggregate, private_average,
    private_stats,
)
from esnfed_core.private_trial import noise_rng
from esnfed_core.readout import RidgeStats

SPEC = DPSpec(2.0, 1e-3, clip=0.05, ip_clip=0.03)


def _units(n: int = 4, units: int = 5) -> list[RidgeStats]:
    rng = np.random.default_rng(1)
    out = []
    for _ in range(n):
        s = rng.uniform(-1, 1, (30, units))
        y = np.eye(2)[rng.integers(0, 2, 30)]
        out.append(RidgeStats(y.T @ s, s.T @ s, 30, 2))
    return out


def test_system_gaussian_draws_fit_n_0_sigma2():
    """n = 200 000 draws at σ = 2.5: the sample mean lies within 5 standard errors σ/√n of 0, the
    sample variance within 5 of its standard errors σ²·√(2/(n − 1)) of σ² (each fails with
    probability ~6e-7 for a correct sampler), and a Kolmogorov–Smirnov test against N(0, σ²) does
    not reject at 1e-6. A sampler off by 1 % in scale (s² 2 % off: 6.4 standard errors) fails."""
    n, sigma = 200_000, 2.5
    x = SystemGaussian().normal(0.0, sigma, n)
    assert x.shape == (n,) and x.dtype == np.float64
    assert abs(float(np.mean(x))) <= 5 * sigma / math.sqrt(n)
    assert abs(float(np.var(x, ddof=1)) - sigma**2) <= 5 * sigma**2 * math.sqrt(2 / (n - 1))
    assert scipy.stats.kstest(x, scipy.stats.norm(0.0, sigma).cdf).pvalue > 1e-6


def test_system_gaussian_is_fresh_on_every_call_and_keeps_numpys_shapes():
    g = SystemGaussian()
    a, b = g.normal(0.0, 1.0, (3, 4)), g.normal(0.0, 1.0, (3, 4))
    assert a.shape == (3, 4) and not np.array_equal(a, b)
    assert not np.array_equal(SystemGaussian().normal(size=7), SystemGaussian().normal(size=7))
    assert isinstance(g.normal(), float) and g.normal(size=5).shape == (5,) and g.normal(size=0).shape == (0,)
    assert abs(float(np.mean(g.normal(100.0, 1e-3, 1001))) - 100.0) < 1e-3  # loc and scale applied


def test_system_gaussian_is_box_muller_on_os_urandom(monkeypatch):
    """Its only source is os.urandom: all-zero bytes give u₁ = 2⁻⁵³, u₂ = 0, i.e. the pair
    (√(2·53·ln 2), 0) of every Box–Muller draw, the largest magnitude the sampler can produce."""
    monkeypatch.setattr(os, "urandom", lambda k: bytes(k))
    r = math.sqrt(-2.0 * math.log(2.0**-53))
    np.testing.assert_allclose(SystemGaussian().normal(0.0, 1.0, 4), [r, r, 0.0, 0.0], atol=1e-12)


def test_the_library_default_is_the_csprng_and_an_explicit_seed_reproduces():
    """Every mechanism called without a generator draws fresh noise (two calls differ); passed the
    pipeline's seeded generator, it gives the same release twice."""
    units = _units()
    u, start = np.linspace(-1, 1, 6), np.zeros(6)
    unseeded = {
        "private_stats": lambda rng=None: private_stats(units, SPEC, rng).a,
        "add_noise": lambda rng=None: add_noise(np.zeros((2, 3)), np.zeros((3, 3)), 1.0, rng)[1],
        "private_average": lambda rng=None: private_average(start, [u, -u], [1, 1], SPEC, rng),
        "fedavg_aggregate": lambda rng=None: fedavg_aggregate(SPEC, rng)([np.ones((2, 3))] * 3, [1, 1, 1]),
        "client_stats_share": lambda rng=None: client_stats_share(units[0], SPEC, 3, rng)[0],
        "client_update_share": lambda rng=None: client_update_share(u, SPEC, 3, rng),
    }
    for name, draw in unseeded.items():
        assert not np.array_equal(draw(), draw()), name
        np.testing.assert_array_equal(draw(noise_rng(7)), draw(noise_rng(7)), err_msg=name)
        assert not np.array_equal(draw(noise_rng(7)), draw(noise_rng(8))), name


def test_a_symmetric_b_from_the_csprng():
    """add_noise's B stays symmetric with the CSPRNG's draws (one draw per released number)."""
    _, b = add_noise(np.zeros((2, 4)), np.zeros((4, 4)), 1.0)
    np.testing.assert_array_equal(b, b.T)
    assert np.count_nonzero(np.triu(b)) == 10


@pytest.mark.parametrize("size", [1, 2, 3])
def test_system_gaussian_odd_sizes(size):
    assert SystemGaussian().normal(0.0, 1.0, size).shape == (size,)
