"""The data the experiment stages read: a processed dataset and its partition, checked against
each other and against the manifest's file hashes, and the per-process loader of a trial's users."""

from __future__ import annotations

import functools
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from esnfed_core.data.paths import check_input
from esnfed_core.data.processed import UserData, load_user, user_path
from esnfed_core.errors import ConfigError, DataError
from esnfed_core.quote import quote
from esnfed_core.trial import TrialData
from esnfed_core.vocabulary import PCTS
from esnfed_stages._io import file_sha256, read_json
from esnfed_stages.data.check_data import checked_manifest, context_windows
from esnfed_stages.data.partition import coverage_problem, uncovered
from esnfed_stages.params.processed import DataParams, check_processed


@dataclass(frozen=True, eq=False)
class Dataset:
    """A processed dataset and its partition, checked against each other."""

    name: str
    directory: Path
    manifest: Mapping[str, Any]
    partition: Mapping[str, Any]
    partition_path: Path | None = None

    @property
    def n_classes(self) -> int:
        return int(self.manifest["n_classes"])

    @property
    def n_contexts(self) -> int:
        return int(self.manifest["n_contexts"])

    def train_users(self, pct: str) -> list[str]:
        return list(self.partition["train"][pct])

    @property
    def validation_users(self) -> list[str]:
        return list(self.partition["validation"])

    @property
    def test_users(self) -> list[str]:
        return list(self.partition["test"])

    _file_hashes: dict[str, str] = field(default_factory=dict, repr=False)

    def file_hash(self, user: str) -> str:
        """sha256 of the user's processed file, checked against the one the manifest recorded.

        Windows are read lazily, batch by batch, past the zip's CRC checks: this is where a
        corrupt or replaced file is caught, once per user and stage, before any trial runs.
        """
        if user not in self._file_hashes:
            path = check_input(user_path(self.directory, user), f"processed file for user '{user}' not found")
            digest = file_sha256(path)
            expected = self.manifest["users"][user].get("sha256")
            if expected is not None and digest != expected:
                raise DataError(f"{path}: contents differ from the sha256 in manifest.json (corrupt or "
                                f"changed after preprocessing): rerun `esnfed preprocess`")
            # an unlabelled folder (no classes, predict's only) holds y = 0: one "class" of codes
            _check_values(path, lazy_user(self.directory, user), max(self.n_classes, 1), self.n_contexts)
            self._file_hashes[user] = digest
        return self._file_hashes[user]

    def fingerprint(self, users: Sequence[str]) -> str:
        """sha256 over the manifest and the bytes of the users' files (in the given order)."""
        h = hashlib.sha256((self.directory / "manifest.json").read_bytes())
        for u in users:
            h.update(f"\x1f{u}\x1f{self.file_hash(u)}".encode())
        return h.hexdigest()

    def ref(self, train: Sequence[str], validation: Sequence[str] = ()) -> "DataRef":
        # Absolute: a worker's working directory is not ours (Ray workers keep the one of ray.init,
        # reused loky workers the one they started in); the key uses the fingerprint, not the path.
        return DataRef(str(self.directory.absolute()), tuple(train), tuple(validation), self.n_classes,
                       self.n_contexts, self.fingerprint(list(train) + list(validation)))

    def check_contexts(self, method: str, pcts: Sequence[str]) -> None:
        """DataError naming the partition file, the split and the contexts where the training users
        of a share of ``pcts``, the validation or the test users hold no window of a context: a
        continual ``method`` would fail there only once its trials reach the context. `esnfed
        partition` refuses such a split for a dataset in continual_datasets; a partition written
        before that check, or by hand, is caught here."""
        counts = context_windows(self.directory / "manifest.json", self.manifest)
        spec = {"train": {p: self.train_users(p) for p in pcts}, "validation": self.validation_users,
                "test": self.test_users}
        found = uncovered(spec, counts, list(self.manifest["context_names"]))
        if found is not None:
            raise DataError(f"{self.partition_path}: {coverage_problem(*found)}; {method} trains, validates and "
                            f"tests on every context: change partition.{self.name} in params.yaml and rerun "
                            f"`esnfed partition --dataset {self.name}`")

    def load(self, users: Sequence[str]) -> dict[str, UserData]:
        """The users' data, windows left on disk (read batch by batch when scored); each file is
        first checked against the manifest's sha256."""
        for u in users:
            self.file_hash(u)
        return {u: lazy_user(self.directory, u) for u in users}




_FINITE_BATCH = 256  # windows read at a time by _check_values (memory: one batch)


def _check_values(path: Path, data: UserData, n_classes: int, n_contexts: int) -> None:
    """DataError naming the file if its labels or contexts lie outside the manifest's classes and
    contexts, or ``x`` (read batch by batch) holds NaN or infinity: a folder written by hand
    (docs/data-contract.md) would otherwise fail every trial with the core's message, naming
    neither file nor user, or go through unseen. preprocess and import never write one."""
    for name, values, n in (("y", data.y, n_classes), ("context", data.context, n_contexts)):
        if values.size and (values.min() < 0 or values.max() >= n):
            raise DataError(f"{path}: {name} holds values outside 0..{n - 1} of manifest.json (min "
                            f"{values.min()}, max {values.max()}; `esnfed check-data` lists every problem)")
    x = data.x
    for start in range(0, len(x), _FINITE_BATCH):
        bad = ~np.isfinite(x[start:start + _FINITE_BATCH])
        if bad.any():
            raise DataError(f"{path}: x holds NaN or infinity (first in window "
                            f"{start + int(np.argwhere(bad)[0][0])}; `esnfed check-data` lists every problem)")


