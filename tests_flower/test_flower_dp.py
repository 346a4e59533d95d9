"""Differential privacy in the Flower apps (esnfed_flower.dp, esnfed_core.privacy): at ε = ∞ the
apps are the plain apps bit for bit; central noise (plain apps: IncFed, FedIP, DP-FedAvg) is the
in-process private trial's release bit for bit (the server draws from the trial's noise
generator); distributed noise (SecAgg+ apps, each client N(0, σ²/K_min)) leaves the plain clipped
sum of the K' clients that stayed plus noise of std σ·√(K'/K_min), σ when one dropped (K' = K_min)."""

from __future__ import annotations

import json
import math
import re

import numpy as np
import pytest
import scipy.stats

from esnfed_core.federated import fedavg, incfed
from esnfed_core.privacy import (
    DPSpec, clip_norm, clipped_mean_stats, fedavg_aggregate, fedavg_sigma, ip_sigma, private_stats, released_stats,
    stats_bound, stats_sigma,
)
from esnfed_core.private_trial import fit_private, noise_rng, releases, trial_spec, unit_stats
from esnfed_core.method import Method
from esnfed_core.readout import ridge_stats, solve
from esnfed_core.settings import Settings
from esnfed_core.trial import make_reservoir, sub_seeds
from test_flower_apps import CFG, IP, LAM, SEED, _clients, _max_weight, _plain_fedip, _run_config, _simulate, bounded
from test_flower_apps import setup  # noqa: F401 (the module's fixture)

TRIAL_SEED = 7  # the private trial's: its reservoir, IP and noise seeds (esnfed_core.trial.sub_seeds)
SETTINGS = Settings(lambdas=(1e-4, 1e-2, 1.0), batch_size=5, ip={"batch_size": 4, "mu": 0.0, "eta": 0.01})
FEDIP_CFG = {**CFG, "sigma": 0.3, "rounds": 2, "local_epochs": 2}


def _dp(eps: float, noise: str, **spec) -> dict:
    """The run config's dp-* keys (as esnfed_stages.studies.flower.dp_run_config writes them)."""
    s = DPSpec(eps, 1e-3, "user", spec.get("clip", 0.05), spec.get("ip_clip", 0.03))
    fedavg_clip = {"dp-fedavg-clip": spec["fedavg_clip"]} if "fedavg_clip" in spec else {}  # DP-FedAvg's only
    return {"dp-epsilon": s.epsilon, "dp-delta": s.delta, "dp-clip": s.clip, "dp-ip-clip": s.ip_clip,
            "dp-noise": noise, "dp-releases": spec.get("releases", 1), **fedavg_clip}


def _trial_run(data, root, out, cfg: dict, **extra) -> dict:
    """A run config of the private trial's seeds (reservoir, IP) for ``cfg``."""
    seeds = sub_seeds(TRIAL_SEED)
    rc = _run_config(root, data, out, **{k: cfg[k] for k in CFG}, **extra)
    rc["reservoir-seed"] = seeds["reservoir"]
    if "rounds" in cfg:
        rc.update({"sigma": cfg["sigma"], "mu": 0.0, "eta": 0.01, "ip-batch-size": 4, "ip-seed": seeds["ip"],
                   "local-epochs": cfg["local_epochs"], "rounds": cfg["rounds"]})
    return rc


def _variance_in(noise: np.ndarray, sigma: float, alpha: float) -> bool:
    """n·s²/σ² of zero-mean draws lies in χ²(n)'s central 1 − α interval."""
    stat = float(np.sum(noise**2)) / sigma**2
    lo, hi = scipy.stats.chi2.ppf([alpha / 2, 1 - alpha / 2], noise.size)
    return lo <= stat <= hi


