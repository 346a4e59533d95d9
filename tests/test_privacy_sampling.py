"""Tests of DP-FedIP with client sampling (federated.client_fraction < 1, esnfed_core.private_trial):
f = 1 is the unsampled private trial bit for bit, ε = ∞ is the non-private sampled trial bit for bit,
each round clips and sums exactly the sampled clients and divides by the public m, the accounting
is the unsampled one (no amplification), and DP-FedCLIP refuses a fraction below 1 with the context
pool in one line naming federated.sampling_pool (its roster pool: tests/test_privacy_fedclip_sampling.py).
Opt-in privacy.amplification: sampling: the replace-one sensitivity convention (2·clip), the amplified z
meets its target tightly, is below the unamplified z only where sampling pays, f = 1 keeps the
unamplified path, and the stage records it."""

from __future__ import annotations

import math

import numpy as np
import pytest

from esnfed_core import private_trial
from esnfed_core.errors import ConfigError
from esnfed_core.method import Method
from esnfed_core.privacy import DPSpec
from esnfed_core.private_trial import fit_private, sampled_denominator
from esnfed_core.sampling import sample_size
from esnfed_core.settings import Settings
from esnfed_core.trial import fit
from dp_spies import spy_aggregate, spy_multipliers
from experiment_data import trial_data

CFG = {"units": 12, "spectral_radius": 0.9, "leak": 0.5, "input_scaling": 0.8, "sigma": 0.3,
       "rounds": 3, "local_epochs": 1}
IP = {"mu": 0.0, "eta": 0.01, "batch_size": 4, "normalize_step": True}
SPEC = DPSpec(epsilon=4.0, delta=1e-3, ip_clip=0.01)


def _settings(fraction: float | None = None) -> Settings:
    return Settings(ip=IP, lambdas=(1e-4, 1e-2, 1.0), batch_size=5,
                    **({} if fraction is None else {"client_fraction": fraction}))


def _same(a, b) -> None:
    assert a.reservoir.gain.tobytes() == b.reservoir.gain.tobytes()
    assert a.reservoir.bias.tobytes() == b.reservoir.bias.tobytes()
    assert a.readout.tobytes() == b.readout.tobytes() and a.validation == b.validation


def test_fraction_one_is_the_unsampled_private_trial_bit_for_bit():
    """f = 1 (explicit) and the default run the same private trial: the same noise, the same bits."""
    data = trial_data(pct="100")[0]
    for spec in (SPEC, DPSpec(math.inf, 1e-3)):
        _same(fit_private("fedip", CFG, 5, data, _settings(1.0), spec),
              fit_private("fedip", CFG, 5, data, _settings(), spec))
    assert sampled_denominator(Method.parse("fedip"), data, _settings(1.0)) is None


def test_infinite_epsilon_is_the_nonprivate_sampled_trial_bit_for_bit():
    data = trial_data(pct="100")[0]
    norms: list[float] = []
    got = fit_private("fedip", CFG, 5, data, _settings(0.5), DPSpec(math.inf, 1e-3), ip_norms=norms)
    _same(got, fit("fedip", CFG, 5, data, _settings(0.5)))
    # the aggregate hook ran (norms recorded) over the sampled clients only: m per round
    assert len(norms) == CFG["rounds"] * sample_size(len(data.train), 0.5) < CFG["rounds"] * len(data.train)
    # and sampling changed the reservoir (not the unsampled trial)
    full = fit("fedip", CFG, 5, data, _settings())
    assert not np.allclose(got.reservoir.gain, full.reservoir.gain, rtol=0, atol=1e-6)


@pytest.mark.parametrize("fraction", [0.25, 0.5, 0.75])
def test_private_rounds_clip_the_sampled_clients_and_divide_by_the_public_m(fraction, monkeypatch):
    """Each private round aggregates exactly m = max(1, ⌊f·K⌋) uploads and divides by that public m
    (the `clients` the aggregate is built with); the release count and z are the unsampled ones."""
    data = trial_data(pct="100")[0]
    k, m = len(data.train), sample_size(len(data.train), fraction)
    seen = spy_aggregate(monkeypatch)
    norms: list[float] = []
    model = fit_private("fedip", CFG, 3, data, _settings(fraction), SPEC, ip_norms=norms)
    assert seen["clients"] == m == sampled_denominator(Method.parse("fedip"), data, _settings(fraction)) < k
    assert seen["uploads"] == [m] * CFG["rounds"] and len(norms) == m * CFG["rounds"]
    assert seen["releases"] == private_trial.releases(Method.parse("fedip"), CFG) == CFG["rounds"] + 1
    assert np.all(np.isfinite(model.reservoir.gain)) and np.all(np.isfinite(model.readout))


