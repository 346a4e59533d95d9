"""Stage `preprocess`: raw files of one dataset -> data/processed/<dataset>/ (one .npz per user plus
manifest.json with shapes, label map, contexts, source checksums and params), written atomically.
run() takes a frozen, checked PreprocessParams (preprocess_params); write_processed is the
contract's writer, shared with `import` (esnfed_stages/data/import_data.py)."""

from __future__ import annotations

import contextlib
import hashlib
import io
import re
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping

import numpy as np

from esnfed_core.data.paths import path_problem
from esnfed_core.data.processed import MANIFEST, UserData, save_user, user_path
from esnfed_core.errors import ConfigError, DataError
from esnfed_core.quote import quote
from esnfed_core.vocabulary import DATASETS, SOURCES
from esnfed_stages.data._datasets import dataset_function, reader_of, reader_settings
from esnfed_stages._io import atomic_path, file_sha256, output_lock, write_json
from esnfed_stages.params.sections import section
from esnfed_stages.layout import PROCESSED_DIR as DEFAULT_OUT

_USER_NAME = re.compile(r"^[A-Za-z0-9_-]+$")  # becomes a file name
_META_KEYS = ("feature_names", "classes", "context_names")


def resolve_input(params: dict[str, Any], source: str | None, raw_dir: str | Path | None) -> tuple[str, Path]:
    """(source, raw root): ``--raw-dir`` wins, else params ``data.synthetic_dir`` or ``data.raw_dir``."""
    source = source if source is not None else section(params, "data.source")
    if source not in SOURCES:
        raise ConfigError(f"data.source: expected one of {', '.join(SOURCES)}, got {quote(source)}")
    if raw_dir is None:
        raw_dir = section(params, "data.synthetic_dir" if source == "synthetic" else "data.raw_dir")
    return source, Path(raw_dir)


def expected_users(ds_params: Any) -> int | None:
    """How many users the params list (for a progress bar), if they list them."""
    if isinstance(ds_params, dict):
        for key in ("subjects", "users"):
            if isinstance(ds_params.get(key), list):
                return len(ds_params[key])
    return None


def source_files(source: Any) -> list[Path]:
    """The file on disk behind a reader's source entry: a path, or "archive.zip:member:..."
    naming a member inside a (nested) zip, whose checksum is the archive's."""
    text = str(source)
    parts = text.split(":")
    for i in range(len(parts), 0, -1):
        candidate = Path(":".join(parts[:i]))
        if path_problem(candidate) is None:
            return [candidate]
    # the whole text was the first candidate: a folder or a FIFO there is named as such
    raise DataError(f"{text}: {path_problem(text, 'source file not found')}")


def _source_key(path: Path, raw_root: Path) -> str:
    try:
        return path.resolve().relative_to(raw_root.resolve()).as_posix()
    except ValueError:
        return str(path.resolve())


def _check_user(user: Any, data: Any, info: Any, seen: dict, meta: dict, dataset: str) -> None:
    """Contract checks on what a reader yields (the dataset-agnostic half of the data contract)."""
    if not isinstance(user, str) or not _USER_NAME.match(user):
        raise DataError(f"{dataset}: invalid user name {quote(user)}")
    if user in seen:
        raise DataError(f"{dataset}: user {quote(user)} produced twice")
    if not isinstance(data, UserData):
        raise DataError(f"{dataset}: user {quote(user)}: reader returned {type(data).__name__}, expected UserData")
    if not isinstance(info, dict) or not isinstance(info.get("sources"), (list, tuple)):
        raise DataError(f"{dataset}: user {quote(user)}: reader info lacks the list of 'sources'")
    if data.windows == 0:
        raise DataError(f"{dataset}: user {quote(user)} has no windows")
    if data.x.shape[2] != len(meta["feature_names"]):
        raise DataError(f"{dataset}: user {quote(user)} has {data.x.shape[2]} features, expected "
                        f"{len(meta['feature_names'])} ({', '.join(meta['feature_names'])})")
    if meta.setdefault("window", int(data.x.shape[1])) != data.x.shape[1]:
        raise DataError(f"{dataset}: user {quote(user)} has windows of {data.x.shape[1]} steps, "
                        f"other users {meta['window']}")
    if data.x.dtype != np.float32 or not np.isfinite(data.x).all():
        raise DataError(f"{dataset}: user {quote(user)}: x must be finite float32")
    ctx, y = data.context.astype(np.int64), data.y.astype(np.int64)
    if ctx.min() < 0 or ctx.max() >= len(meta["context_names"]) or np.any(np.diff(ctx) < 0):
        raise DataError(f"{dataset}: user {quote(user)}: contexts must be ordered indices in "
                        f"0..{len(meta['context_names']) - 1}")
    if (y.min() < 0 or y.max() >= len(meta["classes"])) if meta["classes"] else y.any():  # unlabelled: 0
        raise DataError(f"{dataset}: user {quote(user)}: labels outside 0..{len(meta['classes']) - 1}")


@dataclass(frozen=True)
class PreprocessParams:
    """``preprocess.<dataset>`` and the data source, checked by the dataset module's own
    validation (its describe() resolves defaults, units and ranges): what `preprocess` runs."""

    dataset: str
    source: str  # synthetic | raw
    raw_root: Path
    settings: Mapping[str, Any]  # the preprocess.<dataset> section, read-only
    described: Mapping[str, Any]  # feature_names, classes, context_names of the output
    reader: str = ""  # the paper dataset whose reader runs: ``dataset``, or a variant's base (default: dataset)