@pytest.mark.parametrize("app_name", ["incfed", "fedip", "fedavg"])
def test_infinite_epsilon_is_the_plain_app_bit_for_bit(setup, simulation, app_name):  # noqa: F811
    """ε = ∞ is no mechanism: the apps' readout (and FedIP's (g, b)) equal the plain apps' (which
    equal the pipeline's bit for bit, test_flower_apps.py)."""
    import importlib

    app = importlib.import_module(f"esnfed_flower.{app_name}")
    root, data, users = setup
    out = root / f"{app_name}-inf.npy"
    extra = {**(IP if app_name == "fedip" else {}), "dp-noise-seed": 3,
             **_dp(math.inf, "central", **({"fedavg_clip": 1e-3} if app_name == "fedavg" else {}))}
    _simulate(app, root, _run_config(root, data, out, **extra), len(users), simulation, config=f"{app_name}-inf.json")
    if app_name == "incfed":
        expected = incfed(make_reservoir(CFG, data.n_inputs, SEED), _clients(data, users), [LAM]).readouts[0]
    elif app_name == "fedavg":  # a clip far below every readout's norm would change it if it were applied
        expected = fedavg(make_reservoir(CFG, data.n_inputs, SEED), _clients(data, users), LAM)
    else:
        _, trained, expected = _plain_fedip(data, users)
        got = np.load(str(out) + ".ip.npz")
        np.testing.assert_array_equal(got["gain"], trained.gain)
        np.testing.assert_array_equal(got["bias"], trained.bias)
    np.testing.assert_array_equal(np.load(out), expected)


@pytest.mark.parametrize("algo", ["incfed", "fedip"])
def test_central_noise_is_the_private_trials_release_bit_for_bit(setup, simulation, algo):  # noqa: F811
    """The plain app with central DP solves the private trial's noisy statistics (and, FedIP, runs
    its noisy rounds) from the same generator: every λ's readout, the λ the trial chose on the
    validation users and FedIP's (g, b) are fit_private's bits."""
    import importlib

    root, data, users = setup
    cfg = FEDIP_CFG if algo == "fedip" else CFG
    spec = DPSpec(4.0, 1e-3, "user", 0.05, 0.03)
    n_rel = releases(Method.parse(algo), cfg)
    out = root / f"{algo}-central.npy"
    rc = _trial_run(data, root, out, cfg, **_dp(4.0, "central", releases=n_rel), **{"dp-noise-seed": TRIAL_SEED},
                    lambdas=list(SETTINGS.lambdas))
    _simulate(importlib.import_module(f"esnfed_flower.{algo}"), root, rc, len(users), simulation,
              config=f"{algo}-central.json")
    got = np.load(out)
    model = fit_private(algo, cfg, TRIAL_SEED, data, SETTINGS, spec)
    assert got.shape == (len(SETTINGS.lambdas), data.n_classes, cfg["units"])
    np.testing.assert_array_equal(got[list(SETTINGS.lambdas).index(model.lam)], model.readout)
    res = make_reservoir(cfg, data.n_inputs, sub_seeds(TRIAL_SEED)["reservoir"])
    if algo == "fedip":
        gb = np.load(str(out) + ".ip.npz")
        np.testing.assert_array_equal(gb["gain"], model.reservoir.gain)
        np.testing.assert_array_equal(gb["bias"], model.reservoir.bias)
        res = model.reservoir
    else:  # every λ: the release itself, drawn from the trial's generator
        stats = private_stats(unit_stats(res, data, SETTINGS), spec, noise_rng(TRIAL_SEED), n_rel)
        np.testing.assert_array_equal(got, solve(stats, list(SETTINGS.lambdas)))
    units = unit_stats(res, data, SETTINGS)
    plain = solve(sum(units[1:], units[0]), list(SETTINGS.lambdas))
    assert np.linalg.norm(got - plain) > 0.1 * np.linalg.norm(plain)  # the noise is there: not vacuous