def test_a_sampled_private_round_is_the_gaussian_mechanism_over_m():
    """One round by hand: start + (Σ over the m sampled uploads of clip(update) + N(0, (z·C_ip)²)) / m,
    the noise from a generator in the same state; float64 sums of numbers ~1e-2, so 1e-15 absolute
    covers any difference in summation order."""
    from esnfed_core.privacy import clip_norm, fedip_aggregate, noise_multiplier  # noqa: PLC0415

    rng = np.random.default_rng(0)
    n, m = 6, 2
    uploads = [rng.normal(0, 0.02, 2 * n) for _ in range(m)]  # norms ~0.07 > ip_clip 0.01: clipped

    class Start:  # the broadcast (g, b) the aggregate reads
        gain, bias = np.ones(n), np.zeros(n)

    start = np.concatenate([Start.gain, Start.bias])
    agg = fedip_aggregate(SPEC, np.random.default_rng(9), 4, clients=m)
    g, b = agg(Start, [start[:n] + u[:n] for u in uploads], [start[n:] + u[n:] for u in uploads], [10, 20])
    noise = np.random.default_rng(9).normal(0.0, noise_multiplier(SPEC.epsilon, SPEC.delta, 4) * SPEC.ip_clip, 2 * n)
    want = start + (sum(clip_norm(u, SPEC.ip_clip) for u in uploads) + noise) / m
    np.testing.assert_allclose(np.concatenate([g, b]), want, rtol=0, atol=1e-15)  # float64 sums of ~1e-2


@pytest.mark.parametrize("method", ["fedclip-naive", "fedclip-replay"])
def test_dp_fedclip_refuses_sampling_in_one_line(method):
    data = trial_data(pct="100")[0]
    cfg = {k: v for k, v in CFG.items() if k != "rounds"} | {"budget": 1}
    with pytest.raises(ConfigError) as err:
        fit_private(method, cfg, 0, data, _settings(0.5), SPEC)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"federated.client_fraction: DP-{method} needs "
                                              "federated.sampling_pool: roster ")
    assert msg.endswith("or set federated.client_fraction: 1")


def test_incfed_and_fedavg_ignore_the_fraction_under_dp():
    """IncFed and DP-FedAvg have no rounds: a fraction below 1 leaves their private trials unchanged."""
    data = trial_data(pct="100")[0]
    cfg = {k: v for k, v in CFG.items() if k not in ("rounds", "local_epochs")}
    _same(fit_private("incfed", cfg, 2, data, _settings(0.5), SPEC), fit_private("incfed", cfg, 2, data, _settings(), SPEC))
    _same(fit_private("fedavg", cfg | {"lambda": 1e-2}, 2, data, _settings(0.5), SPEC),
          fit_private("fedavg", cfg | {"lambda": 1e-2}, 2, data, _settings(), SPEC))


def test_a_training_client_without_windows_is_refused_under_dp_sampling():
    data = trial_data(pct="100")[0]
    name = next(iter(data.train))
    empty = data.train[name]
    import dataclasses  # noqa: PLC0415

    data.train[name] = dataclasses.replace(empty, x=empty.x[:0], y=empty.y[:0], context=empty.context[:0])
    with pytest.raises(ConfigError, match=rf"^federated\.client_fraction: DP-fedip samples over every training "
                                          rf"client, but '{name}' has no windows"):
        fit_private("fedip", CFG, 0, data, _settings(0.5), SPEC)


def test_the_privacy_stage_samples_fedip_and_records_no_amplification(tmp_path):
    """`esnfed privacy` at f = 0.5: the document records the fraction and that no amplification was
    used, and every ε's noise multiplier is the unsampled accountant's for the R + 1 releases."""
    import json  # noqa: PLC0415

    from esnfed_core.privacy import noise_multiplier  # noqa: PLC0415
    from experiment_data import cli_ok, make_dataset, small_params, stage_options, write_params  # noqa: PLC0415

    make_dataset(tmp_path)
    params = small_params()
    params["federated"] = {"client_fraction": 0.5}
    params["privacy"]["epsilons"] = [4.0, float("inf")]
    write_params(tmp_path, params)
    common = stage_options(tmp_path)
    pct = str(params["privacy"]["pct"])
    for algo in ("incfed", "fedip"):
        cli_ok("select", "--algo", algo, "--pct", pct, *common)
    cli_ok("privacy", *common, "--out-dir", str(tmp_path / "privacy"))
    doc = json.loads((tmp_path / "privacy" / "wesad.json").read_text())
    assert doc["client_fraction"] == 0.5 and doc["amplification"] == "none"
    fedip = doc["methods"]["fedip"]
    assert fedip["releases"] == int(fedip["config"]["rounds"]) + 1
    assert fedip["epsilons"]["4"]["noise_multiplier"] == noise_multiplier(4.0, doc["delta"], fedip["releases"])
    assert fedip["epsilons"]["inf"]["noise_multiplier"] == 0.0


