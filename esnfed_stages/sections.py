"""Looking up a key of the parsed params.yaml and checking it against a core bound: pure helpers,
apart from load_params so that the modules params_schema checks (partition, preprocess, experiment,
privacy) can use them without an import cycle."""

from __future__ import annotations

from typing import Any

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
