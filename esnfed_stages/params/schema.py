"""The schema of params.yaml, checked as a whole whenever a stage reads the file (load_params):
unknown keys, wrong types, out-of-range values and impossible combinations, one line naming the key.

Declared here key by key (tests/test_params_schema.py checks that the repository's params.yaml
holds exactly these keys, so the defaults and the schema cannot drift). Sections whose parameters
belong to a dataset module are checked by that module: preprocess.<dataset> by its reader's own
validation, synthetic.<dataset> keys against the generator's signature. Top-level sections may be
absent (a stage reports a key it needs and cannot find); present ones are checked in full.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Mapping

from esnfed_core import search, validation
from esnfed_core.continual_settings import CONTINUAL_BOUNDS
from esnfed_core.errors import ConfigError
from esnfed_core.hyperparameters import HYPERPARAMETER_BOUNDS
from esnfed_core.ip_rule import IP_BOUNDS
from esnfed_core.method import Method
from esnfed_core.metrics import BINS
from esnfed_core.quote import quote
from esnfed_core.readout import LAMBDA, SOLVERS
from esnfed_core.sampling import CLIENT_FRACTION, POOLS
from esnfed_core.reservoir import BATCH_SIZE, CONNECTIVITY_BOUNDS, RESERVOIR_BOUNDS
from esnfed_core.settings import RETRAIN_LAMBDA
from esnfed_core.stats import ALPHA, VARIANCE_TESTS
from esnfed_core.vocabulary import BACKENDS, DATASETS, DEVICES, PCTS, REPLAY_POLICIES, SOURCES, VARIANTS
from esnfed_stages.data._datasets import (
    DIRNAMES, SYNTHESIZED, bind_kwargs, check_dataset_name, check_own_name, check_variant, dataset_function, declared,
    reader_of, variant_base,
)
from esnfed_stages.params.experiment import RUNNER_BOUNDS
from esnfed_stages.params.imports import import_params
from esnfed_stages.data.partition import check_partition
from esnfed_stages.params.processed import same_source
from esnfed_stages.params.nodes import (
    Bool, Choice, Delegate, Entries, Fields, Invalid, ListOf, Named, Node, Nullable, Num, OptIn, Space, Text,
)
from esnfed_stages.report import protocol_tables


# ---------------------------------------------------------------- delegated sections
def _module_function(dataset: str, stage: str) -> Callable | None:
    """The dataset module's function, or None when the module is not installed (the stage that
    needs it then says so; other stages still run)."""
    try:
        return dataset_function(dataset, stage)
    except ConfigError:
        return None


def _preprocess(dataset: str) -> Callable[[str, Any], None]:
    def check(key: str, value: Any) -> None:
        if not isinstance(value, Mapping):
            raise Invalid(f"{key}: expected a mapping, got {quote(value)}")
        if _module_function(dataset, "preprocess") and (describe := _module_function(dataset, "describe")):
            describe(value)  # the reader's own validation (defaults, units, ranges)
    return check


def _synthetic(dataset: str, fields: Mapping[str, Node]) -> Callable[[str, Any], None]:
    def check(key: str, value: Any) -> None:
        if not isinstance(value, Mapping):
            raise Invalid(f"{key}: expected a mapping, got {quote(value)}")
        if "seed" not in value:
            raise Invalid(f"{key}.seed: missing")
        if (fn := _module_function(dataset, "synthesize")) is not None:
            bind_kwargs(fn, {k: v for k, v in value.items() if k != "seed"}, key)  # names: the signature's
        SEED.check(f"{key}.seed", value["seed"])
        for k, node in fields.items():
            if k in value:
                node.check(f"{key}.{k}", value[k])
    return check


def _partition(dataset: str) -> Callable[[str, Any], None]:
    def check(key: str, value: Any) -> None:
        spec = check_partition(dataset, value).spec  # nested subsets; no user in two splits
        for pct in (spec or {"train": {}})["train"]:
            if pct not in PCTS:
                raise Invalid(f"{key}.train.{pct}: the shares must be among {', '.join(PCTS)}, got {pct}")
    return check


def _import(key: str, value: Any) -> None:
    import_params(value, key)  # the stage's own frozen params object holds the bounds


def _embedded(names: tuple[str, ...], what: str, variants: bool = False) -> Callable[[str, Any], None]:
    """embedded.<stage>: some of ``names``, each with its folder under data.synthetic_dir (DIRNAMES:
    dvc.yaml's foreach takes the folder from the value, as DVC cannot compute it from the name).
    ``variants``: other dataset names too (a protocol variant's folder, its base's, is checked
    with the params by _embedded_needs)."""
    def check(key: str, value: Any) -> None:
        if not isinstance(value, Mapping):
            raise Invalid(f"{key}: expected a mapping of dataset -> folder ({{}} for none), got {quote(value)}")
        for name, folder in value.items():
            if variants and name not in names:
                check_own_name(f"{key}.{name}", name)
                continue
            if name not in names:
                raise Invalid(f"{key}: expected some of {', '.join(names)} ({what}), got {quote(name)}")
            if folder != DIRNAMES[name]:
                raise Invalid(f"{key}.{name}: expected {quote(DIRNAMES[name])} (the folder under data.synthetic_dir "
                              f"that `esnfed synthesize --dataset {name}` writes), got {quote(folder)}")
    return check


def _report_share(key: str, value: Any) -> None:
    if isinstance(value, bool) or str(value) not in PCTS:
        raise Invalid(f"{key}: expected one of {', '.join(PCTS)}, got {quote(value)}")


def _privacy(key: str, value: Any) -> None:
    from esnfed_stages.params.privacy import privacy_params  # noqa: PLC0415 (the stage owns its checks)

    privacy_params({"privacy": value})


def _heterogeneity(key: str, value: Any) -> None:
    from esnfed_stages.params.hetero import hetero_params  # noqa: PLC0415 (the stage owns its checks)

    hetero_params({"heterogeneity": value})


# ---------------------------------------------------------------- the schema
POSITIVE = Num.of(validation.POSITIVE)
COUNT = Num.of(validation.COUNT)
SEED = Num.of(search.SEED)
# Bounds of values the core consumes come from the core's value types (Num.of), so a value the
# schema passes is one the core accepts (tests/test_param_bounds.py walks each bound). The search
# spaces' hyperparameters: the ranges a saved config is checked against too (esnfed_core.hyperparameters).
HYPER = {name: Num.of(bound) for name, bound in HYPERPARAMETER_BOUNDS.items()}
RESERVOIR_SPACE = {name: HYPER[name] for name in RESERVOIR_BOUNDS}
# A dataset's space may also search a sparse reservoir's connectivity (percent; absent: dense).
CONNECTIVITY_SPACE = {name: HYPER[name] for name in CONNECTIVITY_BOUNDS}
IP = {name: Num.of(bound) for name, bound in IP_BOUNDS.items()}
CONTINUAL = {name: Num.of(bound) for name, bound in CONTINUAL_BOUNDS.items()}
# synthetic.<dataset>: the generator's keyword arguments (all optional: it has defaults) besides
# the seed; the first ones listed are those of the repository's params.yaml.
SYNTHETIC = {
    "wesad": {"scale": POSITIVE, "protocol": Choice((0, 2)), "subjects": ListOf(Text())},
    "hhar": {"seconds_per_activity": POSITIVE, "gap_seconds": Num(low=0.0),
             "watch_duty": Num(low=0.0, high=1.0, low_open=True), "users": ListOf(Text()),
             "models": ListOf(Text()), "layout": Choice(("csv", "zip", "both"))},
}
SYNTHETIC_KEYS = {"wesad": ("seed", "scale", "protocol"),
                  "hhar": ("seed", "seconds_per_activity", "gap_seconds", "watch_duty")}
# the embedded example of a user dataset (a plain CSV written by `esnfed synthesize`)
SYNTHETIC["example"] = {"subjects": COUNT, "seconds_per_activity": POSITIVE, "rate": POSITIVE}
SYNTHETIC_KEYS["example"] = ("seed", "subjects", "seconds_per_activity", "rate")
EXAMPLES = ("example",)  # the user datasets of the repository's params.yaml
# imports.<name>: the keys the repository's params.yaml sets; every key of params.imports.ImportParams
# (max_gap, drop_labels, format, delimiter, chunk_rows too) is checked by import_params, with BOUNDS.
IMPORT_KEYS = ("source", "user", "time", "time_unit", "label", "context", "features", "classes", "contexts",
               "rate", "window")
PREPROCESS_KEYS = {"wesad": ("modality", "window", "wrist_rate", "contexts", "subjects"),
                   "hhar": ("devices", "target_rate", "window", "join_tolerance_ms", "drop_null")}

SCHEMA = Fields(optional={
    "seed": SEED,
    "ttest": Fields(required={"variant": Choice(VARIANTS), "alpha": Num.of(ALPHA)},
                    optional={"variance_test": Choice(VARIANCE_TESTS)}),
    "report": Fields(required={"activation_pct": Delegate(_report_share)},
                     optional={"contexts_pct": Delegate(_report_share), "matrix_pct": Delegate(_report_share),
                               # opt-in: a paper table under its paper's protocol (protocol_tables.py)
                               **{key: OptIn(protocol_tables.check_shape) for key in protocol_tables.PROTOCOLS}}),
    "data": Fields(required={"source": Choice(SOURCES), "synthetic_dir": Text(), "raw_dir": Text()}),
    "synthetic": Fields(optional={
        ds: Delegate(_synthetic(ds, f), SYNTHETIC_KEYS[ds]) for ds, f in SYNTHETIC.items()}),
    # preprocess.<name> of another name: a protocol variant of a paper dataset (base: wesad|hhar, then
    # the base reader's keys, checked by its own validation: _datasets.check_variant)
    "preprocess": Named({ds: Delegate(_preprocess(ds), PREPROCESS_KEYS[ds]) for ds in DATASETS},
                        lambda ds: Delegate(check_variant)),
    "partition": Named({ds: Delegate(_partition(ds), ("train", "validation", "test")) for ds in DATASETS},
                       lambda ds: Delegate(_partition(ds), ("fractions.validation", "fractions.test", "seed")),
                       examples=EXAMPLES),
    "budget": Text(),
    "budgets": Entries(Fields(required={
        "trials": Num.of(search.TRIALS), "retrains": Num.of(search.RETRAINS),
        "space": Named({
            "wesad": Space(RESERVOIR_SPACE, CONNECTIVITY_SPACE), "hhar": Space(RESERVOIR_SPACE, CONNECTIVITY_SPACE),
            "ip": Space({n: HYPER[n] for n in ("sigma", "rounds")}),
            "fedip": Space({n: HYPER[n] for n in ("sigma", "rounds", "local_epochs")}),
            "deep": Space({"layers": HYPER["layers"]}),  # deep reservoirs: added for deep-* methods
        # space.<dataset>: required of each declared dataset only (_declared_datasets says why)
        }, lambda ds: Space(RESERVOIR_SPACE, CONNECTIVITY_SPACE), required=("ip", "fedip"), examples=EXAMPLES),
    })),
    "readout": Fields(required={"lambdas": ListOf(Num.of(LAMBDA)), "batch_size": Num.of(BATCH_SIZE),
                                "solver": Choice(SOLVERS)},
                      optional={"bias": Bool()}),  # the papers' eq. 1 readout bias (absent: false)
    "retrain": Fields(required={"lambda": Choice(RETRAIN_LAMBDA)}),
    # client sampling per FedIP/FedCLIP round (esnfed_core/sampling.py; absent: 1, every client) and
    # whom a FedCLIP round draws from (absent: context, the participants)
    "federated": Fields(optional={"client_fraction": Num.of(CLIENT_FRACTION), "sampling_pool": Choice(POOLS)}),
    "plasticity": Fields(required={"mu": IP["mu"], "eta": IP["eta"], "batch_size": IP["batch_size"],
                                   "normalize_step": Bool()}),
    "continual": Fields(required={
        "lambda": CONTINUAL["lambda"],
        "naive": Fields(),
        "replay": Fields(required={"fraction": CONTINUAL["replay_fraction"], "batch": CONTINUAL["replay_batch"],
                                   "shuffle": Bool()},
                         optional={"policy": Choice(REPLAY_POLICIES)}),  # absent: uniform (the authors' buffer)
        "joint": Fields(required={"patience": Nullable(CONTINUAL["patience"]),
                                  "max_rounds": Nullable(CONTINUAL["max_joint_rounds"])}),
    }),
    "runner": Fields(required={"backend": Choice(BACKENDS),
                               "n_jobs": replace(Num.of(RUNNER_BOUNDS["n_jobs"]), nonzero=True),
                               "blas_threads": Num.of(RUNNER_BOUNDS["blas_threads"])},
                     optional={"device": Choice(DEVICES), "tf32": Bool(), "fused_ip_sums": Bool()}),
    "assess": Fields(required={"activation_bins": Num.of(BINS),
                               "activation_datasets": ListOf(Choice(DATASETS), empty=True)}),
    "privacy": Delegate(_privacy, ("epsilons", "delta", "relation", "clip", "ip_clip", "pct", "methods",
                                   "extra_methods", "fedavg_clip", "amplification", "sampling_study", "config")),
    # heterogeneous reservoirs (esnfed_stages/params/hetero.py checks the section)
    "heterogeneity": Delegate(_heterogeneity, ("seed", "mode", "vary", "combine", "alphas", "pcts")),
    # declared datasets (esnfed_stages/data/_datasets.py) and the import options of user ones
    "datasets": ListOf(Delegate(check_dataset_name)),
    "continual_datasets": ListOf(Delegate(check_dataset_name), empty=True),
    "study_datasets": ListOf(Delegate(check_dataset_name), empty=True),
    "imports": Named({}, lambda ds: Delegate(_import, IMPORT_KEYS), examples=EXAMPLES),
    # the imports dvc.yaml's import stage runs, each with its source (_imported_needs: the declared ones)
    "imported": Named({}, lambda ds: Text(), examples=EXAMPLES),
    # the embedded data dvc.yaml's synthesize and preprocess stages write (_embedded_needs: what the run reads)
    "embedded": Fields(required={
        "synthesize": Delegate(_embedded(SYNTHESIZED, "the embedded datasets"), SYNTHESIZED),
        "preprocess": Delegate(_embedded(DATASETS, "the papers' datasets and their variants; yours are imported",
                                         variants=True), DATASETS),
    }),
})


# ---------------------------------------------------------------- combinations
def _users(spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(key, user) of every user a partition spec lists."""
    out = [(f"train.{pct}", u) for pct, users in spec["train"].items() for u in users]
    return out + [(split, u) for split in ("validation", "test") for u in spec[split]]


def _combinations(params: Mapping[str, Any]) -> None:
    """Values valid one by one that cannot work together."""
    if "budget" in params and "budgets" in params and params["budget"] not in params["budgets"]:
        raise Invalid(f"budget: expected one of {', '.join(map(str, params['budgets']))} "
                      f"(the entries of budgets), got {quote(params['budget'])}")
    data = params.get("data") or {}
    if "synthetic_dir" in data and Path(data["synthetic_dir"]) == Path(data.get("raw_dir", "")):
        raise Invalid(f"data.raw_dir: must differ from data.synthetic_dir ({quote(data['raw_dir'])}): "
                      "`esnfed synthesize` would overwrite the real files")
    wesad_pre = (params.get("preprocess") or {}).get("wesad") or {}
    subjects = wesad_pre.get("subjects")
    spec = (params.get("partition") or {}).get("wesad")
    if subjects is not None and spec is not None:
        for where, user in _users(spec):
            if user not in subjects:
                raise Invalid(f"partition.wesad.{where}: user {quote(user)} is not in preprocess.wesad.subjects")
    generated = ((params.get("synthetic") or {}).get("wesad") or {}).get("subjects")
    if data.get("source") == "synthetic" and generated is not None and subjects is not None:
        for s in subjects:
            if s not in generated:
                raise Invalid(f"preprocess.wesad.subjects: {quote(s)} is not in synthetic.wesad.subjects "
                              "(data.source is synthetic)")


def _declared_datasets(params: Mapping[str, Any]) -> None:
    """Each dataset in ``datasets`` has its search space in every budget (only those: a pipeline of
    your own data needs no space.wesad); a user one its import and partition; continual and study
    ones, and those of assess.activation_datasets, are declared; continual ones have contexts (issue
    16); with a study dataset, every budget has the deep reservoirs' space.deep (the heterogeneous
    commands name a missing ``heterogeneity`` themselves: the report and ttest run without it)."""
    names = declared(params)
    imports, parts = params.get("imports") or {}, params.get("partition") or {}
    for name in names:
        if variant_base(params, name) is not None and name in imports:
            raise Invalid(f"imports.{name}: {quote(name)} is a variant of {variant_base(params, name)} "
                          f"(preprocess.{name}.base): preprocessed, not imported; remove one of the two")
        if reader_of(params, name) is None and name not in imports:
            raise Invalid(f"imports.{name}: missing (datasets lists {quote(name)}: say where its files are "
                          "and which columns to read)")
        if name not in DATASETS and "partition" in params and name not in parts:
            raise Invalid(f"partition.{name}: missing (datasets lists {quote(name)}: give its user splits, "
                          "fixed lists or {fractions: {validation, test}, seed})")
        for budget, b in (params.get("budgets") or {}).items():
            if name not in (b.get("space") or {}):
                raise Invalid(f"budgets.{budget}.space.{name}: missing ({quote(name)} is declared in datasets: "
                              "every budget searches its reservoirs)")
    from esnfed_stages.params.privacy import PER_DATASET  # noqa: PLC0415 (as _privacy)

    for key in PER_DATASET:
        value = (params.get("privacy") or {}).get(key)
        for name in names if isinstance(value, Mapping) else ():  # the privacy stage runs on every declared one
            if name not in value:
                raise Invalid(f"privacy.{key}.{name}: missing (datasets lists {quote(name)}; privacy.{key} is a "
                              f"mapping: give every declared dataset its {key}, or one number for all)")
    extra = (params.get("privacy") or {}).get("extra_methods") or []
    fedclip = [m for m in extra if _continual(m)] if isinstance(extra, list) else []
    if fedclip and isinstance(params.get("continual_datasets"), list):
        lacking = [name for name in names if name not in params["continual_datasets"]]
        if lacking:  # privacy-extra runs on every declared dataset; FedCLIP is selected on continual ones only
            raise Invalid(f"privacy.extra_methods: {fedclip[0]} runs on every declared dataset, but continual_datasets "
                          f"lacks {', '.join(map(quote, lacking))} (no FedCLIP selection there)")
    activation = (params.get("assess") or {}).get("activation_datasets")
    for key, listed in (("continual_datasets", params.get("continual_datasets")),
                        ("study_datasets", params.get("study_datasets")),
                        ("assess.activation_datasets", activation)):  # assess would skip it unseen
        unknown = [name for name in listed or [] if name not in names]
        if unknown:
            raise Invalid(f"{key}: {', '.join(map(quote, unknown))} {'is' if len(unknown) == 1 else 'are'} "
                          f"not in datasets ({', '.join(names)})")
    studies = params.get("study_datasets") or []
    for budget, b in (params.get("budgets") or {}).items() if studies else ():  # dvc.yaml's select-deep reads it
        if "deep" not in (b.get("space") or {}):
            raise Invalid(f"budgets.{budget}.space.deep: missing (study_datasets lists {quote(studies[0])}: "
                          "the deep reservoirs search their layers there)")
    for name in params.get("continual_datasets") or []:
        if reader_of(params, name) is None and not (imports.get(name) or {}).get("context"):
            raise Invalid(f"continual_datasets: {quote(name)} has no contexts (imports.{name}.context is not set)")


def _continual(method_id: Any) -> bool:
    """Whether ``method_id`` names a continual method (selected on the continual datasets only)."""
    try:
        return isinstance(method_id, str) and Method.parse(method_id).continual
    except ConfigError:
        return False


def _imported_needs(params: Mapping[str, Any]) -> None:
    """dvc.yaml imports the entries of ``imported`` (DVC's foreach cannot pick the declared names out
    of ``imports``): exactly your own datasets of ``datasets``, each with its imports.<name>.source (the
    import stage's dependency), so an undeclared entry of ``imports`` (a paused dataset, settings for
    `esnfed import` alone) costs nothing and cannot fail the run."""
    imported = params.get("imported")
    if imported is None:  # a partial file: DVC names the key it cannot find
        return
    names = declared(params)
    imports = params.get("imports") or {}
    for name in names:
        if reader_of(params, name) is None and name not in imported:  # imports.<name> is there (_declared_datasets)
            raise Invalid(f"imported.{name}: missing (datasets lists {quote(name)}: import@{name} writes "
                          f"data/processed/{name}; give it its source, imports.{name}.source "
                          f"{quote(imports[name]['source'])})")
    for name, source in imported.items():
        if name not in names:
            raise Invalid(f"imported.{name}: {quote(name)} is not in datasets ({', '.join(names)}): import@{name} "
                          f"would run for no stage; remove it here to leave the dataset out (imports.{name} may stay)")
        declared_source = imports[name]["source"]  # a declared dataset's import (_declared_datasets), checked
        if not same_source(source, declared_source):  # one file, as the stale-data check compares them
            raise Invalid(f"imported.{name}: expected {quote(declared_source)} (imports.{name}.source: import@{name} "
                          f"depends on the file it reads), got {quote(source)}")


def _imported_sources(params: Mapping[str, Any]) -> dict[str, Any]:
    """The source of each import dvc.yaml runs: ``imported``; absent (a partial file), that of each of
    your own datasets of ``datasets``."""
    if params.get("imported") is not None:
        return dict(params["imported"])
    imports = params.get("imports") or {}
    return {name: (imports.get(name) or {}).get("source") for name in declared(params) if name in imports}


def _inside(path: Any, folder: Path) -> bool:
    return isinstance(path, str) and Path(os.path.abspath(path)).is_relative_to(os.path.abspath(folder))


def embedded_read(params: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """The ``embedded`` section of exactly what the run reads: each paper dataset of ``datasets``
    and each protocol variant preprocessed (from its base's folder), and synthesized the base of
    each preprocessed one and each embedded folder an import of ``imported`` reads (imports.example;
    none where data.synthetic_dir is absent, a partial file)."""
    preprocess = {name: base for name in declared(params) if (base := reader_of(params, name)) is not None}
    root = (params.get("data") or {}).get("synthetic_dir")
    imported = {name for source in (_imported_sources(params).values() if root else ())
                for name, folder in DIRNAMES.items() if _inside(source, Path(root, folder))}
    return {"synthesize": {n: DIRNAMES[n] for n in DIRNAMES if n in preprocess.values() or n in imported},
            "preprocess": {n: DIRNAMES[base] for n, base in preprocess.items()}}


def _embedded_needs(params: Mapping[str, Any]) -> None:
    """dvc.yaml writes the embedded data ``embedded`` lists (and only that: a run of your data alone
    writes none of the papers'); what the run reads must be there: each paper dataset of ``datasets``
    preprocessed, each preprocessed one synthesized (preprocess@<name> depends on its folder, with
    data.source raw too), each embedded folder an import reads synthesized (imports.example), and
    the params section of each of these stages present; and nothing else (:func:`embedded_read`: an
    entry no stage reads would run a stage for nothing, as `imported` refuses an import)."""
    embedded = params.get("embedded")
    if embedded is None:  # a partial file: DVC names the key it cannot find
        return
    synthesized, preprocessed = embedded["synthesize"], embedded["preprocess"]
    read = embedded_read(params)
    for name in preprocessed:
        if name not in DATASETS and variant_base(params, name) is None:
            raise Invalid(f"embedded.preprocess: expected some of {', '.join(DATASETS)} (the papers' datasets, or a "
                          f"variant of one: preprocess.<name>.base; yours are imported), got {quote(name)}")
    _only_read("embedded.preprocess", preprocessed, read["preprocess"], "datasets does not list it")
    for name in declared(params):
        if reader_of(params, name) is not None and name not in preprocessed:
            raise Invalid(f"embedded.preprocess.{name}: missing (datasets lists {quote(name)}: preprocess@{name} "
                          f"writes data/processed/{name})")
    for name, folder in preprocessed.items():
        base = reader_of(params, name)  # a variant reads its base's folder
        if folder != DIRNAMES[base]:
            raise Invalid(f"embedded.preprocess.{name}: expected {quote(DIRNAMES[base])} (the folder of its base "
                          f"{base}, preprocess.{name}.base), got {quote(folder)}")
        if base not in synthesized:
            raise Invalid(f"embedded.synthesize.{base}: missing (embedded.preprocess lists {quote(name)}: "
                          f"preprocess@{name} depends on data.synthetic_dir/{DIRNAMES[base]})")
    root = (params.get("data") or {}).get("synthetic_dir")  # absent (a partial file): no import to check
    for dataset, source in _imported_sources(params).items() if root else ():  # what dvc.yaml imports
        for name, folder in DIRNAMES.items():
            if name not in synthesized and _inside(source, Path(root, folder)):
                raise Invalid(f"embedded.synthesize.{name}: missing (imports.{dataset}.source "
                              f"{quote(source)} lies in {Path(root, folder).as_posix()}, which "
                              f"synthesize@{name} writes)")
    if root:
        _only_read("embedded.synthesize", synthesized, read["synthesize"],
                   "neither embedded.preprocess lists it nor does an import (`imported`) read its folder")
    for section, stage, listed in (("synthetic", "synthesize", synthesized), ("preprocess", "preprocess", preprocessed)):
        for name in listed if section in params else ():
            if name not in (params[section] or {}):
                raise Invalid(f"{section}.{name}: missing (embedded.{stage} lists {quote(name)}: {stage}@{name} "
                              "reads it)")


def _only_read(key: str, listed: Mapping[str, Any], read: Mapping[str, Any], why: str) -> None:
    """Refuse an entry of ``key`` that the run does not read (``read``), naming it and those it reads."""
    for name in listed:
        if name not in read:
            raise Invalid(f"{key}.{name}: nothing reads it ({why}); expected some of: "
                          f"{', '.join(read) or 'none ({})'}")


def validate(params: Any, source: str | Path = "params.yaml") -> None:
    """Raise ConfigError("<source>: <key>: <problem>") at the first problem of the whole file."""
    try:
        SCHEMA.check("", params)
        _combinations(params)
        _declared_datasets(params)
        _imported_needs(params)
        _embedded_needs(params)
        protocol_tables.check(params)
    except Invalid as exc:
        raise ConfigError(f"{source}: {exc}") from None


def declared_keys() -> set[str]:
    """Every dotted leaf key of the schema ("*" for a free name such as a budget's)."""
    return SCHEMA.keys("")