def test_central_dp_fedavg_is_the_private_trials_release_bit_for_bit(setup, simulation):  # noqa: F811
    """The plain FedAvg app with central DP: the clients' readouts at the run's λ, clipped to
    fedavg_clip, summed with the noise of the private trial's generator and divided by K, are
    fit_private's DP-FedAvg readout bit for bit (one release at the config's λ). The clip binds for some
    clients and not others (the median norm), and the noise is there: the noiseless clipped mean differs."""
    from esnfed_flower import fedavg as app

    root, data, users = setup
    cfg = {**CFG, "lambda": LAM}  # DP-FedAvg trains at the config's λ: the app's run config λ
    norms: list[float] = []
    fit_private("fedavg", cfg, TRIAL_SEED, data, SETTINGS, DPSpec(math.inf, 1e-3), ip_norms=norms)
    clip = float(np.median(norms))
    assert min(norms) < clip < max(norms)  # clipping changes some readouts only
    spec = DPSpec(4.0, 1e-3, "user", 0.05, 0.03, fedavg_clip=clip)
    n_rel = releases(Method.parse("fedavg"), cfg)
    assert n_rel == 1
    out = root / "fedavg-central.npy"
    rc = _trial_run(data, root, out, cfg, **_dp(4.0, "central", releases=n_rel, fedavg_clip=clip),
                    **{"dp-noise-seed": TRIAL_SEED})
    _simulate(app, root, rc, len(users), simulation, config="fedavg-central.json")
    got = np.load(out)
    model = fit_private("fedavg", cfg, TRIAL_SEED, data, SETTINGS, spec)
    assert got.shape == (data.n_classes, cfg["units"]) and model.lam == LAM
    np.testing.assert_array_equal(got, model.readout)
    res = make_reservoir(cfg, data.n_inputs, sub_seeds(TRIAL_SEED)["reservoir"])
    msgs = [c.fit_readout(res, LAM) for c in _clients(data, users)]
    locals_, weights = [m.w for m in msgs], [m.num_examples for m in msgs]
    np.testing.assert_array_equal(got, fedavg_aggregate(spec, noise_rng(TRIAL_SEED))(locals_, weights))
    clean = sum(clip_norm(w, clip) for w in locals_) / len(users)
    noise = (got - clean) * len(users)  # N(0, σ²) per entry, σ = z·clip
    assert np.linalg.norm(got - clean) > 0.1 * np.linalg.norm(clean)
    assert 0.5 < float(noise.std()) / fedavg_sigma(spec) < 1.5  # 3·10 draws: the scale, loosely


def _secagg_run(app_module, setup, simulation, name: str, cfg: dict, eps: float, n_rel: int,  # noqa: F811
                **extra):
    root, data, users = setup
    out = root / f"{name}.npy"
    rc = _trial_run(data, root, out, cfg, **_max_weight(users), **_dp(eps, "distributed", releases=n_rel),
                    lambdas=list(SETTINGS.lambdas), **extra)
    _simulate(app_module, root, rc, len(users), simulation, dropout="drop-partition" in extra, config=f"{name}.json")
    return root, data, users, out, rc


K, K_MIN = 4, 3  # the setup's training users; SecAgg+'s threshold max(2, K − 1)
ALPHA = 1e-4  # the clients' noise is fresh from the OS (secret): a correct run fails with probability 1e-4


@pytest.mark.parametrize("drop", [None, 1])
def test_distributed_noise_under_secaggplus_incfed_has_the_stated_scale(setup, simulation, drop):  # noqa: F811
    """Each client adds N(0, σ²/K_min) to its clipped (Ā, B̄); SecAgg+ returns the sum of the K'
    clients that stayed: it differs from the plain sum of their clipped means by noise of variance
    σ²·K'/K_min (K' = 4: all stayed; K' = K_min = 3: one dropped after key sharing, the central σ²),
    told apart from σ²·K (each client adding σ) and σ²/K. The readout is solved from that sum."""
    from esnfed_flower import secagg as app

    cfg = {**CFG, "units": 16}  # 16·3 + 136 released numbers
    spec = DPSpec(2.0, 1e-3, "user", 0.05, 0.03)
    extra = {} if drop is None else {"drop-partition": drop}
    root, data, users, out, rc = _secagg_run(app, setup, simulation, f"secagg-dp-{drop}", cfg, 2.0, 1, **extra)
    stayed = [u for i, u in enumerate(users) if i != drop]
    assert json.loads((root / f"secagg-dp-{drop}.npy.json").read_text())["clients"] == len(stayed)
    res = make_reservoir(cfg, data.n_inputs, sub_seeds(TRIAL_SEED)["reservoir"])
    bound = spec.clip * stats_bound(16)
    clean = [clipped_mean_stats(ridge_stats(res, u.x, u.y, data.n_classes, 5), bound) for u in stayed]
    got = np.load(str(out) + ".dp.npz")
    iu = np.triu_indices(16)
    noise = np.concatenate([(got["a"] - sum(a for a, _ in clean)).ravel(), (got["b"] - sum(b for _, b in clean))[iu]])
    sigma = stats_sigma(spec, 16)
    want = sigma * math.sqrt(len(stayed) / K_MIN)
    print(f"distributed IncFed, K' = {len(stayed)}: sample std {noise.std():.4g}, stated σ·√(K'/K_min) {want:.4g}")
    assert _variance_in(noise, want, ALPHA)
    assert not _variance_in(noise, sigma * math.sqrt(K), ALPHA)
    assert not _variance_in(noise, sigma / math.sqrt(K), ALPHA)
    np.testing.assert_array_equal(np.load(out), solve(released_stats(got["a"], got["b"]), list(SETTINGS.lambdas)))


