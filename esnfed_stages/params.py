"""Reading params.yaml: the single source of every stage's parameters."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from esnfed_core.errors import ConfigError
from esnfed_stages.params_schema import validate

DEFAULT_PARAMS = Path("params.yaml")


def load_params(path: str | Path = DEFAULT_PARAMS) -> dict[str, Any]:
    """The parsed file, validated as a whole against params_schema (every stage reads it here)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: params file not found")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({exc})".replace("\n", " ")) from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping")
    validate(data, path)
    return data
