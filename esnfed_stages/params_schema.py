"""The schema of params.yaml, checked as a whole whenever a stage reads the file (load_params):
unknown keys, wrong types, out-of-range values and impossible combinations, one line naming the key.

Declared here key by key (tests/test_params_schema.py checks that the repository's params.yaml
holds exactly these keys, so the defaults and the schema cannot drift). Sections whose parameters
belong to a dataset module are checked by that module: preprocess.<dataset> by its reader's own
validation, synthetic.<dataset> keys against the generator's signature. Top-level sections may be
absent (a stage reports a key it needs and cannot find); present ones are checked in full.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from esnfed_core import search, validation
from esnfed_core.continual_settings import CONTINUAL_BOUNDS
from esnfed_core.errors import ConfigError
from esnfed_core.ip_rule import IP_BOUNDS
from esnfed_core.metrics import BINS
from esnfed_core.readout import LAMBDA, SOLVERS
from esnfed_core.reservoir import BATCH_SIZE, RESERVOIR_BOUNDS
from esnfed_core.search import parse_dimension
from esnfed_core.stats import ALPHA
from esnfed_core.trial import RETRAIN_LAMBDA
from esnfed_core.validation import Bound, ParameterError, check_param
from esnfed_core.vocabulary import BACKENDS, DATASETS, DEVICES, PCTS, SOURCES, VARIANTS
from esnfed_stages._datasets import NAME, RESERVED, bind_kwargs, dataset_function
from esnfed_stages.experiment_params import RUNNER_BOUNDS
from esnfed_stages.import_data import import_params
from esnfed_stages.partition import check_partition


class Invalid(ConfigError):
    """One schema violation; the message starts with the dotted key."""


# ---------------------------------------------------------------- node types
class Node:
    def check(self, key: str, value: Any) -> None:
        raise NotImplementedError

    def keys(self, key: str) -> set[str]:
        """Dotted leaf keys this node declares (for the drift test)."""
        return {key}


@dataclass(frozen=True)
class Num(Node):
    """A finite number (an integer if ``integer``) in a range; validation.check_param's rules."""

    integer: bool = False
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    nonzero: bool = False  # joblib's n_jobs: any integer but 0

    @classmethod
    def of(cls, bound: Bound) -> "Num":
        """The range of a core value type's parameter (defined there, once)."""
        return cls(bound.integer, bound.low, bound.high, bound.low_open, bound.high_open)

    def check(self, key: str, value: Any) -> None:
        try:
            check_param(key, value, integer=self.integer, low=self.low, high=self.high,
                        low_open=self.low_open, high_open=self.high_open)
        except ParameterError as exc:
            raise Invalid(str(exc)) from None
        if self.nonzero and value == 0:
            raise Invalid(f"{key}: must not be 0, got 0")


@dataclass(frozen=True)
class Choice(Node):
    values: tuple

    def check(self, key: str, value: Any) -> None:
        # bool is an int in Python: true must not pass for 1
        if isinstance(value, bool) or value not in self.values:
            raise Invalid(f"{key}: expected one of {', '.join(map(str, self.values))}, got {value!r}")


class Bool(Node):
    def check(self, key: str, value: Any) -> None:
        if not isinstance(value, bool):
            raise Invalid(f"{key}: expected true or false, got {value!r}")


class Text(Node):
    def check(self, key: str, value: Any) -> None:
        if not isinstance(value, str) or not value:
            raise Invalid(f"{key}: expected a non-empty string, got {value!r}")


@dataclass(frozen=True)
class ListOf(Node):
    """A list of ``item``s, without repeats; non-empty unless ``empty``."""

    item: Node
    empty: bool = False

    def check(self, key: str, value: Any) -> None:
        if not isinstance(value, list) or (not value and not self.empty):
            raise Invalid(f"{key}: expected a {'' if self.empty else 'non-empty '}list, got {value!r}")
        for v in value:
            self.item.check(key, v)
        hashable = [v for v in value if not isinstance(v, (list, dict))]
        if len(set(hashable)) != len(hashable):
            raise Invalid(f"{key}: lists a value twice: {value!r}")


@dataclass(frozen=True)
class Nullable(Node):
    inner: Node

    def check(self, key: str, value: Any) -> None:
        if value is not None:
            self.inner.check(key, value)


