"""Tests of DP-FedCLIP, naive and replay strategies (esnfed_core.private_trial): ε = ∞ is the
non-private FedCLIP trial bit for bit, every context's IP rounds and readout are releases composed
with one z, the IP rounds divide by the fixed number of clients with the stated noise variance, a
tight bound clips the IP updates, and joint (whose release count is adaptive) is refused."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
import scipy.stats

from esnfed_core.errors import ConfigError
from esnfed_core.method import Method
from esnfed_core.privacy import DPSpec, epsilon_of, fedip_aggregate, noise_multiplier
from esnfed_core.private_trial import fit_private, releases
from esnfed_core.reservoir import ReservoirConfig, build_reservoir
from esnfed_core.settings import Settings
from esnfed_core.trial import fit
from experiment_data import trial_data

CONFIG = {"units": 10, "spectral_radius": 0.9, "leak": 0.5, "input_scaling": 0.8, "sigma": 0.3,
          "budget": 2, "local_epochs": 1}
SETTINGS = Settings(lambdas=(1e-4, 1e-2, 1.0), batch_size=5, ip={"batch_size": 4})


STRATEGIES = ["fedclip-naive", "fedclip-replay"]


@pytest.mark.parametrize("method", STRATEGIES)
@pytest.mark.parametrize("record", [False, True])
def test_infinite_epsilon_is_the_nonprivate_fedclip_trial(method, record):
    """Every context's (g, b) and readout, bit for bit. ``record``: the norms path runs the
    aggregate hook at ε = ∞ (the window-weighted mean, as fedip_round's): still the same bits, and
    one norm per client, round and context (every toy client has every context)."""
    data, _ = trial_data(pct="100")
    norms: list[float] | None = [] if record else None
    pair = (fit_private(method, CONFIG, 7, data, SETTINGS, DPSpec(math.inf, 1e-3), ip_norms=norms),
            fit(method, CONFIG, 7, data, SETTINGS, score=True))
    for key in ("readout", "context_readout", "context_gain", "context_bias"):
        assert np.array_equal(*(getattr(model, key) for model in pair)), key
    assert pair[0].validation["stream_accuracy"] == pair[1].validation["stream_accuracy"]
    if record:
        assert len(norms) == data.n_contexts * CONFIG["budget"] * len(data.train) and min(norms) > 0


def test_dp_fedclip_replay_takes_the_proportional_replay_policy():
    """continual.replay.policy proportional reaches DP-FedCLIP's clients (the settings' continual
    section, as a FedCLIP trial): at ε = ∞ through the DP aggregate hook (norms recorded) it is the
    non-private proportional trial bit for bit, and at finite ε it differs from the uniform policy's
    DP run with the same noise seed. 60 % buffered (contexts of 4 windows): the policies keep other
    windows before the last context (the non-private runs differ by ~20 % of the readout)."""
    data, _ = trial_data(pct="100")
    unif = dataclasses.replace(SETTINGS, continual=dataclasses.replace(SETTINGS.continual, replay_fraction=0.6))
    prop = dataclasses.replace(unif, continual=dataclasses.replace(unif.continual, replay_policy="proportional"))
    norms: list[float] = []
    got = fit_private("fedclip-replay", CONFIG, 7, data, prop, DPSpec(math.inf, 1e-3), ip_norms=norms)
    want = fit("fedclip-replay", CONFIG, 7, data, prop, score=True)
    other = fit("fedclip-replay", CONFIG, 7, data, unif, score=True)
    for key in ("context_readout", "context_gain", "context_bias"):
        assert np.array_equal(getattr(got, key), getattr(want, key)), key
    assert norms and not np.allclose(want.context_readout, other.context_readout, rtol=1e-2, atol=0)
    spec = DPSpec(2.0, 1e-3, clip=0.05, ip_clip=0.01)
    a = fit_private("fedclip-replay", CONFIG, 7, data, prop, spec)
    b = fit_private("fedclip-replay", CONFIG, 7, data, unif, spec)
    assert not np.allclose(a.context_gain[-1], b.context_gain[-1])


@pytest.mark.parametrize("method", STRATEGIES)
def test_finite_epsilon_changes_every_context_and_is_seeded(method):
    data, _ = trial_data(pct="100")
    spec = DPSpec(2.0, 1e-3, clip=0.05, ip_clip=0.01)
    a = fit_private(method, CONFIG, 7, data, SETTINGS, spec)
    b = fit_private(method, CONFIG, 7, data, SETTINGS, spec)
    plain = fit(method, CONFIG, 7, data, SETTINGS, score=True)
    assert np.array_equal(a.context_readout, b.context_readout) and np.array_equal(a.context_gain, b.context_gain)
    for t in range(data.n_contexts):
        assert not np.allclose(a.context_gain[t], plain.context_gain[t])
        assert not np.allclose(a.context_readout[t], plain.context_readout[t])
    assert np.all(np.isfinite(a.context_readout))


def test_every_context_is_accounted_together():
    """T contexts × (budget IP rounds + 1 readout) releases under one z: the PLD accountant gives the
    target ε back for that count (0.1 %, as tests/test_privacy.py) and more than ε for one count more."""
    m = Method.parse("fedclip-naive")
    n = releases(m, CONFIG, n_contexts=3)
    assert n == 3 * (CONFIG["budget"] + 1) == 9 == releases(Method.parse("fedclip-replay"), CONFIG, 3)
    z = noise_multiplier(4.0, 1e-3, n)
    assert epsilon_of(z, 1e-3, n) == pytest.approx(4.0, rel=1e-3)
    assert epsilon_of(z, 1e-3, n + 1) > 4.0 * (1 + 1e-3)
    # composition of 9 Gaussians is one of z/3 (GDP), as the project's accountant test states
    assert z == pytest.approx(3.0 * noise_multiplier(4.0, 1e-3), rel=5e-3)


def test_the_ip_round_divides_by_the_fixed_number_of_clients():
    """K = all training clients (public), whoever uploads at a context: 2 uploads of 0 updates with
    K = 5 give noise of std z·C_ip/5 per entry (χ² at the 99.9 % interval; 1.1 σ fails, as does
    dividing by the 2 uploads)."""
    res = build_reservoir(ReservoirConfig(2, 10, 0.9, 0.5, 1.0), 0)
    spec = DPSpec(2.0, 1e-4, ip_clip=0.3)
    agg = fedip_aggregate(spec, np.random.default_rng(4), releases=6, clients=5)
    draws = []
    for _ in range(100):
        g, b = agg(res, [res.gain, res.gain], [res.bias, res.bias], [3, 7])
        draws.append(np.concatenate([g - res.gain, b - res.bias]))
    draws = np.concatenate(draws)
    sigma = noise_multiplier(2.0, 1e-4, 6) * 0.3 / 5
    lo, hi = scipy.stats.chi2.ppf([5e-4, 1 - 5e-4], draws.size)
    stat = lambda s: float(np.sum(draws**2)) / s**2  # noqa: E731
    assert lo <= stat(sigma) <= hi
    assert not lo <= stat(1.1 * sigma) <= hi and not lo <= stat(sigma * 5 / 2) <= hi


def test_a_tight_ip_bound_clips_the_context_updates():
    """With C_ip far below every update's norm (recorded at ε = ∞) and little noise (ε = 64), the
    reservoir moves much less than FedCLIP's: over the 3 contexts × 2 rounds at most 6·C_ip plus
    the noise (6 σ/K per entry, summed over the releases)."""
    data, _ = trial_data(pct="100")
    norms: list[float] = []
    fit_private("fedclip-naive", CONFIG, 7, data, SETTINGS, DPSpec(math.inf, 1e-3), ip_norms=norms)
    c_ip = min(norms) / 50
    spec = DPSpec(64.0, 1e-3, clip=1.0, ip_clip=c_ip)
    private = fit_private("fedclip-naive", CONFIG, 7, data, SETTINGS, spec)
    plain = fit("fedclip-naive", CONFIG, 7, data, SETTINGS, score=True)
    start = build_reservoir(ReservoirConfig(data.n_inputs, 10, 0.9, 0.5, 0.8), 0)  # only its shape is used
    n_rounds = data.n_contexts * CONFIG["budget"]
    k = len(data.train)
    sigma = noise_multiplier(64.0, 1e-3, releases(Method.parse("fedclip-naive"), CONFIG, data.n_contexts)) * c_ip / k
    moved = np.linalg.norm(np.concatenate([private.context_gain[-1] - private.context_gain[0],
                                           private.context_bias[-1] - private.context_bias[0]]))
    moved_plain = np.linalg.norm(np.concatenate([plain.context_gain[-1] - plain.context_gain[0],
                                                 plain.context_bias[-1] - plain.context_bias[0]]))
    bound = n_rounds * (c_ip + 6 * sigma * math.sqrt(2 * start.units))
    assert moved <= bound < 0.5 * moved_plain


@pytest.mark.parametrize("method", ["fedclip-joint"])
def test_uncovered_strategies_are_refused_in_one_line(method):
    data, _ = trial_data(pct="100")
    with pytest.raises(ConfigError, match=f"^privacy.extra_methods: {method} is not covered: [^\\n]*$"):
        fit_private(method, CONFIG, 7, data, SETTINGS, DPSpec(1.0, 1e-3))
