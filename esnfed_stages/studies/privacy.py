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
from esnfed_core.privacy import AMPLIFICATIONS, PRIVACY_BOUNDS, RELATIONS, WINDOW_REFUSED, DPSpec, auto_delta, ip_sigma, stats_sigma
from esnfed_core.private_trial import EXTRA_ALGOS, PRIVATE_ALGOS, UNCOVERED, fit_private, releases, trial_spec
from esnfed_core.quote import quote
from esnfed_core.sampling import CLIENT_FRACTION, FULL, sample_size
from esnfed_core.scoring import accuracy
from esnfed_core.data.processed import UserData
from esnfed_core.trial import TrialData
from esnfed_stages.studies import privacy_config
from esnfed_stages import provenance
from esnfed_stages.data._datasets import NAME
from esnfed_stages._io import output_lock, write_json
from esnfed_core.vocabulary import PCTS
from esnfed_stages.params.experiment import ExperimentParams
from esnfed_stages.params.sections import bounded, section
from esnfed_stages.experiment.trial_data import open_dataset
from esnfed_stages.experiment.best import retrain_seed, selected_config
from esnfed_stages.layout import PRIVACY_DIR, eps_key, extra_path, fraction_name, privacy_path, sampling_path


MECHANISM = "Gaussian mechanism (esnfed_core/privacy.py)"
ACCOUNTANT = "dp-accounting PLD (calibrate_dp_mechanism), composition over FedIP rounds + IncFed release"
KEYS = ("epsilons", "delta", "relation", "clip", "ip_clip", "pct", "methods", "extra_methods", "fedavg_clip",
        "amplification", "sampling_study", "config")
# privacy.sampling_study's keys (opt-in: DP-FedIP at other client fractions, stage privacy-sampling)
STUDY_KEYS = ("fractions", "amplification")
# the method the sampling study retrains: the only private method whose rounds sample clients
STUDY_METHOD = "fedip"
# the amplified accountant (privacy.amplification: sampling, with sampled FedIP rounds)
SAMPLED_ACCOUNTANT = ("dp-accounting RDP (calibrate_dp_mechanism), replace-one: FedIP rounds sampled without "
                      "replacement (amplified) + IncFed release; z = σ / clip, twice the accountant's σ / (2·clip)")
# keys that take one number for every dataset, or one per dataset
PER_DATASET = ("clip", "ip_clip", "fedavg_clip")
# the opt-in keys: recorded only in the opt-in methods' documents, so the default documents keep their bytes
EXTRA_KEYS = ("extra_methods", "fedavg_clip")
Progress = Callable[[int, int], None]
# A number for every dataset, or ((dataset, number), ...) from a mapping (_per_dataset).
PerDataset = float | tuple[tuple[str, float], ...]


@dataclass(frozen=True)
class PrivacyParams:
    """The ``privacy`` section, checked: ε list (+inf: no mechanism), δ (``auto``: min(1e-5, 1/(10·n)), n
    the share's training users), relation, clipping (``clip`` and FedIP's ``ip_clip``: each one number
    for every dataset, or ((dataset, number), ...) from a mapping), the share, the methods and where
    their configs and clips come from (``config``: esnfed_stages/studies/privacy_config.py)."""

    epsilons: tuple[float, ...]
    delta: float | str
    relation: str
    clip: PerDataset
    ip_clip: PerDataset
    pct: str
    methods: tuple[str, ...]
    extra_methods: tuple[str, ...] = ()  # opt-in: DP-FedAvg, DP-FedCLIP naive/replay (stage privacy-extra)
    fedavg_clip: PerDataset = DPSpec.fedavg_clip
    amplification: str = "none"  # sampling: sampled FedIP rounds accounted with amplification (replace-one)
    # privacy.sampling_study (opt-in, stage privacy-sampling): the client fractions as params.yaml gives
    # them (their str() names the documents, as dvc.yaml's ${item.fraction}) and the accountings
    study_fractions: tuple[float | int, ...] = ()
    study_amplification: tuple[str, ...] = AMPLIFICATIONS
    # privacy.config: public = hyperparameters and clips from the validation users alone; select = the
    # select stage's configs and the clips above (esnfed_stages/studies/privacy_config.py)
    config: str = privacy_config.ABSENT

    def delta_for(self, n_units: int) -> float:
        """δ of ``auto``: :func:`esnfed_core.privacy.auto_delta` of n = the protected units
        (``neighbouring_units``); otherwise the number params.yaml gives."""
        return auto_delta(n_units) if self.delta == "auto" else float(self.delta)

    def clip_for(self, dataset: str) -> float:
        """``dataset``'s clip: the number, or its entry of the mapping (none: a ConfigError)."""
        return _for_dataset("clip", self.clip, dataset)

    def ip_clip_for(self, dataset: str) -> float:
        """``dataset``'s ip_clip, as :meth:`clip_for`."""
        return _for_dataset("ip_clip", self.ip_clip, dataset)

    def fedavg_clip_for(self, dataset: str) -> float:
        """``dataset``'s fedavg_clip, as :meth:`clip_for`."""
        return _for_dataset("fedavg_clip", self.fedavg_clip, dataset)

    def spec(self, eps: float, delta: float, dataset: str) -> DPSpec:
        """The mechanism of ``dataset`` at (ε, δ): its clip, ip_clip and fedavg_clip."""
        return DPSpec(eps, delta, self.relation, self.clip_for(dataset), self.ip_clip_for(dataset),
                      self.fedavg_clip_for(dataset), self.amplification)

    def record(self, budget: str | None, extra: bool = False, study: bool = False) -> dict[str, Any]:
        """What runs/privacy/<dataset>.json is computed with, by params.yaml key (its ``params``;
        the report refuses a file whose values differ from params.yaml's): this section as
        params.yaml has it (ε as the document's keys, δ ``auto`` or a number, clip and ip_clip a
        number or the mapping) and the budget. ``extra``: with the opt-in keys too (EXTRA_KEYS: an
        opt-in method's document, and what the report expects; a document without them is not
        checked on them). ``study``: with ``privacy.sampling_study`` too, when it lists fractions (a
        sampling study's document, and what the report expects)."""
        keys = [k for k in PER_DATASET if extra or k not in EXTRA_KEYS]
        clips = {f"privacy.{key}": v if isinstance(v := getattr(self, key), float) else dict(v) for key in keys}
        more = {"privacy.extra_methods": self.extra_methods} if extra else {}
        if self.amplification != "none":  # absent at the default: the default documents keep their bytes
            more["privacy.amplification"] = self.amplification
        if study and self.study_fractions:
            more["privacy.sampling_study"] = {"fractions": self.study_fractions,
                                              "amplification": self.study_amplification}
        return provenance.record({"privacy.epsilons": [eps_key(e) for e in self.epsilons],
                                  "privacy.delta": self.delta, "privacy.relation": self.relation, **clips,
                                  "privacy.pct": self.pct, "privacy.methods": self.methods, **more,
                                  privacy_config.KEY: self.config, "budget": budget})