def test_distributed_noise_under_secaggplus_fedip_has_the_stated_scale(setup, simulation):  # noqa: F811
    """FedIP, one round: (g, b) = (g0, b0) + the mean of the K noisy clipped updates, so it differs
    from the plain mean of clip(Δ_c, C_ip) by noise of std σ_ip·√(K/K_min)/K; the statistics round
    on that reservoir as SecAgg+ IncFed's (σ·√(K/K_min)). Both, standardised, pooled."""
    from esnfed_flower import secagg_fedip as app
    from esnfed_flower.fedip import local_ip

    cfg = {**FEDIP_CFG, "units": 16, "rounds": 1}
    spec = DPSpec(2.0, 1e-3, "user", 0.05, 0.03)
    root, data, users, out, rc = _secagg_run(app, setup, simulation, "secagg-fedip-dp", cfg, 2.0, 2)
    res0 = make_reservoir(cfg, data.n_inputs, sub_seeds(TRIAL_SEED)["reservoir"])
    deltas = []
    for u in users:
        fitted = local_ip(rc, u.x, res0.gain, res0.bias, 0)
        deltas.append(clip_norm(np.concatenate([fitted.gain - res0.gain, fitted.bias - res0.bias]), spec.ip_clip))
    gb = np.load(str(out) + ".ip.npz")
    ip_noise = np.concatenate([gb["gain"], gb["bias"]]) - (np.concatenate([res0.gain, res0.bias]) + sum(deltas) / K)
    trained = res0.with_ip(gb["gain"], gb["bias"])
    bound = spec.clip * stats_bound(16)
    clean = [clipped_mean_stats(ridge_stats(trained, u.x, u.y, data.n_classes, 5), bound) for u in users]
    got = np.load(str(out) + ".dp.npz")
    iu = np.triu_indices(16)
    stats_noise = np.concatenate([(got["a"] - sum(a for a, _ in clean)).ravel(),
                                  (got["b"] - sum(b for _, b in clean))[iu]])
    ip_std = ip_sigma(spec, 2) * math.sqrt(K / K_MIN) / K
    st_std = stats_sigma(spec, 16, 2) * math.sqrt(K / K_MIN)
    print(f"distributed FedIP: (g, b) sample std {ip_noise.std():.4g} vs {ip_std:.4g}; "
          f"statistics {stats_noise.std():.4g} vs {st_std:.4g}")
    z = np.concatenate([ip_noise / ip_std, stats_noise / st_std])
    assert _variance_in(z, 1.0, ALPHA)
    assert not _variance_in(ip_noise, ip_std * K, ALPHA)  # the central σ_ip per client would be K² the variance


