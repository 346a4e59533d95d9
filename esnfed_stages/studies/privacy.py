"""Stage `privacy`: test accuracy of IncFed and FedIP under the Gaussian mechanism for each ε of
``privacy.epsilons`` -> runs/privacy/<dataset>.json (rendered by `esnfed report` as
reports/tables/privacy.md/.csv and reports/figures/privacy.png; esnfed_stages/report/privacy_report.py).
Opt-in (``privacy.extra_methods``, default none; stage `privacy-extra`): DP-FedAvg and DP-FedCLIP
(naive, replay), one document per dataset and method, runs/privacy/extra/<dataset>/<method>.json, merged into the same table.

Each method's config and the clipping bounds come from ``privacy.config`` (esnfed_stages/studies/privacy_config.py):
``public``, chosen on the validation users alone; ``select``, the selected config of the share
``privacy.pct`` (runs/select/.../best.json) and params.yaml's clip and ip_clip. It is retrained with the
retrain stage's seeds (budgets.<budget>.retrains of them), once per ε, with the noise of
:mod:`esnfed_core.privacy`; λ is chosen on the validation users. ε = .inf is the non-private
trial, bit for bit. δ: ``auto`` = min(1e-5, 1/(10·n)), n the training users of the share (the
protected units). The document records what it was computed with (``params``: this
section and the budget, esnfed_stages/provenance.py); the report refuses it under other values.
federated.client_fraction < 1: FedIP's rounds sample their clients (no amplification claimed unless
``privacy.amplification: sampling``; the document records the fraction and which).
Opt-in (``privacy.sampling_study``, default no fractions; stage `privacy-sampling`): DP-FedIP retrained
at each listed client fraction under each listed accounting, one document per dataset and fraction,
runs/privacy/sampling/<dataset>/<fraction>.json (``run_sampling``; rendered as
reports/tables/privacy-sampling.md by esnfed_stages/report/privacy_sampling_report.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Mapping

from esnfed_core import __version__
from esnfed_core.errors import ConfigError
from esnfed_core.method import Method
from esnfed_core.privacy import DPSpec, ip_sigma, stats_sigma
from esnfed_core.private_trial import EXTRA_ALGOS, fit_private, releases, trial_spec
from esnfed_core.quote import quote
from esnfed_core.sampling import FULL, sample_size
from esnfed_core.scoring import accuracy
from esnfed_core.data.processed import UserData
from esnfed_core.trial import TrialData
from esnfed_stages.studies import privacy_config
from esnfed_stages import provenance
from esnfed_stages._io import output_lock, write_json
from esnfed_stages.params.experiment import ExperimentParams
from esnfed_stages.params.privacy import (ACCOUNTANT, SAMPLED_ACCOUNTANT, SELECT, STUDY_METHOD, PrivacyParams,
                                          neighbouring_units)
from esnfed_stages.experiment.trial_data import open_dataset
from esnfed_stages.experiment.best import retrain_seed, selected_config
from esnfed_stages.layout import PRIVACY_DIR, eps_key, extra_path, fraction_name, privacy_path, sampling_path


MECHANISM = "Gaussian mechanism (esnfed_core/privacy.py)"
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class Inputs:
    """What the privacy stage (and benchmarks/privacy_clip_sweep.py) trains and scores on for one
    dataset: the share's training users and the validation users, the test users, the relation's
    neighbouring units n and δ, and the manifest's source."""

    data: TrialData
    test: list[UserData]
    n_units: int
    delta: float
    source: Any


def inputs(dataset: str, pp: PrivacyParams, exp: ExperimentParams, data_dir: Path = Path("data")) -> Inputs:
    """``dataset``'s :class:`Inputs` under ``privacy.pct`` (a stale processed folder is refused)."""
    data = open_dataset(data_dir, dataset, exp.processed.get(dataset))
    trial_data = TrialData(data.load(data.train_users(pp.pct)), data.load(data.validation_users),
                           data.n_classes, data.n_contexts)
    n_units = neighbouring_units(trial_data)
    return Inputs(trial_data, list(data.load(data.test_users).values()), n_units, pp.delta_for(n_units),
                  data.manifest.get("source"))