def _epsilon(value: Any) -> float:
    if not (isinstance(value, float) and value == math.inf):
        bounded("privacy.epsilons", value, PRIVACY_BOUNDS["epsilon"])
    return float(value)


def privacy_params(params: Mapping[str, Any]) -> PrivacyParams:
    """The validated ``privacy`` section; errors read "params.yaml: privacy.<key>: ..."."""
    p = section(params, "privacy")
    if not isinstance(p, Mapping):
        raise ConfigError("params.yaml: privacy: must be a mapping")
    unknown = sorted(set(p) - set(KEYS))
    if unknown:
        raise ConfigError(f"params.yaml: privacy.{unknown[0]}: unknown key (expected {', '.join(KEYS)})")
    eps = p.get("epsilons")
    if not isinstance(eps, list) or not eps:
        raise ConfigError(f"params.yaml: privacy.epsilons: must be a non-empty list of numbers > 0 "
                          f"(.inf: no mechanism), got {quote(eps)}")
    delta = p.get("delta", "auto")
    if delta != "auto":
        bounded("privacy.delta", delta, PRIVACY_BOUNDS["delta"])
    if p.get("relation") == "window":
        raise ConfigError(f"params.yaml: privacy.relation: {WINDOW_REFUSED}")
    if p.get("relation") not in RELATIONS:
        raise ConfigError(f"params.yaml: privacy.relation: must be one of {', '.join(RELATIONS)}, "
                          f"got {quote(p.get('relation'))}")
    pct = str(p.get("pct", "100"))
    if pct not in PCTS:
        raise ConfigError(f"params.yaml: privacy.pct: must be one of {', '.join(PCTS)}, got {quote(pct)}")
    methods = p.get("methods", list(PRIVATE_ALGOS))
    if not isinstance(methods, list) or not methods or any(m not in PRIVATE_ALGOS for m in methods):
        raise ConfigError(f"params.yaml: privacy.methods: must list some of {', '.join(PRIVATE_ALGOS)}, "
                          f"got {quote(methods)}")
    extra = p.get("extra_methods", [])
    for m in extra if isinstance(extra, list) else ():
        if isinstance(m, str) and m in UNCOVERED:
            raise ConfigError(f"params.yaml: privacy.extra_methods: {m} is not covered: {UNCOVERED[m]} "
                              "(DP-FedCLIP: fedclip-naive, fedclip-replay)")
    if (not isinstance(extra, list) or any(m not in EXTRA_ALGOS for m in extra)
            or len(set(extra)) < len(extra)):
        raise ConfigError(f"params.yaml: privacy.extra_methods: must list some of {', '.join(EXTRA_ALGOS)} "
                          f"(each once; [] runs none), got {quote(extra)}")
    amplification = p.get("amplification", "none")
    if amplification not in AMPLIFICATIONS:
        raise ConfigError(f"params.yaml: privacy.amplification: must be one of {', '.join(AMPLIFICATIONS)}, "
                          f"got {quote(amplification)}")
    fractions, accountings = _sampling_study(p.get("sampling_study", {}))
    config = privacy_config.mode_of(p.get("config", privacy_config.ABSENT))
    if config == privacy_config.PUBLIC and (extra or fractions):
        opted = "privacy.extra_methods" if extra else "privacy.sampling_study.fractions"
        raise ConfigError(f"params.yaml: {privacy_config.KEY}: public chooses the configs of privacy.methods only; "
                          f"{opted} retrain the select stage's: set {privacy_config.KEY}: select to run them")
    return PrivacyParams(tuple(_epsilon(e) for e in eps), delta, p["relation"],
                         _per_dataset("clip", p.get("clip", 1.0)), _per_dataset("ip_clip", p.get("ip_clip", DPSpec.ip_clip)),
                         pct, tuple(methods), tuple(extra),
                         _per_dataset("fedavg_clip", p.get("fedavg_clip", DPSpec.fedavg_clip)), amplification,
                         fractions, accountings, config)


