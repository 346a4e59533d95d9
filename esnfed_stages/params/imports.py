"""The options of `esnfed import` (params.yaml ``imports.<dataset>``, or the command line on
top): one checked value, read by the import stage, the processed-data params and the schema."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from esnfed_core.data.import_options import MISSING, TIME_UNITS
from esnfed_core.errors import ConfigError
from esnfed_core.quote import quote
from esnfed_core.validation import Bound, ParameterError

FORMATS = ("auto", "csv", "parquet", "npz")
SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".npz": "npz"}

# Bounds of the numeric import options, in one place (the schema checks params.yaml through
# import_params, so params.yaml and the command line meet the same bounds).
BOUNDS = {"window": Bound(integer=True, low=1), "rate": Bound(low=0.0, low_open=True),
          "max_gap": Bound(low=0.0, low_open=True), "chunk_rows": Bound(integer=True, low=1)}

# How a message names a value given on the command line (`esnfed import`), not in params.yaml
CLI_NAMES = {"source": "argument SOURCE"}


@dataclass(frozen=True)
class ImportParams:
    """``imports.<dataset>`` of params.yaml (or the command line), checked."""

    source: str
    features: tuple[str, ...]
    window: int
    rate: float | None = None
    max_gap: float | None = None  # seconds; None: tabular.default_max_gap per user
    missing: str = "refuse"  # a missing (empty, NaN) feature value: refuse, interpolate or drop (tabular.MISSING)
    user: str = "user"
    time: str = "time"
    label: str = "label"
    labelled: bool = True  # False: recordings without a label column, for `esnfed predict` only
    context: str | None = None
    time_unit: str = "s"
    classes: tuple[str, ...] | None = None
    contexts: tuple[str, ...] | None = None
    drop_labels: tuple[str, ...] = ()
    format: str = "auto"
    delimiter: str = ","
    chunk_rows: int = 100_000
    key: str = field(default="imports", compare=False)  # where the values came from, for messages
    given: frozenset[str] = field(default=frozenset(), compare=False)  # the fields the command line gave

    def name(self, value: str) -> str:
        """How messages name field ``value``: its option (--contexts, argument SOURCE) when the
        command line gave it, else its params.yaml key (imports.<dataset>.contexts)."""
        if value in self.given:
            return CLI_NAMES.get(value, "--" + value.replace("_", "-"))
        return f"{self.key}.{value}"

    def __post_init__(self) -> None:
        n = self.name
        _text(n("source"), self.source)
        if not isinstance(self.labelled, bool):
            raise ConfigError(f"{n('labelled')}: expected true or false, got {quote(self.labelled)}")
        for name in ("user", "time", "label") if self.labelled else ("user", "time"):
            _text(n(name), getattr(self, name))
        if not self.labelled and (self.classes is not None or self.drop_labels):
            named = n("classes") if self.classes is not None else n("drop_labels")
            raise ConfigError(f"{named}: an unlabelled import ({n('labelled')}: false) reads no label column")
        if self.context is not None:
            _text(n("context"), self.context)
        if not self.features or not all(isinstance(f, str) and f for f in self.features):
            raise ConfigError(f"{n('features')}: expected a non-empty list of column names, got {quote(self.features)}")
        columns = self.columns
        if len(set(columns)) != len(columns):
            twice = next(c for c in columns if columns.count(c) > 1)
            named = [f for f in ("user", "time", "label", "context", "features")
                     if twice == getattr(self, f) or (f == "features" and twice in self.features)]
            where = " and ".join(map(n, named)) if self.given & set(named) else self.key
            raise ConfigError(f"{where}: a column is named twice among user, time, label, context and features: "
                              f"{quote(columns)}")
        for name in ("window", "rate", "max_gap", "chunk_rows"):
            value = getattr(self, name)
            if value is not None:
                try:
                    BOUNDS[name].check(n(name), value)
                except ParameterError as exc:
                    raise ConfigError(str(exc)) from None
        for name, allowed in (("time_unit", tuple(TIME_UNITS)), ("format", FORMATS), ("missing", MISSING)):
            if getattr(self, name) not in allowed:
                raise ConfigError(f"{n(name)}: expected one of {', '.join(allowed)}, got {quote(getattr(self, name))}")
        if not isinstance(self.delimiter, str) or len(self.delimiter) != 1:
            raise ConfigError(f"{n('delimiter')}: expected one character, got {quote(self.delimiter)}")
        for name in ("classes", "contexts", "drop_labels"):
            value = getattr(self, name)
            if value is not None and (len(set(value)) != len(value) or not all(isinstance(v, str) for v in value)):
                raise ConfigError(f"{n(name)}: expected a list of distinct strings, got {quote(value)}")
        if self.classes is not None and not self.classes:
            raise ConfigError(f"{n('classes')}: expected a non-empty list")
        if self.contexts is not None and self.context is None:
            raise ConfigError(f"{n('contexts')}: lists context values but no context column is given")

    def recorded(self) -> dict[str, Any]:
        """The settings as the manifest records them (``params``), without where they came from:
        ``labelled`` only when false (a labelled import's manifest is as it always was), and then
        none of the label's settings (none is read)."""
        left_out = ("key", "given") + (("labelled",) if self.labelled else ("label", "classes", "drop_labels"))
        return {k: v for k, v in vars(self).items() if k not in left_out}

    @property
    def columns(self) -> list[str]:
        """The columns the import reads (the label column only when ``labelled``)."""
        return [self.user, self.time, *([self.label] if self.labelled else []),
                *([self.context] if self.context else []), *self.features]


def _text(key: str, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{key}: expected a non-empty string, got {quote(value)}")

_LISTS = ("features", "classes", "contexts", "drop_labels")


def import_params(values: Mapping[str, Any], key: str = "imports", **overrides: Any) -> ImportParams:
    """``values`` (a params section) with the non-None ``overrides`` (the command line's: messages
    name them by their option, ImportParams.name) on top, checked."""
    if not isinstance(values, Mapping):
        raise ConfigError(f"{key}: expected a mapping, got {quote(values)}")
    allowed = set(ImportParams.__dataclass_fields__) - {"key", "given"}
    for k in values:
        if k not in allowed:
            raise ConfigError(f"{key}.{k}: unknown key (expected {', '.join(sorted(allowed))})")
    given = {k: v for k, v in overrides.items() if v is not None}
    merged = {**values, **given}
    if merged.get("labelled") is False:  # the declared dataset's labels are not read: new recordings
        merged = {k: v for k, v in merged.items() if k not in ("label", "classes", "drop_labels") or k in given}
    for k in ("source", "features", "window"):
        if k not in merged:
            raise ConfigError(f"{key}.{k}: missing")
    for k in _LISTS:
        v = merged.get(k)
        if v is not None:
            if not isinstance(v, (list, tuple)):
                raise ConfigError(f"{key}.{k}: expected a list, got {quote(v)}")
            merged[k] = tuple(str(i) if k != "features" and isinstance(i, (int, float)) and not isinstance(i, bool)
                              else i for i in v)
    return ImportParams(**merged, key=key, given=frozenset(given))
