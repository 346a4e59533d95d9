"""Which dataset module implements each data stage: looked up lazily, so one dataset's stages work
while another's module is missing, and a missing module is a one-line error. Also the datasets
params.yaml declares: the papers' two, read by `preprocess`, and the user's own,
imported by `import`; every stage, the CLI's --dataset and the report take them from here."""

from __future__ import annotations

import importlib
import inspect
import re
from typing import Any, Callable, Mapping

from esnfed_core.errors import ConfigError
from esnfed_core.quote import quote
from esnfed_core.vocabulary import papers_first
from esnfed_core.validation import ParameterError
from esnfed_core.vocabulary import DATASETS

DIRNAMES = {"wesad": "WESAD", "hhar": "HHAR", "example": "EXAMPLE"}  # folder under the raw root
# (dataset, stage) -> (module, function); the functions share one signature per stage.
_FUNCTIONS = {
    ("wesad", "synthesize"): ("esnfed_core.data.wesad_synth", "synthesize_wesad"),
    ("hhar", "synthesize"): ("esnfed_core.data.hhar_synth", "synthesize_hhar"),
    ("wesad", "preprocess"): ("esnfed_core.data.wesad", "preprocess_wesad"),
    ("hhar", "preprocess"): ("esnfed_core.data.hhar", "preprocess_hhar"),
    # describe(params) -> {"feature_names", "classes", "context_names"} of the processed output
    ("wesad", "describe"): ("esnfed_core.data.wesad", "describe"),
    ("hhar", "describe"): ("esnfed_stages.data._datasets", "describe_hhar"),
    # the embedded example of a user dataset (a plain CSV, imported by `esnfed import`)
    ("example", "synthesize"): ("esnfed_core.data.example_synth", "synthesize_example"),
}
SYNTHESIZED = DATASETS + ("example",)  # what `esnfed synthesize` writes


def describe_hhar(params: Mapping[str, Any]) -> dict[str, Any]:
    """HHAR's processed output: six inertial channels (or the IncFed paper's 32 features,
    ``features: ijcnn32``), six activities, one context per device."""
    hhar = dataset_function("hhar", "preprocess").__module__
    module = importlib.import_module(hhar)
    resolved = module.resolve_params(dict(params))
    return {"feature_names": list(module.feature_names(resolved)), "classes": list(module.CLASSES),
            "context_names": list(resolved["devices"])}


def n_classes(dataset: str) -> int:
    """Classes of ``dataset``: the length of its module's CLASSES, which preprocess writes to the
    manifest (so the report's analytic message sizes and the data agree)."""
    return len(importlib.import_module(dataset_function(dataset, "preprocess").__module__).CLASSES)


def classes_of(dataset: str, user_classes: Mapping[str, int] | None = None) -> int | None:
    """C of ``dataset`` where an assess file does not record it: the papers' from their module
    (n_classes), a user dataset's from ``user_classes`` (params.yaml imports.<name>.classes; None:
    unknown, the analytic message sizes then stay n/a)."""
    return n_classes(dataset) if dataset in DATASETS else (user_classes or {}).get(dataset)


def check_dataset(dataset: str) -> str:
    if dataset not in DATASETS:
        raise ConfigError(f"--dataset: expected one of {', '.join(DATASETS)}, got {quote(dataset)} (the papers' "
                          "datasets; import your own with `esnfed import`)")
    return dataset


def check_synthesized(dataset: str) -> str:
    """``dataset`` if `esnfed synthesize` writes it (SYNTHESIZED), else a one-line error listing them."""
    if dataset not in SYNTHESIZED:
        raise ConfigError(f"--dataset: expected one of {', '.join(SYNTHESIZED)}, got {quote(dataset)}")
    return dataset


def dataset_function(dataset: str, stage: str) -> Callable:
    """Import the function implementing ``stage`` for ``dataset`` on first use."""
    if (dataset, stage) not in _FUNCTIONS:
        check_dataset(dataset)
    module_name, name = _FUNCTIONS[(dataset, stage)]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if exc.name != module_name:  # a broken dependency inside the module: not ours to hide
            raise
        raise ConfigError(f"{stage} --dataset {dataset}: {module_name} is not available "
                          "in this installation") from None
    fn = getattr(module, name, None)
    if fn is None:
        raise ConfigError(f"{stage} --dataset {dataset}: {module_name} has no {name}()")
    return fn


def bind_kwargs(fn: Callable, kwargs: Mapping[str, Any], key: str) -> None:
    """Check that params.yaml section ``key`` only holds arguments ``fn`` accepts."""
    params = inspect.signature(fn).parameters
    for name in kwargs:
        if name not in params or params[name].kind in (inspect.Parameter.VAR_POSITIONAL,
                                                        inspect.Parameter.POSITIONAL_ONLY):
            allowed = [p for p, v in params.items() if v.kind in (v.KEYWORD_ONLY, v.POSITIONAL_OR_KEYWORD)]
            raise ConfigError(f"params.yaml: {key}.{name} is not a parameter (expected one of {allowed})")


# ---------------------------------------------------------------- declared datasets
NAME = re.compile(r"[a-z][a-z0-9_]*")  # a user dataset's name: a folder, a dvc stage suffix, a key
RESERVED = ("ip", "fedip", "deep")  # keys of budgets.*.space beside the datasets'


