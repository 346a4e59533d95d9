"""Zip helpers for the dataset archives: open a member of a zip nested inside a zip without
unpacking, and extract archives (nested zips included) safely into a folder."""

from __future__ import annotations

import contextlib
import os
import zipfile
import zlib
from pathlib import Path, PurePosixPath
from typing import IO, Callable, Iterator

from esnfed_core.errors import DataError

# Errors that mean "this archive is damaged" while opening or reading a member.
ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, NotImplementedError)


def open_zip(path: str | os.PathLike | IO[bytes], name: str) -> zipfile.ZipFile:
    """Open a zip (a path or a seekable binary file) or raise DataError naming ``name``."""
    try:
        return zipfile.ZipFile(path)
    except FileNotFoundError:
        raise DataError(f"{name}: file not found") from None
    except (*ZIP_ERRORS, OSError) as exc:
        raise DataError(f"{name}: not a valid zip archive ({exc})") from None


def find_member(zf: zipfile.ZipFile, basename: str, name: str) -> str:
    """The member whose last path component is ``basename`` (the shallowest if several)."""
    hits = [m for m in zf.namelist() if PurePosixPath(m).name == basename and not m.endswith("/")]
    if not hits:
        raise DataError(f"{name}: member '{basename}' not found in the archive")
    return min(hits, key=lambda m: (m.count("/"), m))


@contextlib.contextmanager
def open_nested(zip_path: Path, chain: list[str]) -> Iterator[IO[bytes]]:
    """Open ``chain[-1]`` inside the zips ``zip_path`` → ``chain[0]`` → ... for reading.

    The inner zip is read in place: zipfile's member streams are seekable, so no byte of the
    archive is written to disk. Reading the members of an inner zip in order costs about one
    extra decompression pass of the inner zip per member opened.
    """
    label = str(zip_path)
    with contextlib.ExitStack() as stack:
        zf = stack.enter_context(open_zip(zip_path, label))
        for i, member in enumerate(chain):
            label = f"{label}:{member}"
            try:
                f = stack.enter_context(zf.open(member))
            except KeyError:
                raise DataError(f"{label}: member not found in the archive") from None
            except ZIP_ERRORS as exc:
                raise DataError(f"{label}: cannot open ({exc})") from None
            if i + 1 < len(chain):
                zf = stack.enter_context(open_zip(f, label))
        yield f


def _safe_target(dest: Path, member: str) -> Path | None:
    """Where ``member`` lands under ``dest``; None for members that would escape it."""
    parts = PurePosixPath(member.replace("\\", "/")).parts
    if not parts or member.startswith("/") or ".." in parts or ":" in parts[0]:
        return None
    return dest.joinpath(*parts)


def extract_all(zf: zipfile.ZipFile, dest: Path, name: str,
                progress: Callable[[int], None] | None = None) -> list[Path]:
    """Extract every member into ``dest`` (CRC-checked by zipfile); refuse path traversal."""
    out = []
    for info in zf.infolist():
        target = _safe_target(dest, info.filename)
        if target is None:
            raise DataError(f"{name}: member '{info.filename}' would be written outside the target folder")
        if info.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            with zf.open(info) as src, open(target, "wb") as dst:
                while chunk := src.read(1 << 20):
                    dst.write(chunk)
                    if progress is not None:
                        progress(len(chunk))
        except ZIP_ERRORS as exc:
            raise DataError(f"{name}:{info.filename}: corrupt member ({exc})") from None
        out.append(target)
    return out


def unpack_nested(folder: Path, name: str, progress: Callable[[int], None] | None = None) -> list[Path]:
    """Replace every ``X.zip`` under ``folder`` by its content, recursively.

    A nested zip whose members all sit under ``X/`` is unpacked beside it (UCI's
    `Activity recognition exp.zip` holds `Activity recognition exp/...`); otherwise into a new
    folder ``X/`` (WESAD's `S2_E4_Data.zip` holds bare CSVs).
    """
    unpacked = []
    pending = sorted(folder.rglob("*.zip"))
    while pending:
        inner = pending.pop(0)
        with open_zip(inner, f"{name}:{inner.relative_to(folder)}") as zf:
            names = [n for n in zf.namelist() if n]
            stem = inner.stem
            rooted = bool(names) and all(n == f"{stem}/" or n.startswith(f"{stem}/") for n in names)
            target = inner.parent if rooted else inner.parent / stem
            files = extract_all(zf, target, f"{name}:{inner.relative_to(folder)}", progress)
        inner.unlink()
        unpacked.append(inner)
        pending.extend(sorted(p for p in files if p.suffix == ".zip"))
    return unpacked


def check_zip(path: Path) -> int:
    """Read every member of a zip to check its CRCs; return the number of members."""
    with open_zip(path, str(path)) as zf:
        try:
            bad = zf.testzip()
        except ZIP_ERRORS as exc:
            raise DataError(f"{path}: corrupt archive ({exc})") from None
        if bad is not None:
            raise DataError(f"{path}: member '{bad}' fails its CRC check (corrupt download)")
        return len(zf.infolist())
