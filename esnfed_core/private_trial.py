"""A trial of IncFed, FedIP or (opt-in) FedAvg and FedCLIP (naive, replay) under differential privacy
(:mod:`esnfed_core.privacy`): the same reservoir, IP and readout code as :mod:`esnfed_core.trial`,
with the server's sums replaced by the Gaussian mechanism. ε = ∞ is the non-private trial, bit for bit.

IncFed and FedIP: λ is chosen on the validation users (not the training clients the guarantee
protects) from the settings' grid, as a retrain with ``retrain.lambda: select`` does: every λ is a
post-processing of the one released sum. DP-FedAvg releases one readout per λ, so it trains at the
selected config's λ only (one release; choosing on the grid would cost one release per λ).
DP-FedCLIP (naive, replay) runs FedIP's private rounds and IncFed's private readout at every context;
its readout at context t takes λ from the grid on the validation users' windows of context t (post-processing).
federated.client_fraction < 1: DP-FedIP's rounds sample their clients and divide by the public m,
accounted as without sampling (no amplification) unless privacy.amplification is ``sampling``
(replace-one, RDP: :func:`trial_spec`); DP-FedCLIP's rounds do so only with federated.sampling_pool
``roster`` (a draw over all training clients, data-independent), and refuse the ``context`` pool
(docs/privacy.md).
With readout.bias every released statistic is of the augmented states [s, 1] (sensitivity
√((N+1) + (N+1)²), esnfed_core.privacy) and DP-FedAvg clips the whole (C, N+1) local readout.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

import numpy as np

from esnfed_core.method import Method
from esnfed_core.errors import ConfigError
from esnfed_core.privacy import DPSpec, fedavg_aggregate, fedip_aggregate, private_stats
from esnfed_core.quote import quote
from esnfed_core.readout import RidgeStats, evaluate, ridge_stats, solve
from esnfed_core.reservoir import Reservoir
from esnfed_core.sampling import FULL, KEY as SAMPLING_KEY, POOL_KEY, ROSTER_POOL, sample_size
from esnfed_core.scoring import pooled_counts
from esnfed_core.settings import Settings
from esnfed_core.trial import (
    FittedModel, StatsOnceClient, TrialData, _ip_config, check_config, clients_of, continual_contexts, fit_continual,
    make_reservoir, select_lambda, stationary_model, sub_seeds,
)

PRIVATE_ALGOS = ("incfed", "fedip")  # the privacy stage's methods (params.yaml privacy.methods)
EXTRA_ALGOS = ("fedavg", "fedclip-naive", "fedclip-replay")  # opt-in (privacy.extra_methods): own stage and documents
# Why the other FedCLIP strategy is refused (one line, privacy.extra_methods).
UNCOVERED = {"fedclip-joint": "joint's rounds per context stop on the validation users' accuracy of the noisy "
                              "model, so the number of releases is adaptive (unbounded with continual.joint.max_rounds "
                              "null); its accounting is not implemented"}


def releases(method: Method, config: Mapping[str, Any], n_contexts: int = 1) -> int:
    """Gaussian mechanisms one trial runs: FedIP's rounds and the IncFed release; DP-FedAvg's one
    readout release; DP-FedCLIP's ``budget`` IP rounds and one readout at each of ``n_contexts``
    contexts (a user with data in several contexts is in several releases: all are composed)."""
    if method.continual:
        return int(n_contexts) * (int(config["budget"]) + 1)
    return 1 + (int(config["rounds"]) if method.uses_ip else 0)


def sampled_denominator(method: Method, data: TrialData, settings: Settings) -> int | None:
    """K of a sampled DP-FedIP round: the public m = max(1, ⌊f·K⌋) of the K training clients
    (federated.client_fraction f < 1), None at f = 1 (the round's uploads, as before). The rounds
    draw over every training client, so each must hold windows (one without would leave the draw)."""
    fraction = settings.fraction_for(method)
    if fraction == FULL:
        return None
    empty = [name for name, u in data.train.items() if len(u.x) == 0]
    if empty:
        raise ConfigError(f"{SAMPLING_KEY}: DP-{method.id} samples over every training client, but "
                          f"{quote(empty[0])} has no windows; set {SAMPLING_KEY}: 1")
    return sample_size(len(data.train), fraction)


def roster_denominator(method: Method, data: TrialData, settings: Settings) -> int | None:
    """m of a sampled DP-FedCLIP round: max(1, ⌊f·K⌋) of the K training clients when its rounds draw
    over the roster (federated.sampling_pool ``roster``, f < 1), None otherwise (K, every round)."""
    return sample_size(len(data.train), settings.client_fraction) if settings.roster_for(method) else None


def trial_spec(method: Method, config: Mapping[str, Any], data: TrialData, settings: Settings, spec: DPSpec) -> DPSpec:
    """``spec`` for one trial: with ``privacy.amplification: sampling`` and sampled rounds
    (federated.client_fraction < 1, user level) it carries (R, m, K) for DP-FedIP's R rounds and
    one IncFed release, (T·budget, m, K, T) for DP-FedCLIP's roster-sampled rounds and T readouts
    (T contexts), so its z is the amplified one (:func:`esnfed_core.privacy.sampled_noise_multiplier`);
    otherwise ``spec`` itself (f = 1: the unamplified path)."""
    if spec.amplification == "none" or not spec.private or not method.family.fedip_rounds:
        return spec
    if method.continual:
        m = roster_denominator(method, data, settings)
        contexts = int(data.n_contexts)
        shape = (contexts * int(config["budget"]), m, len(data.train), contexts)
    else:
        m = sampled_denominator(method, data, settings)
        shape = (int(config["rounds"]), m, len(data.train))
    if m is None:
        return spec
    return dataclasses.replace(spec, sampled=shape)


def noise_rng(seed: int) -> np.random.Generator:
    """The trusted server's noise generator of the trial of ``seed``: every release of
    :func:`fit_private` draws from it in order (the central Flower apps draw the same)."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), 0x5EED_D9]))


def unit_stats(res: Reservoir, data: TrialData, settings: Settings) -> list[RidgeStats]:
    """The neighbouring units' statistics: one per training client (user level)."""
    return [ridge_stats(res, u.x, u.y, data.n_classes, settings.batch_size, settings.readout_bias)
            for u in data.train.values()]


def fit_private(method: str | Method, config: Mapping[str, Any], seed: int, data: TrialData,
                settings: Settings, spec: DPSpec, ip_norms: list[float] | None = None) -> FittedModel:
    """Train ``method`` (incfed | fedip) from ``seed`` under ``spec``; scored on validation.
    ``ip_norms`` (FedIP): every client's round update ‖(Δg, Δb)‖₂ before clipping is appended
    (rounds in order, clients in order within a round; ε = ∞ too); the model is unchanged."""
    m = method if isinstance(method, Method) else Method.parse(method)
    if m.continual and settings.client_fraction != FULL and not settings.roster_for(m):
        raise ConfigError(f"{SAMPLING_KEY}: DP-{m.id} needs {POOL_KEY}: {ROSTER_POOL} (the context pool samples among "
                          f"a context's participants, who depend on the users' data), or set {SAMPLING_KEY}: 1")
    if m.id in UNCOVERED:
        raise ConfigError(f"privacy.extra_methods: {m.id} is not covered: {UNCOVERED[m.id]} "
                          "(DP-FedCLIP: fedclip-naive, fedclip-replay)")
    if m.id not in PRIVATE_ALGOS + EXTRA_ALGOS:
        raise ValueError(f"fit_private: {m.id} is not one of {', '.join(PRIVATE_ALGOS + EXTRA_ALGOS)}")
    if m.continual:
        return _fit_fedclip(m, config, seed, data, settings, spec, ip_norms)
    if m.readout_per_lambda:  # one readout release at the config's λ
        return _fit_fedavg(m, config, seed, data, settings, spec, ip_norms)
    cfg = {k: v for k, v in config.items() if k != "lambda"}
    check_config(m, cfg)
    spec = trial_spec(m, cfg, data, settings, spec)
    seeds = sub_seeds(seed)
    noise = noise_rng(seed)
    n_releases = releases(m, cfg)
    res = make_reservoir(cfg, data.n_inputs, seeds["reservoir"])
    if m.uses_ip:
        from esnfed_core.federated import fedip  # noqa: PLC0415

        fraction = settings.fraction_for(m)
        agg = (fedip_aggregate(spec, noise, n_releases, ip_norms, clients=sampled_denominator(m, data, settings))
               if spec.private or ip_norms is not None else None)
        res = fedip(res, [u.x for u in data.train.values()], _ip_config(cfg, settings),
                    rounds=int(cfg["rounds"]), local_epochs=int(cfg["local_epochs"]), seed=seeds["ip"],
                    client_names=list(data.train), aggregate=agg, client_fraction=fraction)
    stats = private_stats(unit_stats(res, data, settings), spec, noise, n_releases)
    lambdas = [float(x) for x in settings.lambdas]
    readouts = solve(stats, lambdas, settings.solver)
    counts = pooled_counts(res, list(data.validation.values()), readouts, settings.batch_size)
    return stationary_model(m, cfg, int(seed), seeds, data, res, readouts, lambdas, None, [], counts)


def _fit_fedavg(m: Method, config: Mapping[str, Any], seed: int, data: TrialData, settings: Settings,
                spec: DPSpec, norms: list[float] | None) -> FittedModel:
    """DP-FedAvg: every client's local readout at the config's λ, clipped, summed and noised
    (:func:`esnfed_core.privacy.fedavg_aggregate`); ``norms``: each readout's norm before clipping.
    ε = ∞: the non-private FedAvg trial at that λ (``fit(..., config with lambda)``), bit for bit."""
    from esnfed_core.federated import fedavg  # noqa: PLC0415

    check_config(m, config, need_lambda=True)
    cfg = dict(config)
    lam = float(cfg["lambda"])
    seeds = sub_seeds(seed)
    res = make_reservoir(cfg, data.n_inputs, seeds["reservoir"])
    agg = fedavg_aggregate(spec, noise_rng(seed), releases(m, cfg), norms) if spec.private or norms is not None else None
    readouts = fedavg(res, clients_of(data, settings, StatsOnceClient), lam, aggregate=agg)[None]
    counts = pooled_counts(res, list(data.validation.values()), readouts, settings.batch_size)
    return stationary_model(m, cfg, int(seed), seeds, data, res, readouts, [lam], None, [], counts)


def _fit_fedclip(m: Method, config: Mapping[str, Any], seed: int, data: TrialData, settings: Settings,
                 spec: DPSpec, norms: list[float] | None) -> FittedModel:
    """DP-FedCLIP (naive, replay): at every context, ``budget`` FedIP rounds whose server adds the noise of
    :func:`esnfed_core.privacy.fedip_aggregate` (K fixed: all training clients; sampled over the
    roster, federated.sampling_pool ``roster``: the public m, :func:`roster_denominator`) and a readout from
    :func:`esnfed_core.privacy.private_stats` of the participants' statistics, λ chosen on the
    validation users' windows of that context; one z for the T·(budget + 1) releases. Replay: a
    client's buffered past windows enter its later contexts' updates and statistics, which are
    clipped per client and release all the same (user level: the count is unchanged). ``norms``: each
    IP update's norm before clipping. ε = ∞: the non-private FedCLIP trial, bit for bit."""
    cfg = {k: v for k, v in config.items() if k != "lambda"}
    check_config(m, cfg)
    spec = trial_spec(m, cfg, data, settings, spec)
    seeds = sub_seeds(seed)
    if not spec.private and norms is None:
        return fit_continual(m, cfg, int(seed), seeds, data, settings, True)
    noise = noise_rng(seed)
    n_releases = releases(m, cfg, data.n_contexts)
    contexts = continual_contexts(m, data)
    lambdas = [float(x) for x in settings.lambdas]

    def readout(res, stats, t: int) -> np.ndarray:  # naive and replay solve once a context: t is the context
        readouts = solve(private_stats(list(stats), spec, noise, n_releases), lambdas, settings.solver)
        x, y = contexts[2][t]  # the validation users' windows of this context (naive: no memory of others)
        counts = evaluate(res, x, y, readouts, settings.batch_size) if len(x) else None
        return readouts[select_lambda(counts, lambdas)[0]]

    clients = roster_denominator(m, data, settings) or len(data.train)
    server = {"aggregate": fedip_aggregate(spec, noise, n_releases, norms, clients=clients)}
    if spec.private:
        server["readout"] = readout
    return fit_continual(m, cfg, int(seed), seeds, data, settings, True, contexts=contexts, server=server)
