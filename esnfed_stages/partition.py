"""Stage `partition`: the fixed user splits of PROTOCOL §1 (nested training subsets, validation and
test users, context order) checked against the processed manifest -> data/partitions/<dataset>.json."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from esnfed_core.data.processed import USER_NAME_HINT, is_user_name, load_manifest
from esnfed_core.errors import ConfigError, DataError
from esnfed_core.quote import quote
from esnfed_stages._datasets import check_dataset
from esnfed_stages._io import output_lock, write_json
from esnfed_stages.sections import section
from esnfed_stages.preprocess import DEFAULT_OUT as DEFAULT_PROCESSED

DEFAULT_OUT = Path("data/partitions")


def _names(value: Any, key: str, dataset: str) -> list[str]:
    if not isinstance(value, list) or not value or not all(isinstance(u, str) for u in value):
        raise ConfigError(f"params.yaml: {key} must be a non-empty list of user names, got {quote(value)}")
    for u in value:
        if not is_user_name(dataset, u):
            raise ConfigError(f"params.yaml: {key}: {quote(u)} is not a {dataset} user name "
                              f"({USER_NAME_HINT[dataset]})")
    if len(set(value)) != len(value):
        raise ConfigError(f"params.yaml: {key} lists a user twice: {value}")
    return list(value)


def check_spec(dataset: str, spec: Any) -> dict[str, Any]:
    """Validate ``partition.<dataset>``: nested train subsets keyed by percent, disjoint
    validation and test users. Returns the canonical {train: {"25": [...]}, validation, test}."""
    key = f"partition.{dataset}"
    if not isinstance(spec, dict) or set(spec) != {"train", "validation", "test"}:
        raise ConfigError(f"params.yaml: {key} must have exactly the keys train, validation, test")
    train = spec["train"]
    if not isinstance(train, dict) or not train:
        raise ConfigError(f"params.yaml: {key}.train must map percentages to user lists")
    subsets: dict[str, list[str]] = {}
    previous: list[str] = []
    for pct in train:
        if isinstance(pct, bool) or not str(pct).isdigit() or not 0 < int(pct) <= 100:
            raise ConfigError(f"params.yaml: {key}.train.{pct}: keys must be percentages 1..100")
    for pct in sorted(train, key=int):
        users = _names(train[pct], f"{key}.train.{pct}", dataset)
        if not set(previous) <= set(users):
            raise ConfigError(f"params.yaml: {key}.train.{pct} must contain the smaller subsets "
                              f"(missing {sorted(set(previous) - set(users))})")
        subsets[str(int(pct))] = users
        previous = users
    validation = _names(spec["validation"], f"{key}.validation", dataset)
    test = _names(spec["test"], f"{key}.test", dataset)
    for a, b, name in ((previous, validation, "train and validation"), (previous, test, "train and test"),
                       (validation, test, "validation and test")):
        both = sorted(set(a) & set(b))
        if both:
            raise ConfigError(f"params.yaml: {key}: {name} share users {both}")
    return {"train": subsets, "validation": validation, "test": test}


def run(dataset: str, params: dict[str, Any], processed_root: str | Path | None = None,
        out_root: str | Path | None = None) -> dict[str, Any]:
    """Write and return ``<out_root>/<dataset>.json``."""
    check_dataset(dataset)
    spec = check_spec(dataset, section(params, f"partition.{dataset}"))
    folder = Path(processed_root if processed_root is not None else DEFAULT_PROCESSED) / dataset
    manifest = load_manifest(folder)
    if manifest.get("dataset") != dataset:
        raise DataError(f"{folder}/manifest.json: dataset is {manifest.get('dataset')!r}, expected {dataset!r}")
    known = manifest.get("users", {})
    listed = [u for users in spec["train"].values() for u in users] + spec["validation"] + spec["test"]
    for user in dict.fromkeys(listed):
        if user not in known:
            raise ConfigError(f"partition.{dataset}: user {user!r} is not in {folder}/manifest.json "
                              f"(users there: {sorted(known)})")
    out = {"dataset": dataset, **spec, "n_contexts": manifest["n_contexts"],
           "context_names": manifest["context_names"]}
    path = Path(out_root if out_root is not None else DEFAULT_OUT) / f"{dataset}.json"
    with output_lock(path):
        write_json(path, out)
    return out