def open_dataset(data_dir: Path, dataset: str, expected: DataParams | None = None) -> Dataset:
    """Read data/processed/<dataset>/manifest.json and data/partitions/<dataset>.json; ``expected``:
    the import or preprocess settings the manifest must record (params.yaml's now, a stale folder
    is refused: esnfed_stages/params/processed.py)."""
    directory = Path(data_dir) / "processed" / dataset
    manifest = checked_manifest(directory)  # n_classes, n_contexts, users, ... of the right types
    check_processed(directory, manifest, expected)
    ppath = Path(data_dir) / "partitions" / f"{dataset}.json"
    part = read_json(ppath, f"not found: run `esnfed partition --dataset {dataset}` first")
    if not isinstance(part, dict):
        raise DataError(f"{ppath}: expected a JSON object")
    for key in ("train", "validation", "test"):
        if key not in part:
            raise DataError(f"{ppath}: missing '{key}'")
    if not isinstance(part["train"], dict) or set(part["train"]) != set(PCTS):
        raise DataError(f"{ppath}: 'train' must map each of {', '.join(PCTS)} to a list of users")
    splits = {f"train.{p}": part["train"][p] for p in PCTS} | {k: part[k] for k in ("validation", "test")}
    for key, users in splits.items():
        if not isinstance(users, list) or not all(isinstance(u, str) for u in users):
            raise DataError(f"{ppath}: {key} must be a list of user names, got {quote(users)}")
        if not users:
            raise DataError(f"{ppath}: no {'training' if key.startswith('train') else key} users"
                            + (f" for {key[6:]}%" if key.startswith("train") else ""))
        if len(set(users)) != len(users):
            raise DataError(f"{ppath}: {key} lists user {quote(next(u for u in users if users.count(u) > 1))} twice")
    for key in ("validation", "test"):  # the protocol's splits are disjoint: no user is scored on its own data
        for other in [k for k in splits if k != key and not (key == "test" and k == "validation")]:
            both = sorted(set(splits[key]) & set(splits[other]))
            if both:
                raise DataError(f"{ppath}: user {quote(both[0])} is in both {other} and {key} (the splits "
                                "must be disjoint; rerun `esnfed partition`)")
    mpath = directory / "manifest.json"
    for u in [u for users in splits.values() for u in users]:
        if u not in manifest["users"]:
            raise ConfigError(f"{ppath}: user '{u}' is not in {mpath}")
        if not isinstance(manifest["users"][u], dict):
            raise DataError(f"{mpath}: users.{u} must be an object, got {quote(manifest['users'][u])}")
    return Dataset(dataset, directory, manifest, part, ppath)


@dataclass(frozen=True)
class DataRef:
    """What a trial worker loads: users of a processed directory. ``fingerprint`` is part of the
    identity, so a worker's cache never serves data that changed on disk since."""

    directory: str
    train: tuple[str, ...]
    validation: tuple[str, ...]
    n_classes: int
    n_contexts: int
    fingerprint: str


def lazy_user(directory: str | Path, user: str) -> UserData:
    """``load_user(directory, user, lazy=True)``, cached per process for the file as it is on disk
    (its inode, size and modification time): a stage checks each user's file, then loads the users
    of every share, and the shares overlap (25 % of the training users are in every share), so
    without the cache a user's file was opened and parsed once per share and once more to check it,
    a per-client cost of about a millisecond each time (BENCHMARKS.md, "Clients")."""
    path = user_path(directory, user)
    try:
        st = os.stat(path)
    except OSError:  # load_user names the missing file
        return load_user(directory, user, lazy=True)
    return _lazy_user_at(os.path.abspath(directory), user, (st.st_ino, st.st_size, st.st_mtime_ns))


@functools.lru_cache(maxsize=1 << 16)
def _lazy_user_at(directory: str, user: str, stamp: tuple[int, int, int]) -> UserData:
    data = load_user(directory, user, lazy=True)
    for shared in (data.y, data.context):  # one copy serves every share: none may change it
        shared.flags.writeable = False
    return data


@functools.lru_cache(maxsize=1)
def load_trial_data(ref: DataRef) -> TrialData:
    """The users of ``ref`` (cached per process: consecutive trials of one share reuse them, and
    each user's file is parsed once per process: :func:`lazy_user`).

    The windows stay on disk, read batch by batch: a trial's memory does not grow with its data.
    """
    return TrialData(
        {u: lazy_user(ref.directory, u) for u in ref.train},
        {u: lazy_user(ref.directory, u) for u in ref.validation},
        ref.n_classes, ref.n_contexts,
    )
