"""What the privacy stage retrains under DP (``privacy.config``): the hyperparameters of each method
and the clipping bounds, chosen on the validation users alone (``public``) or taken from the select
stage and params.yaml (``select``, chosen on the protected training users: outside ε).

``public`` uses no training user's data: the select stage's candidates (the same configs and seeds,
:func:`esnfed_stages.experiment.best.search_trials`) are scored on the validation users split by user, the
first half (partition order, rounded up) as clients and the rest scoring, and the best is kept
(:func:`esnfed_stages.experiment.best.best_of`). ``clip`` is chosen the same way, from CLIP_GRID: DP-IncFed
with the chosen config trained on the split's clients under each candidate, at every finite ε and
from each retrain seed, scored on the split's other users; the best mean wins (ties: the smaller).
``ip_clip`` is the smallest bound that clips none of the FedIP round updates of the non-private
trial with the chosen config on all the validation users as clients, from each retrain seed.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from esnfed_core.errors import ConfigError
from esnfed_core.method import Method
from esnfed_core.privacy import AUTO_DELTA_CAP, DPSpec, noised_stats, noise_multiplier, stats_bound
from esnfed_core.private_trial import fit_private, noise_rng, unit_stats
from esnfed_core.readout import solve
from esnfed_core.scoring import pooled_counts
from esnfed_core.settings import Settings
from esnfed_core.trial import TrialData, fit, make_reservoir, sub_seeds
from esnfed_stages.params.experiment import ExperimentParams
from esnfed_stages.experiment.best import selected_config
from esnfed_stages.params.privacy import CONFIG_KEY, PUBLIC, SELECT
from esnfed_stages.experiment.best import best_of, search_trials

# public's candidates for privacy.clip: the clip sweep's range below 0.3 (docs/privacy.md; above, accuracy fell)
CLIP_GRID = (0.001, 0.003, 0.01, 0.03, 0.1)


@dataclass(frozen=True)
class Configuration:
    """What one dataset's private retrains use: each method's config (λ dropped or kept as the
    select stage's best.json has it), the two clipping bounds, and ``record``: how they were chosen
    (the document's ``configuration``)."""

    configs: Mapping[str, dict[str, Any]]
    clip: float
    ip_clip: float
    record: dict[str, Any]


def choose(mode: str, dataset: str, methods: Sequence[str], exp: ExperimentParams, data: TrialData,
           seeds: Sequence[int], delta: float, epsilons: Sequence[float], *, pct: str, clip: float,
           ip_clip: float, runs_dir: Path) -> Configuration:
    """``dataset``'s :class:`Configuration` for ``methods`` under ``mode``: ``select`` reads each
    method's best.json of ``pct`` and keeps params.yaml's ``clip`` and ``ip_clip``; ``public``
    chooses all of them from ``data.validation`` (module docstring; ``data.train`` is not read),
    the clip at the finite ``epsilons`` and ``delta``."""
    if mode == SELECT:
        configs = {m: selected_config(runs_dir, dataset, m, pct, exp.budget_spec) for m in methods}
        return Configuration(configs, clip, ip_clip, {"mode": SELECT})
    settings = replace(exp.settings, device="cpu")  # the privacy stage's numpy path (fit_private)
    split = public_split(data)
    configs = {m: _best(dataset, Method.parse(m), pct, exp, split, settings) for m in methods}
    # the statistics' clip is scored on the reservoir of the method without IP (IncFed: FedIP's
    # readout is IncFed's release), the IP updates' bound on the method with it (FedIP)
    plain = [m for m in methods if not Method.parse(m).uses_ip]
    with_ip = [m for m in methods if Method.parse(m).uses_ip]
    reservoir = configs[(plain or list(methods))[0]]
    scores = clip_scores(reservoir, split, settings, seeds, delta, epsilons, len(data.train))
    everyone = TrialData(data.validation, data.validation, data.n_classes, data.n_contexts)
    updates = _ip_updates(configs[with_ip[0]], everyone, settings, seeds) if with_ip else []
    return Configuration(configs, max(scores, key=lambda c: (scores[c], -c)) if scores else clip,
                         max(updates) if updates else ip_clip,
                         {"mode": PUBLIC, "clients": list(split.train), "scorers": list(split.validation),
                          "clip_scores": {f"{c:g}": scores[c] for c in scores},
                          **({"ip_clip_from": list(everyone.train)} if updates else {})})


def public_split(data: TrialData) -> TrialData:
    """The validation users split by user: the first half (rounded up) as training clients, the
    rest as the validation users that score them. Fewer than two: one line naming the key."""
    names = list(data.validation)
    if len(names) < 2:
        raise ConfigError(f"params.yaml: {CONFIG_KEY}: {PUBLIC} splits the validation users into clients and scorers, "
                          f"but there are {len(names)}; give the partition two or more, or set {CONFIG_KEY}: {SELECT}")
    k = math.ceil(len(names) / 2)
    return TrialData({n: data.validation[n] for n in names[:k]}, {n: data.validation[n] for n in names[k:]},
                     data.n_classes, data.n_contexts)


def _best(dataset: str, method: Method, pct: str, exp: ExperimentParams, split: TrialData,
          settings: Settings) -> dict[str, Any]:
    """The select stage's candidates of ``method`` scored on ``split``: the best one's config."""
    configs, seeds = search_trials(exp, dataset, method, pct, exp.method_space(dataset, method))
    records = []
    for i, (config, seed) in enumerate(zip(configs, seeds)):
        model = fit(method, config, seed, split, settings)
        records.append({"index": i, "scores": model.validation, "config": model.config})
    return dict(best_of(records)["config"])


def clip_scores(config: Mapping[str, Any], split: TrialData, settings: Settings, seeds: Sequence[int],
                 delta: float, epsilons: Sequence[float], clients: int) -> dict[float, float]:
    """Per candidate of CLIP_GRID, DP-IncFed's mean score on ``split`` (best λ) over the finite
    ``epsilons`` and ``seeds``, each ε's noise multiplier z (one release, as IncFed's) scaled by
    K_s / ``clients`` (K_s: the split's clients; ``clients``: the federation's K, public), so that
    the split's released sum has the signal-to-noise of the federation's. A seed's candidates share
    its reservoir, its clients' statistics and its noise draws (one pass over the scorers for all)."""
    scaled = [noise_multiplier(e, delta) * len(split.train) / clients for e in epsilons if math.isfinite(e)]
    if not scaled:
        return {}
    lambdas = [float(x) for x in settings.lambdas]
    scores = np.zeros((len(CLIP_GRID), len(scaled)))
    for seed in seeds:
        res = make_reservoir(config, split.n_inputs, sub_seeds(seed)["reservoir"])
        stats = unit_stats(res, split, settings)
        bound = stats_bound(stats[0].units)
        readouts = [solve(noised_stats(stats, c, z * c * bound, noise_rng(seed)), lambdas, settings.solver)
                    for c in CLIP_GRID for z in scaled]
        counts = pooled_counts(res, list(split.validation.values()), np.concatenate(readouts), settings.batch_size)
        scores += counts.accuracy.reshape(len(CLIP_GRID), len(scaled), -1).max(axis=2)  # best λ, as select_lambda
    return {c: float(v) for c, v in zip(CLIP_GRID, scores.mean(axis=1) / len(seeds))}


def _ip_updates(config: Mapping[str, Any], data: TrialData, settings: Settings, seeds: Sequence[int]) -> list[float]:
    """Every client's round update norm ‖(Δg, Δb)‖₂ of FedIP's non-private trial on ``data.train``
    from each seed (the hook of :func:`fit_private`)."""
    updates: list[float] = []
    for seed in seeds:
        fit_private("fedip", config, seed, data, settings, DPSpec(math.inf, AUTO_DELTA_CAP), updates)
    return updates
