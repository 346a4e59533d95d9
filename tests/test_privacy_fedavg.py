"""Tests of DP-FedAvg (esnfed_core.privacy.fedavg_aggregate, private_trial): ε = ∞ is the
non-private FedAvg trial bit for bit, the noise on the averaged readout has the stated variance,
one client moves the released sum by at most the clipping norm (and exactly by it when the bound
binds), the accountant's ε for one release is the target, and bad values are refused by name."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import scipy.stats

from esnfed_core.errors import ConfigError
from esnfed_core.method import Method
from esnfed_core.privacy import DPSpec, epsilon_of, fedavg_aggregate, fedavg_sigma, noise_multiplier
from esnfed_core.private_trial import fit_private, releases
from esnfed_core.settings import Settings
from esnfed_core.trial import fit
from esnfed_core.validation import ParameterError
from experiment_data import trial_data

CONFIG = {"units": 10, "spectral_radius": 0.9, "leak": 0.5, "input_scaling": 0.8, "lambda": 1e-2}
SETTINGS = Settings(lambdas=(1e-4, 1e-2, 1.0), batch_size=5, ip={"batch_size": 4})


def test_infinite_epsilon_is_the_nonprivate_fedavg_trial():
    """Same reservoir, same local solves, same weighted mean: the same bits, and the readout
    norms are recorded without changing them."""
    data, _ = trial_data(pct="100")
    norms: list[float] = []
    private = fit_private("fedavg", CONFIG, 7, data, SETTINGS, DPSpec(math.inf, 1e-3), ip_norms=norms)
    plain = fit("fedavg", CONFIG, 7, data, SETTINGS, score=True)
    assert np.array_equal(private.readout, plain.readout)
    assert private.lam == plain.lam == CONFIG["lambda"]
    assert private.validation["accuracy"] == plain.validation["accuracy"]
    assert len(norms) == len(data.train) and all(n > 0 for n in norms)


def test_finite_epsilon_changes_the_readout_and_is_seeded():
    data, _ = trial_data(pct="100")
    spec = DPSpec(1.0, 1e-3, fedavg_clip=0.5)
    a = fit_private("fedavg", CONFIG, 7, data, SETTINGS, spec)
    b = fit_private("fedavg", CONFIG, 7, data, SETTINGS, spec)
    plain = fit("fedavg", CONFIG, 7, data, SETTINGS, score=True)
    assert np.array_equal(a.readout, b.readout)
    assert not np.allclose(a.readout, plain.readout)
    assert np.all(np.isfinite(a.readout))


def test_the_averaged_readout_noise_has_the_stated_variance():
    """K zero readouts: the output is the noise / K, per entry N(0, (z·C/K)²). χ² on 100 × 3 × 20
    draws inside its central 99.9 % interval at the stated σ and outside it at 1.1 σ (fixed seed)."""
    spec = DPSpec(2.0, 1e-4, fedavg_clip=0.7)
    k, rng = 4, np.random.default_rng(5)
    agg = fedavg_aggregate(spec, rng)
    draws = np.concatenate([agg([np.zeros((3, 20))] * k, [5] * k).ravel() for _ in range(100)])
    sigma = noise_multiplier(2.0, 1e-4, 1) * 0.7 / k
    assert fedavg_sigma(spec) == pytest.approx(sigma * k, rel=1e-12)
    lo, hi = scipy.stats.chi2.ppf([5e-4, 1 - 5e-4], draws.size)
    assert lo <= float(np.sum(draws**2)) / sigma**2 <= hi
    assert not lo <= float(np.sum(draws**2)) / (1.1 * sigma) ** 2 <= hi


@pytest.mark.parametrize("clip", [0.05, 100.0])
def test_one_client_moves_the_released_sum_by_at_most_the_clip(clip):
    """Add/remove one client: with the same noise draws (same seed) K·output differs by that
    client's clipped readout, of norm ≤ C; = C when the bound binds (its readout is longer).
    Tolerance 1e-9 relative: float64 sums of a few terms of norm ≤ 100."""
    rng = np.random.default_rng(2)
    readouts = [rng.normal(size=(3, 8)) for _ in range(5)]
    spec = DPSpec(1.0, 1e-3, fedavg_clip=clip)
    with_all = 5 * fedavg_aggregate(spec, np.random.default_rng(9))(readouts, [1] * 5)
    without = 4 * fedavg_aggregate(spec, np.random.default_rng(9))(readouts[:4], [1] * 4)
    moved = float(np.linalg.norm(with_all - without))
    length = float(np.linalg.norm(readouts[4]))
    assert moved <= clip * (1 + 1e-9)
    assert moved == pytest.approx(min(clip, length), rel=1e-9)
    assert (clip < length) == (clip == 0.05)  # the small bound binds, the large one does not


def test_clipping_binds_in_the_trial():
    """A bound below every local readout's norm (recorded at ε = ∞) scales each to it: at a large
    ε (small noise) the private readout is far from FedAvg's and its norm is at most C plus the
    noise's (σ/K·√entries, 6 σ/K margin)."""
    data, _ = trial_data(pct="100")
    norms: list[float] = []
    plain = fit_private("fedavg", CONFIG, 7, data, SETTINGS, DPSpec(math.inf, 1e-3), ip_norms=norms)
    clip = min(norms) / 10
    spec = DPSpec(16.0, 1e-3, fedavg_clip=clip)
    private = fit_private("fedavg", CONFIG, 7, data, SETTINGS, spec)
    noise = fedavg_sigma(spec) / len(data.train)
    assert np.linalg.norm(private.readout) <= clip + 6 * noise * math.sqrt(private.readout.size)
    assert np.linalg.norm(private.readout - plain.readout) > 0.5 * np.linalg.norm(plain.readout)


def test_one_release_is_accounted_at_the_target_epsilon():
    """DP-FedAvg is one Gaussian mechanism: z for 1 release, and the PLD accountant gives back ε
    (0.1 %, as tests/test_privacy.py's accountant test); FedIP's R rounds + 1 compose to more noise."""
    fedavg, fedip = Method.parse("fedavg"), Method.parse("fedip")
    assert releases(fedavg, CONFIG) == 1 and releases(fedip, {"rounds": 3}) == 4
    spec = DPSpec(2.0, 1e-4, fedavg_clip=0.3)
    z = fedavg_sigma(spec) / 0.3
    assert z == pytest.approx(noise_multiplier(2.0, 1e-4, 1), rel=1e-12)
    assert epsilon_of(z, 1e-4, 1) == pytest.approx(2.0, rel=1e-3)
    assert noise_multiplier(2.0, 1e-4, 4) > z


def test_bad_values_are_refused_by_name():
    with pytest.raises(ParameterError, match=f"^{re.escape('fedavg_clip: must be > 0.0, got 0.0')}$"):
        DPSpec(1.0, 1e-3, fedavg_clip=0.0)
    data, _ = trial_data(pct="100")
    with pytest.raises(ConfigError, match="missing hyperparameter.*lambda"):
        fit_private("fedavg", {k: v for k, v in CONFIG.items() if k != "lambda"}, 7, data, SETTINGS,
                    DPSpec(1.0, 1e-3))