# --- privacy.amplification: sampling (opt-in): amplification by sampling without replacement ---

BIG = (4.0, 1e-6, 20, 10, 1000)  # ε, δ, R, m, K: many rounds, each on 1 % of a large federation
SMALL = (4.0, 1 / 81, 3, 4, 9)  # the embedded WESAD's 9 users at f = 0.5


def test_the_replace_one_sensitivity_of_a_clipped_sum_is_twice_the_clip():
    """The convention the amplified z rests on: replacing one client's clipped update by another
    moves the sum by up to 2·C (opposite directions), which dp_accounting's replace-one noise
    multiplier is relative to; removing one moves it by at most C."""
    from esnfed_core.privacy import clip_norm  # noqa: PLC0415

    c, rng = 0.03, np.random.default_rng(1)
    others = [clip_norm(rng.normal(0, 1, 8), c) for _ in range(3)]
    u = rng.normal(0, 1, 8)
    a = sum(others) + clip_norm(u, c)
    b = sum(others) + clip_norm(-u, c)
    np.testing.assert_allclose(np.linalg.norm(a - b), 2 * c, rtol=1e-12)  # float64, a few terms
    assert np.linalg.norm(a - sum(others)) <= c * (1 + 1e-12)


def test_the_amplified_z_meets_its_target_and_is_tight():
    """ε of the calibrated z, recomputed by the same accountant, is at most the target (to the
    calibration's tolerance, 1e-5 on z) and exceeds it 2 % below z: the calibration is not loose."""
    from esnfed_core.privacy import sampled_epsilon_of, sampled_noise_multiplier  # noqa: PLC0415

    for eps, delta, r, m, k in (BIG, SMALL):
        z = sampled_noise_multiplier(eps, delta, r, m, k)
        assert sampled_epsilon_of(z, delta, r, m, k) <= eps * (1 + 1e-4)
        assert sampled_epsilon_of(0.98 * z, delta, r, m, k) > eps


def test_the_amplified_z_is_below_the_unamplified_one_only_where_sampling_pays():
    """Large K, small m: amplification beats the doubled (replace-one) sensitivity. The embedded
    data's 9 users at f = 0.5: it does not (documented in docs/privacy.md)."""
    from esnfed_core.privacy import noise_multiplier, sampled_noise_multiplier  # noqa: PLC0415

    eps, delta, r, m, k = BIG
    assert sampled_noise_multiplier(eps, delta, r, m, k) < 0.7 * noise_multiplier(eps, delta, r + 1)
    eps, delta, r, m, k = SMALL
    assert sampled_noise_multiplier(eps, delta, r, m, k) > noise_multiplier(eps, delta, r + 1)


def test_without_sampling_the_amplified_event_is_r_plus_1_gaussians_at_half_z():
    """m = K: every round is the plain Gaussian mechanism, so the event's ε is that of R + 1
    Gaussians of multiplier z/2 (σ over 2·C), not z: the factor 2 is applied exactly once."""
    import dp_accounting  # noqa: PLC0415
    from dp_accounting.rdp import rdp_privacy_accountant  # noqa: PLC0415

    from esnfed_core.privacy import sampled_epsilon_of  # noqa: PLC0415

    def rdp(z: float, n: int) -> float:
        acc = rdp_privacy_accountant.RdpAccountant()
        acc.compose(dp_accounting.GaussianDpEvent(z), n)
        return acc.get_epsilon(1e-5)

    z, r, k = 3.0, 4, 7
    got = sampled_epsilon_of(z, 1e-5, r, k, k)
    assert got == pytest.approx(rdp(z / 2, r + 1), rel=1e-9)  # the same RDP orders and sums
    assert got > 1.5 * rdp(z, r + 1)


def _amplified() -> DPSpec:
    return DPSpec(epsilon=4.0, delta=1e-3, ip_clip=0.01, amplification="sampling")


