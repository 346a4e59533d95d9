"""The processed-data format shared by every dataset: per-user windows in an uncompressed .npz
(x float32 (W,T,F), y int8 (W,T), context int8 (W,)) plus a JSON manifest.

:func:`load_user` can leave ``x`` on disk (a lazy :class:`~esnfed_core.data.windows.NpyMember`,
read batch by batch); labels and contexts, 1/(4F) of its size, are always loaded."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from esnfed_core.data.jsonfile import read_json
from esnfed_core.data.npz import npz_names, read_npz
from esnfed_core.data.paths import check_input
from esnfed_core.data.windows import NpyMember, concat, take
from esnfed_core.errors import DataError
from esnfed_core.quote import brief, quote

MANIFEST = "manifest.json"
# The names of users, matched in full (re.fullmatch: no trailing newline) before a path is built.
USER_NAMES = {"wesad": re.compile(r"S[0-9]+"), "hhar": re.compile(r"[a-i]")}  # ASCII digits only
USER_NAME_HINT = {"wesad": "S followed by digits, e.g. S2", "hhar": "one letter a-i"}
_FILE_NAME = re.compile(r"[A-Za-z0-9_-]+")  # any user file name: never a path


@dataclass(frozen=True, eq=False)
class UserData:
    """The windows of one user: inputs, per-step class labels and the context of each window.

    ``x`` is an ndarray or a lazy array of windows (esnfed_core.data.windows): selections and
    concatenations keep it lazy; ``y`` and ``context`` are always ndarrays.
    """

    x: np.ndarray
    y: np.ndarray
    context: np.ndarray

    def __post_init__(self) -> None:
        if self.x.ndim != 3:
            raise ValueError(f"x: expected (windows, steps, features), got shape {self.x.shape}")
        if self.y.shape != self.x.shape[:2]:
            raise ValueError(f"y: shape {self.y.shape} does not match x {self.x.shape[:2]}")
        if self.context.shape != self.x.shape[:1]:
            raise ValueError(f"context: shape {self.context.shape} does not match {self.x.shape[0]} windows")

    @property
    def windows(self) -> int:
        return self.x.shape[0]

    def select(self, mask_or_index) -> "UserData":
        return UserData(take(self.x, mask_or_index), self.y[mask_or_index], self.context[mask_or_index])

    def of_context(self, ctx: int) -> "UserData":
        return self.select(self.context == ctx)

    @staticmethod
    def concat(parts: list["UserData"]) -> "UserData":
        if not parts:
            raise ValueError("concat: no parts")
        return UserData(
            concat([p.x for p in parts]),
            np.concatenate([p.y for p in parts]),
            np.concatenate([p.context for p in parts]),
        )


def is_user_name(dataset: str, name: object) -> bool:
    """Whether ``name`` is a user of ``dataset`` as params.yaml may list it."""
    return isinstance(name, str) and USER_NAMES[dataset].fullmatch(name) is not None


def user_path(directory: str | Path, user: str) -> Path:
    """``<directory>/<user>.npz``; a user that is not a plain name (letters, digits, _ or -) is a
    DataError, so no path outside ``directory`` is ever built."""
    if not isinstance(user, str) or _FILE_NAME.fullmatch(user) is None:
        raise DataError(f"{directory}: user {quote(user)} is not a plain name (letters, digits, _ or -)")
    return Path(directory) / f"{user}.npz"


def load_manifest(directory: str | Path) -> dict:
    return read_json(Path(directory) / MANIFEST, missing="manifest not found (run `esnfed preprocess` first)")


def load_user(directory: str | Path, user: str, *, lazy: bool = False) -> UserData:
    """Read one user's windows; never unpickles (allow_pickle=False).

    With ``lazy`` ``x`` stays on disk and is read window by window when indexed (the trials' way:
    a user then costs memory for its labels only); by default it is loaded into memory.
    """
    path = check_input(user_path(directory, user), f"processed file for user '{user}' not found")
    names = {"y", "context"} if lazy else {"x", "y", "context"}
    arrays = read_npz(path, names)
    missing = {"x", "y", "context"} - set(npz_names(path) if lazy else arrays)
    if missing:
        raise DataError(f"{path}: missing arrays {', '.join(sorted(missing))}")
    y, ctx = arrays["y"], arrays["context"]
    x = NpyMember(path, "x", np.float32) if lazy else arrays["x"]
    if x.dtype != np.float32:
        raise DataError(f"{path}: x has dtype {x.dtype}, expected float32")
    try:
        return UserData(x, y.astype(np.int8, copy=False), ctx.astype(np.int8, copy=False))
    except ValueError as exc:
        raise DataError(f"{path}: {brief(exc)}") from None


def save_user(path: str | Path, data: UserData) -> None:
    """Write one user's windows as an uncompressed .npz (the caller makes it atomic)."""
    with open(path, "wb") as f:
        np.savez(f, x=data.x.astype(np.float32, copy=False), y=data.y.astype(np.int8, copy=False),
                 context=data.context.astype(np.int8, copy=False))
