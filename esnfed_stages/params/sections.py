"""Looking up a key of the parsed params.yaml and checking it against a core bound: pure helpers,
apart from load_params so that the modules params_schema checks (partition, preprocess, experiment,
privacy) can use them without an import cycle."""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from esnfed_core.errors import ConfigError
from esnfed_core.validation import Bound, ParameterError


def section(params: dict[str, Any], key: str) -> Any:
    """``params[a][b]`` for key "a.b", with an error naming the missing key."""
    cur: Any = params
    for part in key.split("."):
        if not isinstance(cur, dict) or part not in cur:
            raise ConfigError(f"params.yaml: missing key '{key}'")
        cur = cur[part]
    return cur


def bounded(key: str, value: Any, bound: Bound) -> Any:
    """``value`` checked against the core's bound for it (the schema checks the same object):
    ConfigError("params.yaml: <key>: ...") when out of range."""
    try:
        bound.check(key, value)
    except ParameterError as exc:
        raise ConfigError(f"params.yaml: {exc}") from None
    return value


def check_keys(where: str, value: Any, allowed: Sequence[str]) -> Mapping[str, Any]:
    """``value`` as a mapping whose keys are all in ``allowed``; the error names the first unknown key."""
    if not isinstance(value, Mapping):
        raise ConfigError(f"params.yaml: '{where}' must be a mapping")
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        raise ConfigError(f"params.yaml: unknown key '{where}.{unknown[0]}' (allowed: {', '.join(allowed)})")
    return value