def run(dataset: str, privacy: PrivacyParams, exp: ExperimentParams, *, data_dir: Path = Path("data"),
        runs_dir: Path = Path("runs"), out_dir: Path = PRIVACY_DIR,
        progress: Progress | None = None, extra: str | None = None) -> dict[str, Any]:
    """Compute and write runs/privacy/<dataset>.json; returns its document. ``privacy`` and ``exp``
    are params.yaml's sections, parsed once (``privacy_params``, ``experiment_params``). ``extra``:
    instead, the opt-in method of ``privacy.extra_methods`` -> runs/privacy/extra/<dataset>/<method>.json
    (DP-FedAvg's config keeps the selected λ: it trains at it)."""
    pp = privacy
    if extra is not None and extra not in pp.extra_methods:
        raise ConfigError(f"params.yaml: privacy.extra_methods: {quote(extra)} is not listed "
                          f"(lists {quote(list(pp.extra_methods))}; opt-in methods: {', '.join(EXTRA_ALGOS)})")
    inp = inputs(dataset, pp, exp, data_dir)
    pct, delta = pp.pct, inp.delta
    seeds = [retrain_seed(exp, dataset, pct, k) for k in range(exp.retrains)]
    methods = pp.methods if extra is None else (extra,)
    chosen = privacy_config.choose(pp.config, dataset, methods, exp, inp.data, seeds, delta, pp.epsilons, pct=pct,
                                   clip=pp.clip_for(dataset), ip_clip=pp.ip_clip_for(dataset), runs_dir=runs_dir)
    configs = chosen.configs
    tick = _ticker(progress, len(configs) * len(pp.epsilons) * len(seeds))
    results: dict[str, Any] = {}
    amplified = False  # some method's sampled rounds were accounted with amplification
    for m, cfg in configs.items():
        method = Method.parse(m)
        rel = releases(method, cfg, inp.data.n_contexts)
        kept = cfg if method.readout_per_lambda else {k: v for k, v in cfg.items() if k != "lambda"}
        rows = results[m] = {"config": dict(kept), "releases": rel,
                             "epsilons": {}}
        for eps in pp.epsilons:
            spec = trial_spec(method, cfg, inp.data, exp.settings,
                              replace(pp.spec(eps, delta, dataset), clip=chosen.clip, ip_clip=chosen.ip_clip))
            amplified = amplified or spec.sampled is not None
            accs = _test_accuracies(method, cfg, seeds, inp, exp, spec, tick)
            rows["epsilons"][eps_key(eps)] = {
                "noise_multiplier": spec.multiplier(rel), "test_accuracy": accs}
    doc = {**_data_fields(dataset, inp, pp, chosen.clip, chosen.ip_clip), "configuration": chosen.record,
           **({"fedavg_clip": pp.fedavg_clip_for(dataset)} if extra else {}),
           "mechanism": MECHANISM, "accountant": ACCOUNTANT,
           **({"sampled_accountant": SAMPLED_ACCOUNTANT} if amplified else {}), "seeds": seeds, "version": __version__,
           # readout.bias: the statistics have N+1 columns (clipping norm clip·√((N+1) + (N+1)²))
           **({"readout_bias": True} if exp.settings.readout_bias else {}),
           # federated.client_fraction < 1: FedIP's rounds sampled their clients, accounted without
           # amplification (docs/privacy.md, "Client sampling under DP"); absent at 1
           **({"client_fraction": exp.settings.client_fraction, "amplification": "sampling" if amplified else "none"}
              if exp.settings.client_fraction != FULL else {}),
           # DP-FedCLIP's rounds drew over the roster (federated.sampling_pool; absent otherwise)
           **({"sampling_pool": exp.settings.sampling_pool}
              if any(exp.settings.roster_for(Method.parse(m)) for m in methods) else {}),
           provenance.KEY: pp.record(exp.budget, extra=extra is not None), "methods": results}
    out = privacy_path(out_dir, dataset) if extra is None else extra_path(out_dir, dataset, extra)
    with output_lock(out):
        write_json(out, doc)
    return doc


def _data_fields(dataset: str, inp: Inputs, pp: PrivacyParams, clip: float, ip_clip: float) -> dict[str, Any]:
    """A document's first fields: what it was trained on and the mechanism's δ, relation and clips."""
    return {"dataset": dataset, "source": inp.source,  # as the assess files: the header's
            "pct": pp.pct, "n_users": len(inp.data.train), "n_units": inp.n_units, "delta": inp.delta,
            "relation": pp.relation, "clip": clip, "ip_clip": ip_clip}


def _ticker(progress: Progress | None, total: int) -> Callable[[], None]:
    """A callback counting finished retrains towards ``total`` for ``progress`` (none: does nothing)."""
    done = 0

    def tick() -> None:
        nonlocal done
        done += 1
        if progress:
            progress(done, total)

    return tick


