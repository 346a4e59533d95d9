"""`esnfed check-data`: the validator of the processed-data contract (docs/data-contract.md).

Reads a processed folder (manifest.json + one .npz per user) and lists every violation it finds,
one line each ("<file>: <problem>"), instead of stopping at the first: a user who wrote the files
with their own tools sees everything to fix at once. Nothing is written.

``checked_manifest`` is the same manifest check for the stages that read a processed folder
(partition, select, retrain, assess, privacy, flower): the first violation stops them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np

from esnfed_core.data.jsonfile import read_json
from esnfed_core.data.npz import npz_names, read_npz
from esnfed_core.data.paths import check_input, path_problem
from esnfed_core.data.processed import MANIFEST, MAX_USER_CHARS, load_manifest
from esnfed_core.errors import DataError
from esnfed_core.quote import quote
from esnfed_core.vocabulary import DATASETS
from esnfed_stages._io import file_sha256

# Keys of manifest.json: (name, expected type) for the required ones.
REQUIRED_KEYS = {"dataset": str, "window": int, "n_features": int, "feature_names": list,
                 "classes": list, "n_classes": int, "context_names": list, "n_contexts": int,
                 "users": dict}
USER_KEYS = {"file": str, "sha256": str, "windows": int, "windows_per_context": list,
             "class_counts": list}
ARRAYS = {"x": (np.float32, 3), "y": (np.int8, 2), "context": (np.int8, 1)}
_PLAIN = re.compile(r"[A-Za-z0-9_-]+")
_SHA = re.compile(r"[0-9a-f]{64}")
INT8_MAX = 127  # classes and contexts are stored as int8


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _names(path: Path, key: str, value: Any, count_key: str, count: Any) -> Iterator[str]:
    if not value or not all(isinstance(v, str) and v for v in value):
        yield f"{path}: {key} must be a non-empty list of non-empty strings, got {quote(value)}"
        return
    if len(set(value)) != len(value):
        yield f"{path}: {key} lists a name twice: {quote(value)}"
    if _is_int(count) and count != len(value):
        yield f"{path}: {count_key} is {count} but {key} has {len(value)} names"
    if len(value) > INT8_MAX + 1 and key != "feature_names":
        yield f"{path}: {key} has {len(value)} names; int8 labels allow at most {INT8_MAX + 1}"


def check_manifest(path: Path, manifest: Any) -> list[str]:
    """Violations of manifest.json's own fields (not of the user files)."""
    if not isinstance(manifest, dict):
        return [f"{path}: expected a JSON object, got {type(manifest).__name__}"]
    out = []
    for key, typ in REQUIRED_KEYS.items():
        if key not in manifest:
            out.append(f"{path}: missing key '{key}'")
        elif not isinstance(manifest[key], typ) or (typ is int and not _is_int(manifest[key])):
            out.append(f"{path}: {key} must be {'an integer' if typ is int else 'a ' + typ.__name__}, "
                       f"got {quote(manifest[key])}")
    if _is_int(manifest.get("window")) and manifest["window"] < 1:
        out.append(f"{path}: window must be >= 1, got {manifest['window']}")
    if "labelled" in manifest and manifest["labelled"] is not False:
        out.append(f"{path}: labelled is written only as false (an unlabelled import), got {quote(manifest['labelled'])}")
    for key, count in (("feature_names", "n_features"), ("classes", "n_classes"),
                       ("context_names", "n_contexts")):
        if key == "classes" and manifest.get("labelled") is False:  # an unlabelled import: no classes
            if manifest.get(key) != [] or manifest.get(count) != 0:
                out.append(f"{path}: an unlabelled folder (labelled: false) lists no classes, got "
                           f"{quote(manifest.get(key))} and {count} {quote(manifest.get(count))}")
        elif isinstance(manifest.get(key), list):
            out += _names(path, key, manifest[key], count, manifest.get(count))
    if isinstance(manifest.get("users"), dict) and not manifest["users"]:
        out.append(f"{path}: users is empty")
    return out


def checked_manifest(folder: str | Path, *, unlabelled: bool = False) -> dict[str, Any]:
    """manifest.json of a processed folder for a stage to use: DataError naming the file and the
    first violation of its own fields (``check_manifest``), so a malformed one never gets further.
    An unlabelled folder (``labelled: false``) is refused unless ``unlabelled`` (predict's): it has
    no classes to train, select or assess on."""
    path = Path(folder) / MANIFEST
    name = Path(folder).name
    # the papers' datasets are preprocessed, yours imported (a protocol variant, declared in params.yaml, preprocessed)
    run = (f"`esnfed preprocess --dataset {name}`" if name in DATASETS else
           f"`esnfed import --dataset {name}`, or `esnfed preprocess --dataset {name}` for a protocol variant")
    check_input(path, f"manifest not found (run {run} first)")
    manifest = load_manifest(folder)
    problems = check_manifest(path, manifest)
    if problems:
        raise DataError(problems[0])
    if manifest.get("labelled") is False and not unlabelled:
        raise DataError(f"{path}: labelled: false: the recordings were imported without labels (--unlabelled), "
                        "for `esnfed predict` only; import them with their label column to train or assess on them")
    return manifest