def check_own_name(key: str, name: Any) -> str:
    """``name`` if it can name a dataset of your own (`esnfed import --dataset`, params.yaml
    ``imports.<name>``, ``datasets``): NAME, not RESERVED, not one of the papers' DATASETS (their
    data/processed/<name> is written by `preprocess` and read by the paper tables; `example` is
    an import of your kind). One rule for the command line and params.yaml; else ConfigError."""
    if not isinstance(name, str) or not NAME.fullmatch(name):
        raise ConfigError(f"{key}: {quote(name)} is not a dataset name (lowercase letters, digits and _, starting "
                          "with a letter: it names a folder, dvc stages and params.yaml keys)")
    if name in RESERVED:
        raise ConfigError(f"{key}: {quote(name)} is not a dataset name ({', '.join(RESERVED)} are keys of "
                          "budgets.*.space beside the datasets')")
    if name in DATASETS:
        raise ConfigError(f"{key}: {quote(name)} is one of the papers' datasets (data/processed/{name} is written by "
                          "`esnfed preprocess` and read by the paper tables); name your own dataset otherwise")
    return name


def check_dataset_name(key: str, name: Any) -> str:
    """``name`` if it names a dataset of params.yaml ``datasets``: the papers' or one of your own."""
    return name if isinstance(name, str) and name in DATASETS else check_own_name(key, name)


def declared(params: Mapping[str, Any]) -> tuple[str, ...]:
    """params.yaml ``datasets``: every dataset the pipeline runs (absent: the papers' two)."""
    value = params.get("datasets") if isinstance(params, Mapping) else None
    return DATASETS if value is None else tuple(value)


def continual_declared(params: Mapping[str, Any]) -> tuple[str, ...]:
    """params.yaml ``continual_datasets``: those the continual methods run on (absent: the papers')."""
    value = params.get("continual_datasets") if isinstance(params, Mapping) else None
    return tuple(d for d in DATASETS if d in declared(params)) if value is None else tuple(value)


def study_declared(params: Mapping[str, Any]) -> tuple[str, ...]:
    """params.yaml ``study_datasets``: the declared datasets this project's own studies run on (deep
    and heterogeneous reservoirs; the Flower apps and SecAgg+), the papers' or
    your own (the papers' first: the tables' order); absent: the declared papers' datasets."""
    value = params.get("study_datasets") if isinstance(params, Mapping) else None
    return tuple(d for d in DATASETS if d in declared(params)) if value is None else tuple(papers_first(value))


def method_datasets(params: Mapping[str, Any], method: Any) -> tuple[str, ...]:
    """The declared datasets dvc.yaml runs ``method`` (an esnfed_core.method.Method) on, the
    default of select, retrain and assess without --dataset: continual methods continual_datasets;
    deep and heterogeneous reservoirs study_datasets; the others every declared dataset
    (tests/test_dvc_datasets.py checks it against dvc.yaml's stages)."""
    if method.continual:
        return continual_declared(params)
    if method.deep or method.heterogeneous:
        return study_declared(params)
    return declared(params)


def is_paper(dataset: str) -> bool:
    return dataset in DATASETS


# ---------------------------------------------------------------- protocol variants (ESANN 2022)
# A variant is a second, differently preprocessed copy of a paper dataset: a declared name whose
# params.yaml ``preprocess.<name>`` says ``base: wesad|hhar`` and the base reader's own keys. It is
# preprocessed (not imported) by its base's reader from its base's raw files, into
# data/processed/<name>, and is otherwise one of your own datasets (partition.<name>,
# budgets.*.space.<name>, the generic tables).
BASE_KEY = "base"


def variant_base(params: Mapping[str, Any], name: str) -> str | None:
    """The paper dataset ``name`` is a variant of (``preprocess.<name>.base``), else None (a paper
    dataset itself, an import, or an undeclared name)."""
    if name in DATASETS or not isinstance(params, Mapping):
        return None
    section = (params.get("preprocess") or {}).get(name) if isinstance(params.get("preprocess"), Mapping) else None
    base = section.get(BASE_KEY) if isinstance(section, Mapping) else None
    return base if isinstance(base, str) and base in DATASETS else None


def reader_of(params: Mapping[str, Any], name: str) -> str | None:
    """The paper dataset whose reader preprocesses ``name``: itself or its variant's base; None for
    a dataset of your own that is imported."""
    return name if name in DATASETS else variant_base(params, name)


def reader_settings(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``preprocess.<name>`` as the base reader takes it: without ``base``."""
    return {k: v for k, v in settings.items() if k != BASE_KEY}


def check_variant(key: str, settings: Any) -> str:
    """``preprocess.<name>`` of a variant (``key``), checked: ``base`` one of the papers' datasets,
    the other keys by the base reader's own validation (its errors name ``key``). Returns the base."""
    name = key.rsplit(".", 1)[-1]
    if not isinstance(settings, Mapping):
        raise ConfigError(f"{key}: expected a mapping with {BASE_KEY}: {' | '.join(DATASETS)} and the base "
                          f"reader's keys, got {quote(settings)}")
    base = settings.get(BASE_KEY)
    if base not in DATASETS:
        raise ConfigError(f"{key}.{BASE_KEY}: expected one of {', '.join(DATASETS)} (a variant is a paper dataset "
                          f"preprocessed otherwise; import your own data with imports.{name}), got {quote(base)}")
    try:
        dataset_function(base, "describe")(reader_settings(settings))
    except (ConfigError, ParameterError) as exc:  # the reader names its own section: name the variant's
        raise type(exc)(str(exc).replace(f"preprocess.{base}.", f"{key}.")) from None
    return base


def check_declared(params: Mapping[str, Any], dataset: str, option: str = "--dataset") -> str:
    """``dataset`` if params.yaml declares it, else a one-line error listing the declared names."""
    names = declared(params)
    if dataset not in names:
        raise ConfigError(f"{option}: {quote(dataset)} is not declared in params.yaml datasets "
                          f"(declared: {', '.join(names)})")
    return dataset
