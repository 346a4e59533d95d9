"""Tests of DP-FedIP with client sampling (federated.client_fraction < 1, esnfed_core.private_trial):
f = 1 is the unsampled private trial bit for bit, ε = ∞ is the non-private sampled trial bit for bit,
each round clips and sums exactly the sampled clients and divides by the public m, the accounting
is the unsampled one (no amplification), and DP-FedCLIP still refuses a fraction below 1 in one line."""

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
    seen: dict[str, object] = {}
    original = private_trial.fedip_aggregate

    def spy(spec, rng, releases, norms=None, clients=None):
        seen["clients"], seen["releases"] = clients, releases
        inner = original(spec, rng, releases, norms, clients=clients)

        def aggregate(start, gains, biases, weights):
            seen.setdefault("uploads", []).append(len(gains))
            return inner(start, gains, biases, weights)
        return aggregate

    monkeypatch.setattr(private_trial, "fedip_aggregate", spy)
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
    assert "\n" not in msg and msg.startswith(f"federated.client_fraction: not available for DP-{method} ")
    assert msg.endswith("set federated.client_fraction: 1")


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
