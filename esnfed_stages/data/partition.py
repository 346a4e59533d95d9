"""Stage `partition`: the user splits of PROTOCOL §1 (nested training subsets, validation and test
users, context order) checked against the processed manifest -> data/partitions/<dataset>.json.

params.yaml ``partition.<dataset>`` gives fixed lists (the papers' splits) or, for a user's own
dataset, ``{fractions: {validation: f, test: f}, seed: s}``: the manifest's users shuffled with the
seed, the first share of them for test, the next for validation, the rest for training, whose first
ceil(pct/100 · n) users form the nested training share pct.

Every context of the manifest must hold windows of some user (docs/data-contract.md §4); for a
dataset in ``continual_datasets`` every share's training users, the validation users and the test
users must each hold windows of every context: the continual methods train on each context in
turn, joint's early stopping and the selection score the validation users' contexts, and the
stream accuracy pools each context's test windows. A partition that misses one is refused here,
not hours later when the first continual trial reaches that context."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from esnfed_core.data.processed import MANIFEST, USER_NAME_HINT, is_user_name
from esnfed_core.errors import ConfigError, DataError
from esnfed_core.quote import quote
from esnfed_core.validation import Bound, ParameterError
from esnfed_core.vocabulary import PCTS
from esnfed_stages.data._datasets import continual_declared, is_paper
from esnfed_stages._io import output_lock, write_json
from esnfed_stages.data.check_data import checked_manifest, context_windows
from esnfed_stages.params.processed import DataParams, check_processed, data_params
from esnfed_stages.params.sections import section
from esnfed_stages.layout import PARTITIONS_DIR as DEFAULT_OUT, PROCESSED_DIR as DEFAULT_PROCESSED

_PLAIN = __import__("re").compile(r"[A-Za-z0-9_-]+")
FRACTION = Bound(low=0.0, high=1.0, low_open=True, high_open=True)  # of the users, per split
SEED = Bound(integer=True, low=0)


def _names(value: Any, key: str, dataset: str) -> list[str]:
    if isinstance(value, list) and any(isinstance(u, (int, float)) and not isinstance(u, bool) for u in value):
        # Not converted: YAML reads 007 as 7 and 1_0 as 10, so str() of the number may name
        # another user than the file's column ("007"); quoted, the name is the column's text.
        raise ConfigError(f"params.yaml: {key}: user names are strings, got numbers {quote(value)}: quote them as "
                          f"the user column spells them, e.g. {quote([str(u) for u in value])}")
    if not isinstance(value, list) or not value or not all(isinstance(u, str) for u in value):
        raise ConfigError(f"params.yaml: {key} must be a non-empty list of user names, got {quote(value)}")
    for u in value:
        if not is_paper(dataset):
            if not _PLAIN.fullmatch(u):
                raise ConfigError(f"params.yaml: {key}: {quote(u)} is not a plain user name (letters, "
                                  "digits, _ or -)")
        elif not is_user_name(dataset, u):
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
                              f"(missing {quote(sorted(set(previous) - set(users)))})")
        subsets[str(int(pct))] = users
        previous = users
    validation = _names(spec["validation"], f"{key}.validation", dataset)
    test = _names(spec["test"], f"{key}.test", dataset)
    for a, b, name in ((previous, validation, "train and validation"), (previous, test, "train and test"),
                       (validation, test, "validation and test")):
        both = sorted(set(a) & set(b))
        if both:
            raise ConfigError(f"params.yaml: {key}: {name} share users {quote(both)}")
    return {"train": subsets, "validation": validation, "test": test}


@dataclass(frozen=True)
class PartitionParams:
    """``partition.<dataset>``, checked: fixed splits (``spec``) or fractions with a seed.
    ``continual``: the dataset is in ``continual_datasets`` (every split must cover every context);
    ``data``: the settings the processed folder must have been written with (processed_params)."""

    dataset: str
    spec: Mapping[str, Any] | None = None  # {train: {pct: [...]}, validation, test}
    validation: float | None = None
    test: float | None = None
    seed: int | None = None
    continual: bool = False
    data: DataParams | None = None  # what the manifest must record (params.yaml's imports/preprocess now)

    def resolve(self, users: list[str]) -> dict[str, Any]:
        """The splits of ``users`` (the manifest's, sorted): the fixed ones, or drawn by the seed."""
        if self.spec is not None:
            return dict(self.spec)
        key = f"partition.{self.dataset}"
        order = [users[i] for i in np.random.default_rng(self.seed).permutation(len(users))]
        n_test, n_val = max(1, round(self.test * len(users))), max(1, round(self.validation * len(users)))
        train = order[n_test + n_val:]
        if not train:
            raise ConfigError(f"params.yaml: {key}.fractions leave no training user of the {len(users)} users")
        return {"train": {pct: train[:math.ceil(int(pct) * len(train) / 100)] for pct in PCTS},
                "validation": order[n_test:n_test + n_val], "test": order[:n_test]}


def partition_params(params: Mapping[str, Any], dataset: str) -> PartitionParams:
    """``partition.<dataset>`` of the loaded params, checked (the schema checks the section through
    check_partition), whether the continual methods run on the dataset, and the import or preprocess
    settings its processed folder must record."""
    options = check_partition(dataset, section(params, f"partition.{dataset}"))
    return replace(options, continual=dataset in continual_declared(params), data=data_params(params, dataset))


def check_partition(dataset: str, value: Any) -> PartitionParams:
    key = f"partition.{dataset}"
    if isinstance(value, Mapping) and "fractions" in value:
        if set(value) != {"fractions", "seed"}:
            raise ConfigError(f"params.yaml: {key} with fractions must have exactly the keys fractions, seed")
        fr = value["fractions"]
        if not isinstance(fr, Mapping) or set(fr) != {"validation", "test"}:
            raise ConfigError(f"params.yaml: {key}.fractions must have exactly the keys validation, test")
        try:
            for k in ("validation", "test"):
                FRACTION.check(f"{key}.fractions.{k}", fr[k])
            SEED.check(f"{key}.seed", value["seed"])
        except ParameterError as exc:
            raise ConfigError(f"params.yaml: {exc}") from None
        if fr["validation"] + fr["test"] >= 1:
            raise ConfigError(f"params.yaml: {key}.fractions: validation + test must be below 1, got "
                              f"{fr['validation'] + fr['test']:g}")
        return PartitionParams(dataset, None, float(fr["validation"]), float(fr["test"]), int(value["seed"]))
    return PartitionParams(dataset, check_spec(dataset, value))


def run(options: PartitionParams, processed_root: str | Path | None = None,
        out_root: str | Path | None = None) -> dict[str, Any]:
    """Write and return ``<out_root>/<dataset>.json``."""
    dataset = options.dataset
    folder = Path(processed_root if processed_root is not None else DEFAULT_PROCESSED) / dataset
    manifest = checked_manifest(folder)
    if manifest.get("dataset") != dataset:
        raise DataError(f"{folder}/manifest.json: dataset is {quote(manifest.get('dataset'))}, expected {quote(dataset)}")
    check_processed(folder, manifest, options.data)  # imported or preprocessed under params.yaml's settings now
    known = manifest["users"]
    spec = options.resolve(list(known))
    listed = [u for users in spec["train"].values() for u in users] + spec["validation"] + spec["test"]
    for user in dict.fromkeys(listed):
        if user not in known:
            raise ConfigError(f"partition.{dataset}: user {quote(user)} is not in {folder}/manifest.json "
                              f"(users there: {quote(sorted(known))})")
    counts = context_windows(folder / MANIFEST, manifest)
    if options.continual:
        check_contexts(options, spec, counts, manifest["context_names"], folder / MANIFEST)
    out = {"dataset": dataset, **spec, "n_contexts": manifest["n_contexts"],
           "context_names": manifest["context_names"]}
    path = Path(out_root if out_root is not None else DEFAULT_OUT) / f"{dataset}.json"
    with output_lock(path):
        write_json(path, out)
    return out


def _splits(spec: Mapping[str, Any]) -> list[tuple[str, str, list[str]]]:
    """(key, what, users) of each split, the training shares smallest first."""
    shares = [(f"train.{pct}", f"the training users of share {pct}", spec["train"][pct])
              for pct in sorted(spec["train"], key=int)]
    return shares + [("validation", "the validation users", spec["validation"]),
                     ("test", "the test users", spec["test"])]


def uncovered(spec: Mapping[str, Any], counts: Mapping[str, list[int]], names: list[str]
              ) -> tuple[str, str, list[str], list[str]] | None:
    """The first split of ``spec`` whose users hold no window of some context: (key, what, users,
    the contexts' names), or None when each split covers every context (``counts``: windows per
    context of each user, the manifest's)."""
    for split, what, users in _splits(spec):
        missing = [names[t] for t in range(len(names)) if not any(counts[u][t] for u in users)]
        if missing:
            return split, what, list(users), missing
    return None


def coverage_problem(split: str, what: str, users: list[str], missing: list[str]) -> str:
    """``<split>: <what> (<users>) have no windows in context(s) <names>``."""
    return (f"{split}: {what} ({', '.join(users)}) have no windows in context{'s' if len(missing) > 1 else ''} "
            f"{', '.join(map(quote, missing))}")


def check_contexts(options: PartitionParams, spec: Mapping[str, Any], counts: Mapping[str, list[int]],
                   names: list[str], manifest_path: Path) -> None:
    """ConfigError naming the share or split, and the contexts by name, where the users of a split
    hold no window of a context (``counts``: windows per context of each user, the manifest's)."""
    found = uncovered(spec, counts, names)
    if found is None:
        return
    dataset = options.dataset
    fix = ("list a user who has windows there" if options.spec is not None else
           f"draw another split (partition.{dataset}.seed or fractions) or list the users")
    raise ConfigError(
        f"params.yaml: partition.{dataset}: {coverage_problem(*found)} ({manifest_path}); {dataset} is in "
        f"continual_datasets, whose methods train, validate and test on every context: {fix}, or take "
        f"{dataset} out of continual_datasets")