def reader_for(params: Mapping[str, Any], dataset: str) -> str:
    """The paper dataset whose reader preprocesses ``dataset``: itself, or a variant's base; else a
    one-line error naming --dataset."""
    reader = reader_of(params, dataset)
    if reader is not None:
        return reader
    raise ConfigError(f"--dataset: expected one of {', '.join(DATASETS)} or a variant of one declared in params.yaml "
                      f"(preprocess.<name> with base: {' | '.join(DATASETS)}), got {quote(dataset)} (import your "
                      "own with `esnfed import`)")


def preprocess_params(params: dict[str, Any], dataset: str, source: str | None = None,
                      raw_dir: str | Path | None = None) -> PreprocessParams:
    """``--source`` / ``--raw-dir`` win over params ``data.*``. ``dataset``: one of the papers', or a
    variant of one declared in ``preprocess.<name>`` with ``base`` (docs/protocol.md, "ESANN 2022
    protocol variant"), read by its base's reader from its base's files."""
    reader = reader_for(params, dataset)
    source, raw_root = resolve_input(params, source, raw_dir)
    settings = section(params, f"preprocess.{dataset}")
    described = dataset_function(reader, "describe")(reader_settings(settings))
    return PreprocessParams(dataset, source, raw_root, MappingProxyType(settings), MappingProxyType(described),
                            reader)


def run(options: PreprocessParams, out_root: str | Path | None = None,
        on_user: Callable[[str, UserData], None] | None = None) -> dict:
    """Preprocess every user of the dataset; return the manifest written to ``<out_root>/<dataset>``.

    Users are streamed one at a time into a temporary folder that replaces the output folder only
    when everything succeeded. ``on_user(user, data)`` is called after each user is written.
    """
    dataset, settings = options.dataset, dict(options.settings)  # recorded whole (a variant: with base)
    fn = dataset_function(options.reader or dataset, "preprocess")
    out = Path(out_root if out_root is not None else DEFAULT_OUT) / dataset
    return write_processed(dataset, out, dict(options.described),
                           lambda: fn(options.raw_root, reader_settings(settings)),
                           options.raw_root, {"params": settings, "source": options.source}, on_user)


# A user's .npz up to this size is built in memory and hashed from there, one open per user
# (tens of thousands of small users: the second open and read to hash each file doubled the time).
_HASHED_IN_MEMORY = 16 << 20


def _save_hashed(path: Path, data: UserData) -> str:
    """save_user, returning the file's sha256."""
    if data.x.nbytes > _HASHED_IN_MEMORY:
        save_user(path, data)
        return file_sha256(path)
    buffer = io.BytesIO()
    save_user(buffer, data)
    path.write_bytes(buffer.getbuffer())
    return hashlib.sha256(buffer.getbuffer()).hexdigest()


def write_processed(dataset: str, out: Path, described: dict[str, Any], users_of: Callable[[], Any],
                    raw_root: Path, extra: dict[str, Any],
                    on_user: Callable[[str, UserData], None] | None = None, locked: bool = False) -> dict:
    """Write the processed folder ``out`` (docs/data-contract.md) from the (user, UserData, info)
    triples of ``users_of()``, checked one by one; ``extra`` ends the manifest (params, source, ...).
    Shared by preprocess (the papers' readers) and import (your own tables). ``locked``: the
    caller holds ``output_lock(out)`` already (import holds it from its first read)."""
    meta = {k: list(described[k]) for k in _META_KEYS}
    users: dict[str, dict] = {}
    checksums: dict[str, str] = {}
    hashed: set[Path] = set()
    with (contextlib.nullcontext() if locked else output_lock(out)), atomic_path(out) as tmp:
        tmp.mkdir()
        for user, data, info in users_of():
            _check_user(user, data, info, users, meta, dataset)
            sha256 = _save_hashed(user_path(tmp, user), data)
            for src in (f for s in info["sources"] for f in source_files(s)):
                if src.resolve() not in hashed:  # shared files (HHAR's CSVs) are hashed once
                    hashed.add(src.resolve())
                    checksums[_source_key(src, raw_root)] = file_sha256(src)
            n_ctx, n_cls = len(meta["context_names"]), len(meta["classes"])
            entry = {
                "file": user_path(tmp, user).name,
                "sha256": sha256,  # trials check it: lazy reads skip zip CRCs
                "windows": data.windows,
                "windows_per_context": np.bincount(data.context.astype(np.int64), minlength=n_ctx).tolist(),
                # none in an unlabelled import (no classes: y holds 0)
                "class_counts": np.bincount(data.y.astype(np.int64).ravel(), minlength=n_cls).tolist() if n_cls else [],
            }
            if "context_labels" in info:
                entry["context_labels"] = [int(c) for c in info["context_labels"]]
            users[user] = entry
            if on_user is not None:
                on_user(user, data)
        if not users:
            raise DataError(f"{raw_root}: no {dataset} users found")
        manifest = {
            "dataset": dataset,
            "window": meta["window"],
            "n_features": len(meta["feature_names"]),
            "feature_names": meta["feature_names"],
            "classes": meta["classes"],
            "n_classes": len(meta["classes"]),
            "n_contexts": len(meta["context_names"]),
            "context_names": meta["context_names"],
            "users": users,
            "sources": checksums,
            **extra,
        }
        write_json(tmp / MANIFEST, manifest)
    return manifest