@pytest.mark.parametrize("amplification", ["none", "sampling"])
def test_sampled_central_dp_fedip_is_the_private_trials_sampled_release_bit_for_bit(setup, simulation,  # noqa: F811
                                                                                     amplification):
    """client-fraction 0.5 of 4 under central DP: each round the server privately averages the 2
    sampled replies (clipped, noised, divided by the public m = 2) from the trial's generator, so
    the (g, b), every λ's readout and the trial's chosen one are fit_private's sampled trial's bits;
    with ``dp-amplification: sampling`` both take z from the amplified accountant (R = 2, m = 2, K = 4),
    not the unamplified z. The sampled model is not the f = 1 one (sampling changed the rounds)."""
    from esnfed_flower import fedip as app
    from esnfed_flower.dp import flower_dp

    root, data, users = setup
    assert len(users) == 4 and all(len(u.x) for u in users)
    settings = Settings(lambdas=SETTINGS.lambdas, batch_size=5, ip={"batch_size": 4, "mu": 0.0, "eta": 0.01},
                        client_fraction=0.5)
    spec = DPSpec(4.0, 1e-3, "user", 0.05, 0.03, amplification=amplification)
    n_rel = releases(Method.parse("fedip"), FEDIP_CFG)
    out = root / f"fedip-sampled-{amplification}.npy"
    amp = {"dp-amplification": "sampling"} if amplification == "sampling" else {}
    rc = _trial_run(data, root, out, FEDIP_CFG, **_dp(4.0, "central", releases=n_rel), **amp,
                    **{"dp-noise-seed": TRIAL_SEED, "client-fraction": 0.5}, lambdas=list(SETTINGS.lambdas))
    _simulate(app, root, rc, len(users), simulation, config=f"fedip-sampled-{amplification}.json")
    model = fit_private("fedip", FEDIP_CFG, TRIAL_SEED, data, settings, spec)
    gb = np.load(str(out) + ".ip.npz")
    np.testing.assert_array_equal(gb["gain"], model.reservoir.gain)
    np.testing.assert_array_equal(gb["bias"], model.reservoir.bias)
    got = np.load(out)
    np.testing.assert_array_equal(got[list(SETTINGS.lambdas).index(model.lam)], model.readout)
    # the accounting the app ran with is the trial's
    used = trial_spec(Method.parse("fedip"), FEDIP_CFG, data, settings, spec)
    z_app, z_plain = flower_dp(rc, "central").spec.multiplier(n_rel), DPSpec(4.0, 1e-3).multiplier(n_rel)
    assert z_app == used.multiplier(n_rel)
    if amplification == "sampling":
        assert used.sampled == (2, 2, 4) and abs(z_app - z_plain) > 0.01 * z_plain
    else:
        assert used.sampled is None and z_app == z_plain
    full = fit_private("fedip", FEDIP_CFG, TRIAL_SEED, data, SETTINGS, spec)
    assert np.max(np.abs(full.reservoir.gain - model.reservoir.gain)) > 1e-6  # sampling changed the rounds


class _Reply:
    """A role reply as replies_in_order reads it: partition id, window count, sender."""

    def __init__(self, node: int, pid: int, windows: int):
        self.content = {"metrics": {"partition-id": pid, "windows": windows}}
        self.metadata = type("Meta", (), {"src_node_id": node})()

    @staticmethod
    def has_content() -> bool:
        return True


def test_a_dropout_in_a_sampled_central_dp_round_stops_the_run_in_one_line(setup, simulation):  # noqa: F811
    """Central DP at client-fraction 0.5 of 4: a client sampled in round 1 fails instead of replying
    (replies < m = 2). The release would divide the clipped sum of the 1 reply plus the noise by the
    public m, a sound release, but the plain apps take no dropouts (any missing reply stops them,
    with or without DP) and the private trial has none to match: the run stops in one line naming
    the round, within a bounded time, and writes no readout."""
    from esnfed_core.sampling import sample_clients
    from esnfed_flower import fedip as app

    root, data, users = setup
    out = root / "fedip-sampled-dropout.npy"
    rc = _trial_run(data, root, out, FEDIP_CFG, **_dp(4.0, "central", releases=releases(Method.parse("fedip"),
                                                                                          FEDIP_CFG)),
                    **{"dp-noise-seed": TRIAL_SEED, "client-fraction": 0.5}, lambdas=list(SETTINGS.lambdas))
    first = sample_clients(len(users), 0.5, rc["ip-seed"], 0)
    assert len(first) == 2  # m = 2: the dropout leaves 1 reply
    with bounded(300), pytest.raises(RuntimeError) as info:  # a full run here takes ~15 s
        _simulate(app, root, {**rc, "drop-partition": first[0], "drop-round": 1}, len(users), simulation.alone,
                  dropout=True, config="fedip-sampled-dropout.json")
    assert re.fullmatch(r"round 1: node \d+ sent no reply \(.+\); the plain apps need every sampled client's "
                        r"reply \(a dropout stops the run\)", str(info.value)), str(info.value)
    assert "\n" not in str(info.value) and not out.exists()