@dataclass(frozen=True)
class Fields(Node):
    """A mapping with the ``required`` and ``optional`` keys only."""

    required: Mapping[str, Node] = field(default_factory=dict)
    optional: Mapping[str, Node] = field(default_factory=dict)

    def check(self, key: str, value: Any) -> None:
        where = f"{key}: " if key else ""
        if not isinstance(value, Mapping):
            raise Invalid(f"{where}expected a mapping, got {value!r}")
        allowed = {**self.required, **self.optional}
        for k in value:
            if str(k) not in allowed:
                expected = ", ".join(allowed) or "no keys"
                raise Invalid(f"{_join(key, k)}: unknown key (expected {expected})")
        for k in self.required:
            if k not in value:
                raise Invalid(f"{_join(key, k)}: missing")
        for k, node in allowed.items():
            if k in value:
                node.check(_join(key, k), value[k])

    def keys(self, key: str) -> set[str]:
        out: set[str] = set()
        for k, node in {**self.required, **self.optional}.items():
            out |= node.keys(_join(key, k))
        return out or {key}


@dataclass(frozen=True)
class Entries(Node):
    """A non-empty mapping of free names (e.g. budget names) to ``value`` nodes."""

    value: Node

    def check(self, key: str, value: Any) -> None:
        if not isinstance(value, Mapping) or not value:
            raise Invalid(f"{key}: expected a non-empty mapping of name -> settings, got {value!r}")
        for name, v in value.items():
            self.value.check(f"{key}.{name}", v)

    def keys(self, key: str) -> set[str]:
        return self.value.keys(f"{key}.*")


@dataclass(frozen=True)
class Space(Node):
    """A search space (esnfed_core.search): each hyperparameter's every possible value must lie in
    its domain; integer hyperparameters need a list or an integer grid."""

    domains: Mapping[str, Num]

    def check(self, key: str, value: Any) -> None:
        Fields(required={n: _ANY for n in self.domains}).check(key, value)
        for name, domain in self.domains.items():
            try:
                dim = parse_dimension(name, value[name], key)
            except ConfigError as exc:
                raise Invalid(str(exc)) from None
            where = f"{key}.{name}"
            if dim.values is not None:
                for v in dim.values:
                    domain.check(where, v)
            elif domain.integer:
                raise Invalid(f"{where}: must be a list or a {{low, high, step}} grid of integers, "
                              f"got a continuous range {value[name]!r}")
            else:  # uniform on [low, high): high may equal an inclusive upper bound
                domain.check(f"{where}.low", dim.low)
                Num(high=domain.high).check(f"{where}.high", dim.high)

    def keys(self, key: str) -> set[str]:
        return {f"{key}.{n}" for n in self.domains}


@dataclass(frozen=True)
class Delegate(Node):
    """A section whose checks live elsewhere: ``fn(key, value)`` raises ConfigError or
    ParameterError naming the key."""

    fn: Callable[[str, Any], None]
    declared: Sequence[str] = ()  # keys of the repository's params.yaml this section may hold

    def check(self, key: str, value: Any) -> None:
        try:
            self.fn(key, value)
        except (ConfigError, ParameterError) as exc:
            raise Invalid(_strip(str(exc))) from None

    def keys(self, key: str) -> set[str]:
        return {f"{key}.{k}" for k in self.declared} or {key}


@dataclass(frozen=True)
class Named(Node):
    """A mapping of fixed keys (``known``; those in ``required`` must be present) and of any other
    key, a user dataset's name (issue 16), checked by ``other(name)``. ``examples``: the user
    datasets of the repository's params.yaml (for the drift test of declared_keys)."""

    known: Mapping[str, Node]
    other: Callable[[str], Node]
    required: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()

    def check(self, key: str, value: Any) -> None:
        if not isinstance(value, Mapping):
            raise Invalid(f"{key}: expected a mapping, got {value!r}")
        for k in self.required:
            if k not in value:
                raise Invalid(f"{_join(key, k)}: missing")
        for k, v in value.items():
            if str(k) in self.known:
                self.known[str(k)].check(_join(key, k), v)
            else:
                _dataset_name(_join(key, k), str(k), what="key")
                self.other(str(k)).check(_join(key, k), v)

    def keys(self, key: str) -> set[str]:
        out: set[str] = set()
        for k, node in self.known.items():
            out |= node.keys(_join(key, k))
        for name in self.examples:
            out |= self.other(name).keys(_join(key, name))
        return out


def _dataset_name(key: str, name: Any, what: str = "name") -> None:
    """A user dataset's name: a folder, a dvc stage suffix and a params key (not ip / fedip)."""
    if not isinstance(name, str) or not NAME.fullmatch(name) or name in RESERVED:
        raise Invalid(f"{key}: {name!r} is not a dataset {what} (lowercase letters, digits and _, "
                      f"starting with a letter; not {' or '.join(RESERVED)})")


class _Any(Node):
    def check(self, key: str, value: Any) -> None:
        return None


_ANY = _Any()


def _join(key: str, k: Any) -> str:
    return f"{key}.{k}" if key else str(k)


