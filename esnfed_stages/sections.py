"""Looking up a key of the parsed params.yaml: a pure dict walk, apart from load_params so that the
modules params_schema checks (partition, preprocess, experiment) can use it without an import cycle."""

from __future__ import annotations

from typing import Any

from esnfed_core.errors import ConfigError


def section(params: dict[str, Any], key: str) -> Any:
    """``params[a][b]`` for key "a.b", with an error naming the missing key."""
    cur: Any = params
    for part in key.split("."):
        if not isinstance(cur, dict) or part not in cur:
            raise ConfigError(f"params.yaml: missing key '{key}'")
        cur = cur[part]
    return cur