def test_sampled_dp_fedip_refuses_a_client_without_windows_in_one_line():
    """DP-FedIP's sampled rounds draw over every training client (the public m is of all K): a
    node without windows is one line naming client-fraction and its partition, as the pipeline's
    trial refuses (esnfed_core.private_trial.sampled_denominator); without DP it is left out."""
    from esnfed_flower.fedip import with_windows

    class Grid:
        def send_and_receive(self, msgs):
            return [_Reply(m.metadata.dst_node_id, i, 0 if i == 2 else 5) for i, m in enumerate(msgs)]

    nodes = [11, 12, 13, 14]
    assert with_windows(Grid(), nodes, {}) == [11, 12, 14]
    with pytest.raises(ValueError, match=r"^client-fraction: DP-FedIP samples over every training client, but "
                                         r"partition 2 has no windows; set it to 1$"):
        with_windows(Grid(), nodes, {}, every=True)


def _sampled_rc(k: int, fraction: float | None, eps: float = 2.0, **extra) -> dict:
    """A SecAgg+ FedIP run config's keys flower_dp reads: K clients, ``client-fraction`` (None: 1)."""
    frac = {} if fraction is None else {"client-fraction": fraction}
    return {"num-clients": k, "rounds": 2, **frac, **_dp(eps, "distributed", releases=3), **extra}


# (K, f) -> K_min of an IP round, by hand: m = ⌊f·K⌋ sampled, SecAgg+'s threshold max(2, m − 1)
ROUND_K_MIN = {(4, 0.75): 2, (10, 0.5): 4, (7, 0.5): 2, (12, 0.75): 8}


@pytest.mark.parametrize("k, fraction", sorted(ROUND_K_MIN))
def test_sampled_distributed_shares_are_sized_for_the_rounds_threshold(k, fraction):
    """Client sampling under distributed DP: an IP round's share is N(0, σ_ip²/K_min(m)) with K_min(m)
    the threshold of the round's m sampled clients (ROUND_K_MIN, by hand), the statistics round's
    N(0, σ²/K_min(K)); σ_ip = z·C_ip from the accountant. Checked on the bits (the share is the
    clipped update plus exactly those normal draws of the client's generator) and on the std (χ²,
    20000 draws). A dropout leaves K' ≥ K_min(m) survivors: K_min(m) shares sum to std σ_ip (χ²), and
    every K' up to m to σ_ip·√(K'/K_min(m)) ≥ σ_ip. SecAgg+'s range covers RANGE_STDS of the larger share."""
    from esnfed_core.privacy import sum_std
    from esnfed_flower.dp import RANGE_STDS, flower_dp

    dp = flower_dp(_sampled_rc(k, fraction), "distributed")
    k_min = ROUND_K_MIN[(k, fraction)]
    assert (dp.min_clients, dp.ip_min_clients) == (max(2, k - 1), k_min)
    sigma_ip = DPSpec(2.0, 1e-3).multiplier(3) * 0.03
    n = 10_000
    zero = [np.zeros(n), np.zeros(n)]
    share = np.concatenate(dp.update_share(zero, np.random.default_rng(5)))
    np.testing.assert_array_equal(share, np.random.default_rng(5).normal(0.0, sigma_ip / math.sqrt(k_min), 2 * n))
    assert _variance_in(share, sigma_ip / math.sqrt(k_min), ALPHA)
    assert not _variance_in(share, sigma_ip / math.sqrt(dp.min_clients), ALPHA) or k_min == dp.min_clients
    survivors = sum(np.concatenate(dp.update_share(zero, np.random.default_rng(100 + i))) for i in range(k_min))
    assert _variance_in(survivors, sigma_ip, ALPHA)  # a round where the most clients SecAgg+ allows dropped
    m = int(k * fraction)
    assert all(sum_std(sigma_ip, kept, k_min) >= sigma_ip * (1 - 1e-12) for kept in range(k_min, m + 1))
    assert dp.clipping_range(10) >= 0.03 + RANGE_STDS * sigma_ip / math.sqrt(k_min)


def test_distributed_dp_at_fraction_1_sizes_its_ip_shares_as_before():
    """At fraction 1 an IP round's K_min is the full roster's, and a share is client_update_share's
    at that K_min bit for bit (the default path unchanged)."""
    from esnfed_core.privacy import client_update_share
    from esnfed_flower.dp import flower_dp

    dp = flower_dp(_sampled_rc(4, None), "distributed")
    assert dp.ip_min_clients == dp.min_clients == 3
    update = np.linspace(-0.1, 0.1, 20)
    got = np.concatenate(dp.update_share([update[:10], update[10:]], np.random.default_rng(3)))
    np.testing.assert_array_equal(got, client_update_share(update, dp.spec, 3, np.random.default_rng(3), 3))


