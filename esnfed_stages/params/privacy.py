"""The ``privacy`` section of params.yaml, checked once (PrivacyParams): the ε grid, δ, the clipping
bounds per dataset, the methods and opt-in studies, and how the configs are chosen
(``privacy.config``: public or select); read by the privacy stage, Flower's DP runs, the schema and
the report, and what the privacy documents record of it."""


from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

from esnfed_core.errors import ConfigError
from esnfed_core.privacy import AMPLIFICATIONS, PRIVACY_BOUNDS, RELATIONS, WINDOW_REFUSED, DPSpec, auto_delta
from esnfed_core.private_trial import EXTRA_ALGOS, PRIVATE_ALGOS, UNCOVERED
from esnfed_core.quote import quote
from esnfed_core.sampling import CLIENT_FRACTION
from esnfed_core.trial import TrialData
from esnfed_stages import provenance
from esnfed_stages.data._datasets import NAME
from esnfed_core.vocabulary import PCTS
from esnfed_stages.params.sections import bounded, section
from esnfed_stages.layout import eps_key

CONFIG_KEY = "privacy.config"  # how each method's config and the clips are chosen
PUBLIC, SELECT = "public", "select"
CONFIG_MODES = (PUBLIC, SELECT)
# A privacy section without the key (and a document written before it): the select stage's configs.
CONFIG_ABSENT = SELECT
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
    config: str = CONFIG_ABSENT

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
                                  CONFIG_KEY: self.config, "budget": budget})


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
    config = config_mode(p.get("config", CONFIG_ABSENT))
    if config == PUBLIC and (extra or fractions):
        opted = "privacy.extra_methods" if extra else "privacy.sampling_study.fractions"
        raise ConfigError(f"params.yaml: {CONFIG_KEY}: public chooses the configs of privacy.methods only; "
                          f"{opted} retrain the select stage's: set {CONFIG_KEY}: select to run them")
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

def config_mode(value: Any) -> str:
    """``privacy.config`` checked: one of CONFIG_MODES (absent: CONFIG_ABSENT)."""
    if value not in CONFIG_MODES:
        raise ConfigError(f"params.yaml: {CONFIG_KEY}: must be one of {', '.join(CONFIG_MODES)}, got {quote(value)}")
    return value