def _strip(message: str) -> str:
    """Messages of the delegated checks without their own "params.yaml: " prefix."""
    return message.split("params.yaml: ", 1)[1] if message.startswith("params.yaml: ") else message


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
            raise Invalid(f"{key}: expected a mapping, got {value!r}")
        if _module_function(dataset, "preprocess") and (describe := _module_function(dataset, "describe")):
            describe(value)  # the reader's own validation (defaults, units, ranges)
    return check


def _synthetic(dataset: str, fields: Mapping[str, Node]) -> Callable[[str, Any], None]:
    def check(key: str, value: Any) -> None:
        if not isinstance(value, Mapping):
            raise Invalid(f"{key}: expected a mapping, got {value!r}")
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


def _activation_pct(key: str, value: Any) -> None:
    if isinstance(value, bool) or str(value) not in PCTS:
        raise Invalid(f"{key}: expected one of {', '.join(PCTS)}, got {value!r}")


def _privacy(key: str, value: Any) -> None:
    from esnfed_stages.privacy import privacy_params  # noqa: PLC0415 (the stage owns its checks)

    privacy_params({"privacy": value})


def _heterogeneity(key: str, value: Any) -> None:
    from esnfed_stages.heterogeneity_params import hetero_params  # noqa: PLC0415 (the stage owns its checks)

    hetero_params({"heterogeneity": value})


# ---------------------------------------------------------------- the schema
POSITIVE = Num.of(validation.POSITIVE)
COUNT = Num.of(validation.COUNT)
SEED = Num.of(search.SEED)
# Bounds of values the core consumes come from the core's value types (Num.of), so a value the
# schema passes is one the core accepts (tests/test_param_bounds.py walks each bound).
RESERVOIR_SPACE = {name: Num.of(bound) for name, bound in RESERVOIR_BOUNDS.items()}
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
# issue 16: the embedded example of a user dataset (a plain CSV written by `esnfed synthesize`)
SYNTHETIC["example"] = {"subjects": COUNT, "seconds_per_activity": POSITIVE, "rate": POSITIVE}
SYNTHETIC_KEYS["example"] = ("seed", "subjects", "seconds_per_activity", "rate")
EXAMPLES = ("example",)  # the user datasets of the repository's params.yaml
IMPORT_KEYS = ("source", "user", "time", "time_unit", "label", "context", "features", "classes", "contexts",
               "rate", "window")
PREPROCESS_KEYS = {"wesad": ("modality", "window", "wrist_rate", "contexts", "subjects"),
                   "hhar": ("devices", "target_rate", "window", "join_tolerance_ms", "drop_null")}