def empty_contexts(path: Path, manifest: Mapping[str, Any], counts: list[list[int]]) -> list[str]:
    """A line per context of the manifest's ``context_names`` that no user holds a window of
    (``counts``: each user's windows per context): a context declared without data, e.g. a name in
    imports.<name>.contexts that no row holds, which no continual method could train or test on."""
    hint = (f" (is it in imports.{manifest.get('dataset')}.contexts but in no row? remove it there and "
            "import again)" if manifest.get("source") == "import" else "")
    return [f"{path}: context {quote(name)} ({t}) has no windows in any user{hint}"
            for t, name in enumerate(manifest["context_names"]) if not any(c[t] for c in counts)]


def context_windows(path: Path, manifest: Mapping[str, Any]) -> dict[str, list[int]]:
    """Each user's windows per context, from a manifest that passed ``check_manifest``: DataError
    naming ``path`` at the first entry without K counts >= 0, or at a context no user has a window of."""
    names = manifest["context_names"]
    out = {}
    for user, entry in manifest["users"].items():
        v = entry.get("windows_per_context") if isinstance(entry, dict) else None
        if not isinstance(v, list) or len(v) != len(names) or not all(_is_int(i) and i >= 0 for i in v):
            raise DataError(f"{path}: users.{user}.windows_per_context must list {len(names)} counts >= 0, "
                            f"got {quote(v)}")
        out[user] = v
    problems = empty_contexts(path, manifest, list(out.values()))
    if problems:
        raise DataError(problems[0])
    return out


def _entry(path: Path, user: str, entry: Any, k: int | None, c: int | None) -> list[str]:
    where = f"{path}: users.{user}"
    if not isinstance(entry, dict):
        return [f"{where} must be an object, got {quote(entry)}"]
    out = []
    for key, typ in USER_KEYS.items():
        if key not in entry:
            out.append(f"{where}: missing key '{key}'")
        elif not isinstance(entry[key], typ) or (typ is int and not _is_int(entry[key])):
            out.append(f"{where}.{key} has the wrong type: {quote(entry[key])}")
    if isinstance(entry.get("file"), str) and entry["file"] != f"{user}.npz":
        out.append(f"{where}.file is {quote(entry['file'], 40)}, expected '{user}.npz'")
    if isinstance(entry.get("sha256"), str) and not _SHA.fullmatch(entry["sha256"]):
        out.append(f"{where}.sha256 is not 64 lowercase hex digits: {quote(entry['sha256'])}")
    for key, n in (("windows_per_context", k), ("class_counts", c)):
        v = entry.get(key)
        if isinstance(v, list) and (not all(_is_int(i) and i >= 0 for i in v) or (n is not None and len(v) != n)):
            out.append(f"{where}.{key} must list {n} counts >= 0, got {quote(v)}")
    if _is_int(entry.get("windows")) and entry["windows"] < 1:
        out.append(f"{where}.windows must be >= 1, got {entry['windows']}")
    return out


def _arrays(file: Path) -> tuple[dict[str, np.ndarray], list[str]]:
    try:  # headers checked against their entries, inflation bounded by the file's size
        names = npz_names(file)
        arrays = read_npz(file, ARRAYS)
    except DataError as exc:
        return {}, [str(exc)]
    out = [f"{file}: missing array '{n}'" for n in ARRAYS if n not in names]
    out += [f"{file}: unexpected array '{n}' (the contract has x, y, context)" for n in names if n not in ARRAYS]
    return arrays, out