def test_the_apps_default_noise_is_the_os_csprng_whatever_the_run_configs_seeds():
    """A deployment's run config without dp-noise-seed: the central server's source is the OS
    CSPRNG, so two runs of the same config (its reservoir and IP seeds included) draw different
    noise; the SecAgg+ clients' shares likewise. dp-noise-seed set: the pipeline's noise_rng of it
    (the in-process trial's draws) and a warning that the noise is seeded (a simulation)."""
    import logging

    from esnfed_core.privacy import SystemGaussian
    from esnfed_flower.dp import flower_dp

    rc = {"num-clients": 6, "reservoir-seed": 3, "ip-seed": 5, **_dp(2.0, "central", releases=3)}
    first, second = flower_dp(rc, "central"), flower_dp(dict(rc), "central")
    assert first == second and first.noise_seed is None
    assert isinstance(first.server_rng(), SystemGaussian)
    assert not np.array_equal(first.server_rng().normal(0.0, 1.0, 50), second.server_rng().normal(0.0, 1.0, 50))
    dist = flower_dp({**rc, **_dp(2.0, "distributed", releases=3)}, "distributed")
    zero = [np.zeros(20), np.zeros(20)]
    assert not np.array_equal(np.concatenate(dist.update_share(zero)), np.concatenate(dist.update_share(zero)))

    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append
    logger = logging.getLogger("flwr")
    logger.addHandler(handler)
    try:
        seeded = flower_dp({**rc, "dp-noise-seed": TRIAL_SEED}, "central").server_rng()
    finally:
        logger.removeHandler(handler)
    np.testing.assert_array_equal(seeded.normal(0.0, 1.0, 50), noise_rng(TRIAL_SEED).normal(0.0, 1.0, 50))
    assert any("dp-noise-seed" in r.getMessage() and "simulation" in r.getMessage() for r in records)


def test_distributed_dp_refuses_amplification_in_one_line():
    """Amplification by sampling needs the sampled set secret from the adversary; under SecAgg+ the
    adversary is the server, which picks it: dp-amplification sampling is one line naming the key
    (central noise takes it: test above)."""
    from esnfed_core.validation import ParameterError
    from esnfed_flower.dp import flower_dp

    rc = _sampled_rc(4, 0.75, **{"dp-amplification": "sampling"})
    with pytest.raises(ParameterError, match=r"^dp-amplification: sampling is not available with distributed noise "
                                             r"\(SecAgg\+\): the server picks each round's clients, so the sample is "
                                             r"not secret from it and amplification does not hold; use none$"):
        flower_dp(rc, "distributed")
    assert flower_dp({**rc, "dp-noise": "central"}, "central").spec.sampled == (2, 3, 4)


