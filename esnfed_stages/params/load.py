"""Reading params.yaml: the single source of every stage's parameters."""

from __future__ import annotations

import collections.abc
from pathlib import Path
from typing import Any

import yaml

from esnfed_core.data.paths import path_problem
from esnfed_core.errors import ConfigError
from esnfed_core.quote import brief, quote
from esnfed_stages.params.schema import validate
from esnfed_stages.layout import PARAMS_FILE as DEFAULT_PARAMS


class _UniqueKeyLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):
    """yaml.SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last one
    silently: a second `budget:` further down would win unseen; DVC's parser refuses it too).
    On libyaml's parser where PyYAML has it (≈ 2 ms instead of ≈ 45 ms for params.yaml, which
    every command reads; the same document)."""

    def construct_mapping(self, node, deep=False):
        seen: set = set()
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *anchor` merges; a key written after it may override a merged one
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, collections.abc.Hashable):
                continue  # SafeLoader's own error names it
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"key {quote(key)} appears twice in one mapping", key_node.start_mark)
            seen.add(key)
        return super().construct_mapping(node, deep)


def _yaml_problem(exc: yaml.YAMLError) -> str:
    """The parser's problem and where in the file (its own text spans lines and names "<unicode
    string>" as the file)."""
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None)
    if not problem:
        return " ".join(str(exc).split())
    return f"{problem}" + (f" at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else "")


def _unshared(value: Any) -> Any:
    """``value`` with every mapping and list its own copy: params.yaml shares spaces by YAML aliases,
    which the parser returns as one object, so editing one budget's space in place would edit all."""
    if isinstance(value, dict):
        return {k: _unshared(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_unshared(v) for v in value]
    return value


def load_params(path: str | Path = DEFAULT_PARAMS) -> dict[str, Any]:
    """The parsed file, validated as a whole against params_schema (every stage reads it here)."""
    path = Path(path)
    if (problem := path_problem(path, "params file not found")) is not None:
        raise ConfigError(f"{path}: {problem}")
    try:
        data = _unshared(yaml.load(path.read_text(encoding="utf-8"), Loader=_UniqueKeyLoader))  # noqa: S506 - a SafeLoader
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML ({_yaml_problem(exc)})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except RecursionError:
        raise ConfigError(f"{path}: not valid YAML (nested too deeply)") from None
    except ValueError as exc:  # an integer of over 4300 digits (int() refuses to convert it)
        raise ConfigError(f"{path}: not valid YAML ({brief(exc)})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: top level must be a mapping")
    validate(data, path)
    return data