def _test_accuracies(method: Method, cfg: Mapping[str, Any], seeds: list[int], inp: Inputs, exp: ExperimentParams,
                     spec: DPSpec, tick: Callable[[], None]) -> list[float]:
    """The test accuracy of ``method`` retrained under ``spec`` from each of ``seeds``."""
    accs = []
    for seed in seeds:
        model = fit_private(method, cfg, seed, inp.data, exp.settings, spec)
        accs.append(accuracy(model.reservoir, model.readout, inp.test, exp.settings.batch_size))
        tick()
    return accs


STUDY_ACCOUNTANTS = {"none": ACCOUNTANT, "sampling": SAMPLED_ACCOUNTANT}


def run_sampling(dataset: str, privacy: PrivacyParams, exp: ExperimentParams, fraction: str, *,
                 data_dir: Path = Path("data"), runs_dir: Path = Path("runs"), out_dir: Path = PRIVACY_DIR,
                 progress: Progress | None = None) -> dict[str, Any]:
    """The sampling study (``privacy.sampling_study``): the selected FedIP config of ``privacy.pct``
    retrained as :func:`run` retrains it, with federated.client_fraction set to the study's fraction
    named ``fraction`` (:func:`fraction_name`; params.yaml's own fraction is not read) and
    ``privacy.amplification`` set to each listed accounting, for every ε of ``privacy.epsilons``
    -> runs/privacy/sampling/<dataset>/<fraction>.json; returns its document. Per accounting and ε:
    z, σ of a round's sum (z·ip_clip) and of the IncFed release (z·clip·√(N + N²)) and the test
    accuracies. At f = 1 no round samples and the accountings coincide: only ``none`` is run. ε = ∞
    (no mechanism) is retrained once and shared by the accountings."""
    pp = privacy
    listed = {fraction_name(f): f for f in pp.study_fractions}
    if fraction not in listed:
        raise ConfigError(f"params.yaml: privacy.sampling_study.fractions: {quote(fraction)} is not listed "
                          f"(lists {quote(list(listed))})")
    f = float(listed[fraction])
    exp = replace(exp, settings=replace(exp.settings, client_fraction=f))
    inp = inputs(dataset, pp, exp, data_dir)
    seeds = [retrain_seed(exp, dataset, pp.pct, k) for k in range(exp.retrains)]
    method = Method.parse(STUDY_METHOD)
    cfg = selected_config(runs_dir, dataset, STUDY_METHOD, pp.pct, exp.budget_spec)
    rel = releases(method, cfg)
    units = int(cfg["units"]) + (1 if exp.settings.readout_bias else 0)  # the statistics' columns
    accountings = pp.study_amplification if f != FULL else ("none",)
    finite = [e for e in pp.epsilons if math.isfinite(e)]
    tick = _ticker(progress, len(seeds) * (len(accountings) * len(finite) + len(pp.epsilons) - len(finite)))
    plain: dict[str, Any] = {}  # ε = ∞: no mechanism, the same trial under every accounting
    rows: dict[str, Any] = {}
    for acc in accountings:
        cells = rows[acc] = {}
        for eps in pp.epsilons:
            if not math.isfinite(eps) and plain:
                cells[eps_key(eps)] = plain
                continue
            spec = trial_spec(method, cfg, inp.data, exp.settings, replace(pp, amplification=acc).spec(
                eps, inp.delta, dataset))
            cells[eps_key(eps)] = cell = {
                "noise_multiplier": spec.multiplier(rel), "sigma_round": ip_sigma(spec, rel),
                "sigma_release": stats_sigma(spec, units, rel),
                "test_accuracy": _test_accuracies(method, cfg, seeds, inp, exp, spec, tick)}
            if not math.isfinite(eps):
                plain = cell
    doc = {**_data_fields(dataset, inp, pp, pp.clip_for(dataset), pp.ip_clip_for(dataset)),
           "configuration": {"mode": SELECT}, "client_fraction": listed[fraction],
           "sample_size": sample_size(len(inp.data.train), f), "mechanism": MECHANISM,
           "accountants": {acc: STUDY_ACCOUNTANTS[acc] for acc in accountings}, "seeds": seeds,
           "version": __version__, **({"readout_bias": True} if exp.settings.readout_bias else {}),
           provenance.KEY: pp.record(exp.budget, extra=True, study=True), "method": STUDY_METHOD,
           "config": {k: v for k, v in cfg.items() if k != "lambda"}, "releases": rel, "accountings": rows}
    out = sampling_path(out_dir, dataset, fraction)
    with output_lock(out):
        write_json(out, doc)
    return doc