@pytest.mark.parametrize("drop", [None, "sampled"])
def test_sampled_distributed_dp_fedip_is_the_central_release_up_to_noise_of_the_rounds_size(  # noqa: F811
        setup, simulation, drop):
    """client-fraction 0.75 of 4 under distributed DP, one IP round of 400 units: the round reaches the
    private trial's sampled set (its m = 3 clients), the app's z is the trial's (unamplified), and its
    (g, b) differs from fit_private's sampled central release (g_c, b_c) only by noise: with the
    central draw n_c recomputed from the trial's generator, r = m·((g, b) − (g_c, b_c)) + n_c (plus,
    when a sampled client dropped after key sharing, its clipped update, which the central release
    holds) is the noise of the survivors' shares: N(0, σ_ip²·K'/K_min(m)), K_min(m) = 2, K' = 3, or 2
    when one dropped (exactly σ_ip: the accounted noise), by χ² (α = 1e-4, 800 entries), told apart
    from shares sized for the full roster's K_min = 3 (variance ×2/3) and, with the dropout, from a
    server dividing by K' instead of the public m (×9/4). The statistics round (every client, K_min = 3)
    carries σ·√(4/3) as at fraction 1."""
    from esnfed_core.sampling import sample_clients
    from esnfed_flower import secagg_fedip as app
    from esnfed_flower.dp import flower_dp
    from esnfed_flower.fedip import local_ip

    root, data, users = setup
    units, fraction, m, k_min = 400, 0.75, 3, 2
    cfg = {**FEDIP_CFG, "units": units, "rounds": 1}
    spec = DPSpec(2.0, 1e-3, "user", 0.05, 0.03)
    n_rel = releases(Method.parse("fedip"), cfg)
    settings = Settings(lambdas=SETTINGS.lambdas, batch_size=5, ip={"batch_size": 4, "mu": 0.0, "eta": 0.01},
                        client_fraction=fraction)
    seeds = sub_seeds(TRIAL_SEED)
    sampled = sample_clients(len(users), fraction, seeds["ip"], 0)  # the pipeline's round 0 set
    drop_pid = None if drop is None else sampled[1]
    extra = {} if drop is None else {"drop-partition": drop_pid, "drop-round": 1}
    bytes_dir = root / f"secagg-fedip-dp-sampled-{drop}-bytes"
    bytes_dir.mkdir()
    root, data, users, out, rc = _secagg_run(app, setup, simulation, f"secagg-fedip-dp-sampled-{drop}", cfg, 2.0,
                                             n_rel, **{"client-fraction": fraction, "bytes-dir": str(bytes_dir)},
                                             **extra)
    from test_flower_apps import _flower_rounds
    assert _flower_rounds(bytes_dir)[1] == set(sampled) and len(sampled) == m
    kept = [i for i in sampled if i != drop_pid]
    info = json.loads((root / f"secagg-fedip-dp-sampled-{drop}.npy.json").read_text())
    assert info == {"clients": 4, "sampled": 4, "min_clients": 3, "ip_clients": [len(kept)], "ip_sampled": m,
                    "ip_min_clients": k_min}
    used = trial_spec(Method.parse("fedip"), cfg, data, settings, spec)
    assert flower_dp(rc, "distributed").spec.multiplier(n_rel) == used.multiplier(n_rel) == spec.multiplier(n_rel)
    model = fit_private("fedip", cfg, TRIAL_SEED, data, settings, spec)  # the sampled central release
    res0 = make_reservoir(cfg, data.n_inputs, seeds["reservoir"])
    start = np.concatenate([res0.gain, res0.bias]).astype(np.float64)
    clipped = {}
    for i in sampled:
        fitted = local_ip(rc, users[i].x, res0.gain, res0.bias, 0)
        clipped[i] = clip_norm(np.concatenate([fitted.gain, fitted.bias]) - start, spec.ip_clip)
    sigma_ip = ip_sigma(spec, n_rel)
    n_c = noise_rng(TRIAL_SEED).normal(0.0, sigma_ip, start.shape)  # the trial's first draw: round 1's noise
    central = np.concatenate([model.reservoir.gain, model.reservoir.bias]).astype(np.float64)
    # the reconstruction of the central release is exact up to float64 rounding (and the float32 cast, if any)
    np.testing.assert_allclose(central, start + (sum(clipped.values()) + n_c) / m, rtol=0, atol=1e-6)
    gb = np.load(str(out) + ".ip.npz")
    got = np.concatenate([gb["gain"], gb["bias"]]).astype(np.float64)
    r = m * (got - central) + n_c + sum(clipped[i] for i in sampled if i not in kept)
    want = sigma_ip * math.sqrt(len(kept) / k_min)
    print(f"sampled distributed FedIP, K' = {len(kept)}: residual std {r.std():.4g}, stated {want:.4g}")
    assert want >= sigma_ip * (1 - 1e-12)
    assert _variance_in(r, want, ALPHA)
    assert not _variance_in(r, sigma_ip * math.sqrt(len(kept) / 3), ALPHA)  # shares sized for the full roster
    if drop is not None:
        assert not _variance_in(r, want * m / len(kept), ALPHA)  # divided by K' = 2, not the public m = 3
    trained = res0.with_ip(gb["gain"], gb["bias"])
    bound = spec.clip * stats_bound(units)
    clean = [clipped_mean_stats(ridge_stats(trained, u.x, u.y, data.n_classes, 5), bound) for u in users]
    st = np.load(str(out) + ".dp.npz")
    iu = np.triu_indices(units)
    stats_noise = np.concatenate([(st["a"] - sum(a for a, _ in clean)).ravel(),
                                  (st["b"] - sum(b for _, b in clean))[iu]])
    assert _variance_in(stats_noise, stats_sigma(spec, units, n_rel) * math.sqrt(4 / 3), ALPHA)