def test_trials_use_the_amplified_z_only_with_sampled_rounds():
    from esnfed_core.privacy import sampled_noise_multiplier  # noqa: PLC0415
    from esnfed_core.private_trial import trial_spec  # noqa: PLC0415

    data = trial_data(pct="100")[0]
    fedip = Method.parse("fedip")
    k = len(data.train)
    spec = trial_spec(fedip, CFG, data, _settings(0.5), _amplified())
    assert spec.sampled == (CFG["rounds"], sample_size(k, 0.5), k)
    assert spec.multiplier(CFG["rounds"] + 1) == sampled_noise_multiplier(4.0, 1e-3, CFG["rounds"], sample_size(k, 0.5), k)
    with pytest.raises(ValueError, match="releases: 2, but the sampled trial has 3 rounds"):
        spec.multiplier(2)
    # f = 1: the existing path, bit for bit; IncFed has no rounds to amplify
    assert trial_spec(fedip, CFG, data, _settings(1.0), _amplified()).sampled is None
    _same(fit_private("fedip", CFG, 4, data, _settings(1.0), _amplified()),
          fit_private("fedip", CFG, 4, data, _settings(1.0), SPEC))
    assert trial_spec(Method.parse("incfed"), CFG, data, _settings(0.5), _amplified()).sampled is None


def test_an_amplified_trial_noises_its_rounds_and_readout_with_the_amplified_z(monkeypatch):
    """Both mechanisms of a sampled trial (the rounds' aggregate and the IncFed release) are built
    with the amplified z under amplification: sampling, with the PLD z without; at ε = ∞ the two
    trials agree bit for bit."""
    from esnfed_core.privacy import noise_multiplier, sampled_noise_multiplier  # noqa: PLC0415

    data = trial_data(pct="100")[0]
    inf = fit_private("fedip", CFG, 4, data, _settings(0.5), DPSpec(math.inf, 1e-3, amplification="sampling"))
    _same(inf, fit_private("fedip", CFG, 4, data, _settings(0.5), DPSpec(math.inf, 1e-3)))
    zs = spy_multipliers(monkeypatch)
    k, r = len(data.train), CFG["rounds"]
    fit_private("fedip", CFG, 4, data, _settings(0.5), _amplified())
    z_amp = sampled_noise_multiplier(4.0, 1e-3, r, sample_size(k, 0.5), k)
    assert zs == [("rounds", z_amp), ("readout", z_amp)]
    zs.clear()
    fit_private("fedip", CFG, 4, data, _settings(0.5), SPEC)
    assert zs == [("rounds", noise_multiplier(4.0, 1e-3, r + 1)), ("readout", noise_multiplier(4.0, 1e-3, r + 1))]
    assert z_amp > noise_multiplier(4.0, 1e-3, r + 1)  # 4 clients: amplification does not pay


def test_the_privacy_stage_records_amplification(tmp_path):
    import json  # noqa: PLC0415

    from esnfed_core.privacy import sampled_noise_multiplier  # noqa: PLC0415
    from experiment_data import cli_ok, make_dataset, small_params, stage_options, write_params  # noqa: PLC0415

    make_dataset(tmp_path)
    params = small_params()
    params["federated"] = {"client_fraction": 0.5}
    params["privacy"]["epsilons"] = [4.0]
    params["privacy"]["amplification"] = "sampling"
    write_params(tmp_path, params)
    common = stage_options(tmp_path)
    for algo in ("incfed", "fedip"):
        cli_ok("select", "--algo", algo, "--pct", str(params["privacy"]["pct"]), *common)
    cli_ok("privacy", *common, "--out-dir", str(tmp_path / "privacy"))
    doc = json.loads((tmp_path / "privacy" / "wesad.json").read_text())
    assert doc["amplification"] == "sampling" and "replace-one" in doc["sampled_accountant"]
    assert doc["params"]["privacy.amplification"] == "sampling"
    k, rounds = doc["n_users"], int(doc["methods"]["fedip"]["config"]["rounds"])
    assert doc["methods"]["fedip"]["epsilons"]["4"]["noise_multiplier"] == sampled_noise_multiplier(
        4.0, doc["delta"], rounds, sample_size(k, 0.5), k)


@pytest.mark.parametrize("section, why", [
    ({"amplification": "poisson"}, "privacy.amplification: must be one of none, sampling, got 'poisson'"),
])
def test_bad_amplification_is_refused_in_one_line(section, why):
    from esnfed_stages.params.privacy import privacy_params  # noqa: PLC0415

    base = {"epsilons": [1.0], "relation": "user"}
    with pytest.raises(ConfigError) as err:
        privacy_params({"privacy": {**base, **section}})
    assert "\n" not in str(err.value) and str(err.value).startswith(f"params.yaml: {why}")