def _sampling_study(value: Any) -> tuple[tuple[float | int, ...], tuple[str, ...]]:
    """``privacy.sampling_study``: {fractions: [f, ...] each in (0, 1], each once ([] or the key
    absent: no study), amplification: some of AMPLIFICATIONS, each once (default both)}."""
    key = "params.yaml: privacy.sampling_study"
    if not isinstance(value, Mapping):
        raise ConfigError(f"{key}: must be a mapping with fractions and amplification, got {quote(value)}")
    unknown = sorted(set(value) - set(STUDY_KEYS))
    if unknown:
        raise ConfigError(f"{key}.{unknown[0]}: unknown key (expected {', '.join(STUDY_KEYS)})")
    fractions = value.get("fractions", [])
    if not isinstance(fractions, list):
        raise ConfigError(f"{key}.fractions: must be a list of client fractions in (0, 1] ([] runs none), "
                          f"got {quote(fractions)}")
    for f in fractions:
        bounded("privacy.sampling_study.fractions", f, CLIENT_FRACTION)
    if len({float(f) for f in fractions}) < len(fractions):
        raise ConfigError(f"{key}.fractions: each fraction once, got {quote(fractions)}")
    accountings = value.get("amplification", list(AMPLIFICATIONS))
    if (not isinstance(accountings, list) or not accountings or any(a not in AMPLIFICATIONS for a in accountings)
            or len(set(accountings)) < len(accountings)):
        raise ConfigError(f"{key}.amplification: must list some of {', '.join(AMPLIFICATIONS)} (each once), "
                          f"got {quote(accountings)}")
    return tuple(fractions), tuple(accountings)


def _per_dataset(key: str, value: Any) -> PerDataset:
    """``privacy.<key>`` (one of PER_DATASET): a number for every dataset, or a mapping dataset ->
    number (a dataset of your own tuned apart from the papers' two; params_schema checks it names
    every declared one), each value within PRIVACY_BOUNDS[key]."""
    if not isinstance(value, Mapping):
        return float(bounded(f"privacy.{key}", value, PRIVACY_BOUNDS[key]))
    if not value:
        raise ConfigError(f"params.yaml: privacy.{key}: must be a number or a mapping of dataset -> number, got {{}}")
    for name, number in value.items():
        if not isinstance(name, str) or not NAME.fullmatch(name):
            raise ConfigError(f"params.yaml: privacy.{key}: {quote(name)} is not a dataset name")
        bounded(f"privacy.{key}.{name}", number, PRIVACY_BOUNDS[key])
    return tuple((name, float(number)) for name, number in value.items())


def _for_dataset(key: str, value: PerDataset, dataset: str) -> float:
    """``dataset``'s value of ``privacy.<key>`` (_per_dataset): the number, or its entry of the
    mapping (none: a ConfigError)."""
    if isinstance(value, float):
        return value
    values = dict(value)
    if dataset not in values:
        raise ConfigError(f"params.yaml: privacy.{key}: no {key} for dataset {quote(dataset)} (the mapping names "
                          f"{', '.join(values)}; give every dataset the privacy stage runs on its {key}, or one "
                          "number for all)")
    return values[dataset]


def neighbouring_units(data: TrialData) -> int:
    """n of ``privacy.delta: auto``: the protected units, the training users (user level)."""
    return len(data.train)


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
        kept = cfg if m == "fedavg" else {k: v for k, v in cfg.items() if k != "lambda"}
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
           "configuration": {"mode": privacy_config.SELECT}, "client_fraction": listed[fraction],
           "sample_size": sample_size(len(inp.data.train), f), "mechanism": MECHANISM,
           "accountants": {acc: STUDY_ACCOUNTANTS[acc] for acc in accountings}, "seeds": seeds,
           "version": __version__, **({"readout_bias": True} if exp.settings.readout_bias else {}),
           provenance.KEY: pp.record(exp.budget, extra=True, study=True), "method": STUDY_METHOD,
           "config": {k: v for k, v in cfg.items() if k != "lambda"}, "releases": rel, "accountings": rows}
    out = sampling_path(out_dir, dataset, fraction)
    with output_lock(out):
        write_json(out, doc)
    return doc