def check_user(folder: Path, user: str, entry: Mapping[str, Any], manifest: Mapping[str, Any]) -> list[str]:
    """Violations of one user's file against the contract and its manifest entry."""
    file = folder / f"{user}.npz"
    if (problem := path_problem(file, "file not found (listed in manifest.json users)")) is not None:
        return [f"{file}: {problem}"]
    out = []
    if isinstance(entry.get("sha256"), str) and _SHA.fullmatch(entry["sha256"]) and file_sha256(file) != entry["sha256"]:
        out.append(f"{file}: sha256 differs from manifest.json users.{user}.sha256")
    arrays, problems = _arrays(file)
    out += problems
    for name, (dtype, ndim) in ARRAYS.items():
        a = arrays.get(name)
        if a is not None and (a.dtype != dtype or a.ndim != ndim):
            out.append(f"{file}: {name} must be {np.dtype(dtype).name} with {ndim} axes, got "
                       f"{a.dtype.name} with shape {a.shape}")
            arrays.pop(name)
    x, y, ctx = arrays.get("x"), arrays.get("y"), arrays.get("context")
    t, f = manifest.get("window"), manifest.get("n_features")
    c, k = len(manifest.get("classes") or []), len(manifest.get("context_names") or [])
    if x is not None:
        if _is_int(t) and _is_int(f) and x.shape[1:] != (t, f):
            out.append(f"{file}: x has windows of shape {x.shape[1:]}, manifest.json says ({t}, {f}) "
                       "(window, n_features)")
        if entry.get("windows") != x.shape[0]:
            out.append(f"{file}: x has {x.shape[0]} windows, manifest.json users.{user}.windows says "
                       f"{quote(entry.get('windows'))}")
        if not np.isfinite(x).all():
            w = int(np.argwhere(~np.isfinite(x))[0][0])
            out.append(f"{file}: x holds NaN or infinity (first in window {w})")
    if y is not None:
        if x is not None and y.shape != x.shape[:2]:
            out.append(f"{file}: y has shape {y.shape}, expected {x.shape[:2]} (windows, steps)")
        if manifest.get("labelled") is False and y.any():
            out.append(f"{file}: y must hold 0 only in an unlabelled folder (labelled: false)")
        elif manifest.get("labelled") is not False and y.size and (y.min() < 0 or y.max() >= c):
            out.append(f"{file}: y holds labels outside 0..{c - 1} (min {y.min()}, max {y.max()})")
        elif c and isinstance(entry.get("class_counts"), list) and \
                np.bincount(y.astype(np.int64).ravel(), minlength=c).tolist() != entry["class_counts"]:
            out.append(f"{file}: the steps per class differ from manifest.json users.{user}.class_counts")
    if ctx is not None:
        if x is not None and ctx.shape != x.shape[:1]:
            out.append(f"{file}: context has shape {ctx.shape}, expected ({x.shape[0]},) (one per window)")
        if ctx.size and (ctx.min() < 0 or ctx.max() >= k):
            out.append(f"{file}: context holds indices outside 0..{k - 1} (min {ctx.min()}, max {ctx.max()})")
        elif np.any(np.diff(ctx.astype(np.int64)) < 0):
            out.append(f"{file}: context must be non-decreasing (windows ordered by context)")
        elif isinstance(entry.get("windows_per_context"), list) and \
                np.bincount(ctx.astype(np.int64), minlength=k).tolist() != entry["windows_per_context"]:
            out.append(f"{file}: the windows per context differ from manifest.json "
                       f"users.{user}.windows_per_context")
    return out


def check_folder(folder: str | Path) -> list[str]:
    """Every violation of the contract in ``folder``, one line each; empty when it conforms."""
    folder = Path(folder)
    if (problem := path_problem(folder, "no such folder", folder=True)) is not None:
        hint = "" if not folder.exists() else f" (give the processed folder holding {MANIFEST} and the <user>.npz files)"
        return [f"{folder}: {problem}{hint}"]
    path = folder / MANIFEST
    if (problem := path_problem(path, "not found")) is not None:
        inside = sorted(d.name for d in folder.iterdir() if (d / MANIFEST).is_file()) if problem == "not found" else []
        return [f"{path}: {problem}" + (f" (the processed folders are one level down: {', '.join(inside)})"
                                        if inside else "")]
    try:
        manifest = read_json(path)
    except DataError as exc:
        return [str(exc)]
    out = check_manifest(path, manifest)
    if not isinstance(manifest, dict):
        return out
    users = manifest.get("users") if isinstance(manifest.get("users"), dict) else {}
    k = len(manifest["context_names"]) if isinstance(manifest.get("context_names"), list) else None
    c = len(manifest["classes"]) if isinstance(manifest.get("classes"), list) else None
    for user, entry in users.items():
        if len(user) > MAX_USER_CHARS:  # its lines would quote it whole, and its file name may not exist
            out.append(f"{path}: a user name of {len(user)} characters, {quote(user, 40)} (at most "
                       f"{MAX_USER_CHARS}: it becomes a file name)")
            continue
        if not _PLAIN.fullmatch(user):
            out.append(f"{path}: user {quote(user, 40)} is not a plain name (letters, digits, _ or -)")
            continue
        problems = _entry(path, user, entry, k, c)
        out += problems
        if isinstance(entry, dict):
            out += check_user(folder, user, entry, manifest)
    counts = [e.get("windows_per_context") for e in users.values() if isinstance(e, dict)]
    if k is not None and len(counts) == len(users) and \
            all(isinstance(v, list) and len(v) == k and all(_is_int(i) for i in v) for v in counts):
        out += empty_contexts(path, manifest, counts)
    for extra in sorted(folder.glob("*.npz")):
        if extra.stem not in users:
            out.append(f"{extra}: not listed in manifest.json users")
    return out
