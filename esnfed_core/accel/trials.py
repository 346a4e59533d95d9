"""Stationary trials batched on the torch kernels: trials of one method on the same data with
reservoirs of one size train and score together, one bmm per step over trials × windows.

:func:`fit_batch` returns the same FittedModels as :func:`esnfed_core.trial.fit` on each trial
(equal within float32 rounding): the same seeds, mini-batch orders, messages and λ choice; only
the state passes (IP epochs, FedIP rounds with every client of every trial at once, ridge
statistics, validation counts) run on the device. The servers' work (FedIP averaging, IncFed
sums, FedAvg, the solves) is the numpy code itself, fed with the batched clients' results.

Memory on the device: the training and validation windows (float32), the bank of weights
(trials × clients × N² floats during FedIP), the chunk buffers of torch_reservoir (≤ 3 × 128
MiB unless one step of slots × windows × N is larger; a CUDA graph of accel.ip_rounds holds its
own while its segment runs), and an IP round's mini-batch plan (steps × slots × 100 × 12 bytes:
~0.2 GB for 576 slots of 300 steps). ``max_trials`` bounds a batch.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
import torch

from esnfed_core.accel import check_supported, torch_device
from esnfed_core.accel.ip_rounds import RoundPlan, run_round
from esnfed_core.accel.passes import DeviceWindows, counts_of, stats_of
from esnfed_core.accel.torch_reservoir import Bank, tf32
from esnfed_core.federated import fedavg, incfed
from esnfed_core.messages import CommLedger, StatsMessage
from esnfed_core.method import Method
from esnfed_core.readout import Counts, solve
from esnfed_core.reservoir import Reservoir
from esnfed_core.sampling import sample_clients
from esnfed_core.settings import Settings
from esnfed_core.trial import (
    FittedModel, StatsOnceClient, TrialData, check_config, clients_of, make_reservoir, stationary_model,
    sub_seeds,
)

# Trials per batch the trial runner groups (FedIP: times the clients in the bank): 64 trials of
# 500 units with 9 clients hold 64·9·500² floats = 0.6 GB of weights, far below an 80 GB GPU.
MAX_TRIALS = 64


def fit_batch(
    method: str | Method,
    configs: Sequence[Mapping[str, Any]],
    seeds: Sequence[int],
    data: TrialData,
    settings: Settings,
    *,
    score: bool = True,
) -> list[FittedModel]:
    """Train (and with ``score``, score) one trial per (config, seed), batched: stationary
    methods here, continual ones by :func:`esnfed_core.accel.continual.fit_continual_batch`.

    Every config must have the same ``units``; ``settings.device`` picks the torch device.
    """
    m = method if isinstance(method, Method) else Method.parse(method)
    if m.deep or m.heterogeneous:  # the random baseline: check_supported's one-line refusal
        raise ValueError(f"fit_batch: {m.id} runs on the numpy path only")
    for cfg in configs:
        check_supported(m, cfg, settings.device)
    if m.continual:
        from esnfed_core.accel.continual import fit_continual_batch  # noqa: PLC0415 (imports this module)

        return fit_continual_batch(m, configs, seeds, data, settings, score=score)
    if len(configs) != len(seeds) or not configs:
        raise ValueError(f"fit_batch: {len(configs)} configs for {len(seeds)} seeds")
    for cfg in configs:
        check_config(m, cfg, need_lambda=not score)
    units = {int(cfg["units"]) for cfg in configs}
    if len(units) != 1:
        raise ValueError(f"fit_batch: one reservoir size per batch, got units {sorted(units)}")
    dev = torch_device(settings.device)
    with tf32(settings.tf32 and dev == "cuda"):
        return _fit_batch(m, configs, seeds, data, settings, score, dev)


def _fit_batch(m: Method, configs, seeds, data: TrialData, settings: Settings, score: bool,
               dev: str) -> list[FittedModel]:
    subs = [sub_seeds(s) for s in seeds]
    reservoirs = [make_reservoir(cfg, data.n_inputs, sd["reservoir"]) for cfg, sd in zip(configs, subs)]
    users = list(data.train.values())
    names = list(data.train)
    train = DeviceWindows.of(users, dev)
    ledgers = [CommLedger() if m.federated else None for _ in configs]
    if m.uses_ip:
        reservoirs = _train_ip(m, configs, subs, reservoirs, train, names, settings, ledgers, dev)
    bank = Bank.from_reservoirs(reservoirs, dev)
    client_stats = [stats_of(bank, *train.user(c), data.n_classes, settings.readout_bias)
                    for c in range(len(users))]

    out_readouts, out_lambdas, out_fed = [], [], []
    for i, (res, cfg) in enumerate(zip(reservoirs, configs)):
        lambdas = [float(cfg["lambda"])] if "lambda" in cfg else [float(x) for x in settings.lambdas]
        fed_ledgers: list[CommLedger] = []
        if m.family.aggregation == "pooled":
            readouts = solve(sum(cs[i] for cs in client_stats), lambdas, settings.solver)
        else:
            clients = clients_of(data, settings, StatsOnceClient)
            for c, cs in zip(clients, client_stats):
                c.preset(res, StatsMessage(cs[i]))
            if m.family.aggregation == "incfed":
                readouts = incfed(res, clients, lambdas, ledger=ledgers[i], solver=settings.solver).readouts
            else:
                fed_ledgers = [CommLedger() for _ in lambdas]
                readouts = np.stack([fedavg(res, clients, lam, ledger=lg) for lam, lg in zip(lambdas, fed_ledgers)])
        out_readouts.append(readouts)
        out_lambdas.append(lambdas)
        out_fed.append(fed_ledgers)

    counts: list[Counts | None] = [None] * len(configs)
    if score:
        val = DeviceWindows.of(list(data.validation.values()), dev)
        grid = torch.from_numpy(np.stack(out_readouts)).to(dev)  # (R, L, C, N or N+1): one λ grid per trial
        correct = counts_of(bank, val.x, val.y, grid).cpu().numpy() if len(val.x) else np.zeros(grid.shape[:2], np.int64)
        total = int(val.x.shape[0] * val.x.shape[1]) if len(val.x) else 0
        counts = [Counts(correct[i].astype(np.int64), total) for i in range(len(configs))]
    return [
        stationary_model(m, dict(cfg), int(seed), sd, data, res, readouts, lambdas, ledger, fed, cnt,
                         client_fraction=settings.fraction_for(m))
        for cfg, seed, sd, res, readouts, lambdas, ledger, fed, cnt in zip(
            configs, seeds, subs, reservoirs, out_readouts, out_lambdas, ledgers, out_fed, counts)
    ]


def _train_ip(m: Method, configs, subs, reservoirs: list[Reservoir], train: DeviceWindows, names: list[str],
              settings: Settings, ledgers: list[CommLedger | None], dev: str) -> list[Reservoir]:
    """IP (one client: the pooled windows, ``rounds`` epochs) or FedIP (every client with
    windows, ``rounds`` rounds of ``local_epochs``) for every trial at once: each SGD step is one
    batched step over (trial, client) slots, each slot on its own mini-batch of its own shuffle;
    the rounds' averaging and messages are esnfed_core.plasticity.fedip_round itself. With
    ``settings.client_fraction`` < 1 a FedIP round's slots are the clients
    :func:`esnfed_core.sampling.sample_clients` draws for the trial (as esnfed_core.federated.fedip
    draws them), and only their shuffles advance."""
    from esnfed_core.plasticity import broadcast_reservoir, fedip_round  # noqa: PLC0415

    ip = settings.ip.config(sigma=1.0)  # the shared fields; σ is per trial
    fed = m.federated
    if fed:
        clients = [c for c, n in enumerate(train.counts) if n > 0]
        if not clients:
            raise ValueError("fedip: every client has zero windows")
        spans = [(train.offsets[c], train.counts[c]) for c in clients]
    else:
        spans = [(0, sum(train.counts))]
    n_trials = len(configs)
    rounds = [int(cfg["rounds"]) for cfg in configs]
    epochs = [int(cfg["local_epochs"]) if fed else 1 for cfg in configs]
    sigma = torch.tensor([float(cfg["sigma"]) for cfg in configs], dtype=torch.float64, device=dev)
    rngs = [[np.random.default_rng(sd["ip"]) for _ in spans] for sd in subs]
    if fed:
        for res, ledger in zip(reservoirs, ledgers):
            broadcast_reservoir(res, [names[c] for c in clients], ledger, "fedip")
    base = Bank.from_reservoirs(reservoirs, dev)
    current = list(reservoirs)
    bs = ip.batch_size
    fraction = settings.fraction_for(m)
    for rnd in range(max(rounds)):
        picks = [sample_clients(len(spans), fraction, sd["ip"], rnd) for sd in subs]
        slots = [(i, j) for i in range(n_trials) if rounds[i] > rnd for j in picks[i]]
        plans = []
        for i, j in slots:
            off, n = spans[j]
            batches = []
            for _ in range(epochs[i]):
                order = rngs[i][j].permutation(n)
                batches += [order[s : s + bs] + off for s in range(0, n, bs)]
            plans.append(batches)
        trial_of = [i for i, _ in slots]
        gain_all = torch.from_numpy(np.stack([current[i].gain for i in trial_of])).to(dev)
        bias_all = torch.from_numpy(np.stack([current[i].bias for i in trial_of])).to(dev)
        # Slots whose epochs are done (fewer local epochs, smaller clients) leave the steps, so
        # no product is spent on them (ip_rounds: the plan on the device, CUDA graphs on cuda).
        run_round(base, trial_of, sigma, train.x, RoundPlan.of(plans, bs, dev), gain_all, bias_all,
                  mu=ip.mu, eta=ip.eta, normalize_step=ip.normalize_step, fused=settings.fused_ip_sums)
        gain, bias = gain_all.cpu().numpy(), bias_all.cpu().numpy()
        for i in sorted(set(trial_of)):
            ks = [k for k, t in enumerate(trial_of) if t == i]
            if not fed:
                current[i] = current[i].with_ip(gain[ks[0]], bias[ks[0]])
                continue
            fits = [lambda start, k=k: start.with_ip(gain[k], bias[k]) for k in ks]
            picked = [clients[j] for j in picks[i]]
            current[i] = fedip_round(current[i], fits, [train.counts[c] for c in picked],
                                     [names[c] for c in picked], ledgers[i], "fedip", rnd)
    return current