SCHEMA = Fields(optional={
    "seed": SEED,
    "ttest": Fields(required={"variant": Choice(VARIANTS), "alpha": Num.of(ALPHA)}),
    "report": Fields(required={"activation_pct": Delegate(_activation_pct)},
                     optional={"contexts_pct": Delegate(_activation_pct)}),
    "data": Fields(required={"source": Choice(SOURCES), "synthetic_dir": Text(), "raw_dir": Text()}),
    "synthetic": Fields(optional={
        ds: Delegate(_synthetic(ds, f), SYNTHETIC_KEYS[ds]) for ds, f in SYNTHETIC.items()}),
    "preprocess": Fields(optional={ds: Delegate(_preprocess(ds), PREPROCESS_KEYS[ds]) for ds in DATASETS}),
    "partition": Named({ds: Delegate(_partition(ds), ("train", "validation", "test")) for ds in DATASETS},
                       lambda ds: Delegate(_partition(ds), ("fractions.validation", "fractions.test", "seed")),
                       examples=EXAMPLES),
    "budget": Text(),
    "budgets": Entries(Fields(required={
        "trials": COUNT, "retrains": COUNT,
        "space": Named({
            "wesad": Space(RESERVOIR_SPACE), "hhar": Space(RESERVOIR_SPACE),
            "ip": Space({"sigma": IP["sigma"], "rounds": COUNT}),
            "fedip": Space({"sigma": IP["sigma"], "rounds": COUNT, "local_epochs": COUNT}),
            "deep": Space({"layers": COUNT}),  # deep reservoirs (issue 13): added for deep-* methods
        }, lambda ds: Space(RESERVOIR_SPACE), required=("wesad", "hhar", "ip", "fedip"), examples=EXAMPLES),
    })),
    "readout": Fields(required={"lambdas": ListOf(Num.of(LAMBDA)), "batch_size": Num.of(BATCH_SIZE),
                                "solver": Choice(SOLVERS)}),
    "retrain": Fields(required={"lambda": Choice(RETRAIN_LAMBDA)}),
    "plasticity": Fields(required={"mu": IP["mu"], "eta": IP["eta"], "batch_size": IP["batch_size"],
                                   "normalize_step": Bool()}),
    "continual": Fields(required={
        "lambda": CONTINUAL["lambda"],
        "naive": Fields(),
        "replay": Fields(required={"fraction": CONTINUAL["replay_fraction"], "batch": CONTINUAL["replay_batch"],
                                   "shuffle": Bool()}),
        "joint": Fields(required={"patience": Nullable(CONTINUAL["patience"]),
                                  "max_rounds": CONTINUAL["max_joint_rounds"]}),
    }),
    "runner": Fields(required={"backend": Choice(BACKENDS),
                               "n_jobs": replace(Num.of(RUNNER_BOUNDS["n_jobs"]), nonzero=True),
                               "blas_threads": Num.of(RUNNER_BOUNDS["blas_threads"])},
                     optional={"device": Choice(DEVICES), "tf32": Bool()}),
    "assess": Fields(required={"activation_bins": Num.of(BINS),
                               "activation_datasets": ListOf(Choice(DATASETS), empty=True)}),
    "privacy": Delegate(_privacy, ("epsilons", "delta", "relation", "clip", "ip_clip", "pct", "methods")),
    # issue 13: heterogeneous reservoirs (esnfed_stages/heterogeneity.py checks the section)
    "heterogeneity": Delegate(_heterogeneity, ("seed", "mode", "vary", "combine", "alphas", "pcts")),
    # issue 16: declared datasets (esnfed_stages/_datasets.py) and the import options of user ones
    "datasets": ListOf(Delegate(_dataset_name)),
    "continual_datasets": ListOf(Delegate(_dataset_name), empty=True),
    "imports": Named({}, lambda ds: Delegate(_import, IMPORT_KEYS), examples=EXAMPLES),
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
                      f"(the entries of budgets), got {params['budget']!r}")
    data = params.get("data") or {}
    if "synthetic_dir" in data and Path(data["synthetic_dir"]) == Path(data.get("raw_dir", "")):
        raise Invalid(f"data.raw_dir: must differ from data.synthetic_dir ({data['raw_dir']!r}): "
                      "`esnfed synthesize` would overwrite the real files")
    wesad_pre = (params.get("preprocess") or {}).get("wesad") or {}
    subjects = wesad_pre.get("subjects")
    spec = (params.get("partition") or {}).get("wesad")
    if subjects is not None and spec is not None:
        for where, user in _users(spec):
            if user not in subjects:
                raise Invalid(f"partition.wesad.{where}: user {user!r} is not in preprocess.wesad.subjects")
    generated = ((params.get("synthetic") or {}).get("wesad") or {}).get("subjects")
    if data.get("source") == "synthetic" and generated is not None and subjects is not None:
        for s in subjects:
            if s not in generated:
                raise Invalid(f"preprocess.wesad.subjects: {s!r} is not in synthetic.wesad.subjects "
                              "(data.source is synthetic)")


def _declared_datasets(params: Mapping[str, Any]) -> None:
    """Each user dataset in ``datasets`` has its import, partition and search space in every budget;
    continual ones are declared and have contexts (issue 16)."""
    names = params.get("datasets")
    names = list(DATASETS) if names is None else names
    imports, parts = params.get("imports") or {}, params.get("partition") or {}
    for name in names:
        if name in DATASETS:
            continue
        if name not in imports:
            raise Invalid(f"imports.{name}: missing (datasets lists {name!r}: say where its files are "
                          "and which columns to read)")
        if "partition" in params and name not in parts:
            raise Invalid(f"partition.{name}: missing (datasets lists {name!r}: give its user splits, "
                          "fixed lists or {fractions: {validation, test}, seed})")
        for budget, b in (params.get("budgets") or {}).items():
            if name not in (b.get("space") or {}):
                raise Invalid(f"budgets.{budget}.space.{name}: missing (datasets lists {name!r})")
    for name in params.get("continual_datasets") or []:
        if name not in names:
            raise Invalid(f"continual_datasets: {name!r} is not in datasets ({', '.join(names)})")
        if name not in DATASETS and not (imports.get(name) or {}).get("context"):
            raise Invalid(f"continual_datasets: {name!r} has no contexts (imports.{name}.context is not set)")


def validate(params: Any, source: str | Path = "params.yaml") -> None:
    """Raise ConfigError("<source>: <key>: <problem>") at the first problem of the whole file."""
    try:
        SCHEMA.check("", params)
        _combinations(params)
        _declared_datasets(params)
    except Invalid as exc:
        raise ConfigError(f"{source}: {exc}") from None


def declared_keys() -> set[str]:
    """Every dotted leaf key of the schema ("*" for a free name such as a budget's)."""
    return SCHEMA.keys("")

