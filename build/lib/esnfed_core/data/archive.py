"""Zip helpers for the dataset archives: open a member of a zip nested inside a zip without
unpacking, and extract archives (nested zips included) safely into a folder.

Extraction is bounded (the caps below, shared by an archive and every zip nested in it) and
refuses conflicting members; each refusal is one DataError naming the archive and the member.
The caps leave room for the real archives: WESAD.zip (2.2 GB, 92 members, ~17 GiB unpacked,
one nested zip level) and UCI's HHAR zip (~0.8 GB, two nested zips, ~3 GB unpacked).
"""

from __future__ import annotations

import contextlib
import os
import zipfile
import zlib
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import IO, Callable, Iterator

from esnfed_core.errors import DataError

# Errors that mean "this archive is damaged" while opening or reading a member.
ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error, EOFError, NotImplementedError)

# Caps on one extraction (an archive and all the zips nested in it together).
MAX_UNPACKED_BYTES = 64 << 30  # bytes written in all (WESAD: ~17 GiB)
MAX_MEMBERS = 10_000  # members in all (WESAD: 92 + 15 x 8 nested)
MAX_RATIO = 200  # unpacked / compressed bytes of one member (real members: under 10)...
RATIO_FLOOR = 16 << 20  # ...checked once a member has written more than this many bytes
MAX_NESTING = 3  # zip levels: the archive = 1, a zip inside it = 2 (WESAD and HHAR have 2)


@dataclass
class Budget:
    """What one extraction may still write; shared by nested zips. Tests lower the caps."""

    bytes_left: int = MAX_UNPACKED_BYTES
    members_left: int = MAX_MEMBERS
    max_ratio: float = MAX_RATIO
    ratio_floor: int = RATIO_FLOOR
    max_nesting: int = MAX_NESTING


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


def _check_place(dest: Path, target: Path, label: str, is_dir: bool) -> None:
    """Refuse a member whose place is taken: a file on its path, or anything at a file's place."""
    for parent in reversed(target.relative_to(dest).parents):
        here = dest / parent
        if here != dest and (here.is_symlink() or (here.exists() and not here.is_dir())):
            raise DataError(f"{label}: conflicts with the file '{parent.as_posix()}' (a folder is needed there)")
    if target.is_symlink() or (target.exists() and not (is_dir and target.is_dir())):
        what = "folder" if target.is_dir() else "file"
        raise DataError(f"{label}: a {what} of that name was already unpacked (duplicate or conflicting member)")


def extract_all(zf: zipfile.ZipFile, dest: Path, name: str,
                progress: Callable[[int], None] | None = None, budget: Budget | None = None) -> list[Path]:
    """Extract every member into ``dest`` (CRC-checked by zipfile) within ``budget``; refuse
    path traversal, duplicate names and members that conflict with what is already there."""
    budget = budget if budget is not None else Budget()
    infos = zf.infolist()
    if len(infos) > budget.members_left:
        raise DataError(f"{name}: {len(infos)} members, more than the {budget.members_left} the cap "
                        f"MAX_MEMBERS ({MAX_MEMBERS:,} in all) still allows")
    budget.members_left -= len(infos)
    seen: set[tuple[str, ...]] = set()
    out = []
    for info in infos:
        label = f"{name}:{info.filename}"
        target = _safe_target(dest, info.filename)
        if target is None:
            raise DataError(f"{name}: member '{info.filename}' would be written outside the target folder")
        key = target.relative_to(dest).parts
        if key in seen:
            raise DataError(f"{label}: duplicate member name in the archive")
        seen.add(key)
        _check_place(dest, target, label, info.is_dir())
        if info.is_dir():
            target.mkdir(parents=True, exist_ok=True)
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        written = 0
        try:
            with zf.open(info) as src, open(target, "xb") as dst:
                while chunk := src.read(1 << 20):
                    written += len(chunk)
                    if written > budget.bytes_left:
                        raise DataError(f"{label}: unpacking would write more bytes than the cap "
                                        f"MAX_UNPACKED_BYTES ({MAX_UNPACKED_BYTES:,} in all) allows")
                    if written > budget.ratio_floor and written > budget.max_ratio * max(info.compress_size, 1):
                        raise DataError(f"{label}: expands more than {budget.max_ratio:g} times its "
                                        f"compressed size {info.compress_size:,} (cap MAX_RATIO; a zip bomb?)")
                    dst.write(chunk)
                    if progress is not None:
                        progress(len(chunk))
        except ZIP_ERRORS as exc:
            raise DataError(f"{label}: corrupt member ({exc})") from None
        finally:
            budget.bytes_left -= written
        out.append(target)
    return out


def unpack_nested(folder: Path, name: str, progress: Callable[[int], None] | None = None,
                  budget: Budget | None = None) -> list[Path]:
    """Replace every ``X.zip`` under ``folder`` by its content, recursively, within ``budget``
    (``folder`` itself came from a zip: nesting level 1).

    A nested zip whose members all sit under ``X/`` is unpacked beside it (UCI's
    `Activity recognition exp.zip` holds `Activity recognition exp/...`); otherwise into a new
    folder ``X/`` (WESAD's `S2_E4_Data.zip` holds bare CSVs). A member that would land on a file
    already there (from the outer archive or another nested zip) is refused.
    """
    budget = budget if budget is not None else Budget()
    unpacked = []
    pending = [(p, 2) for p in sorted(folder.rglob("*.zip")) if p.is_file()]
    while pending:
        inner, level = pending.pop(0)
        label = f"{name}:{inner.relative_to(folder).as_posix()}"
        if level > budget.max_nesting:
            raise DataError(f"{label}: zips nested more than {budget.max_nesting} deep (cap MAX_NESTING)")
        with open_zip(inner, label) as zf:
            names = [n for n in zf.namelist() if n]
            stem = inner.stem
            rooted = bool(names) and all(n == f"{stem}/" or n.startswith(f"{stem}/") for n in names)
            target = inner.parent if rooted else inner.parent / stem
            if not rooted and (target.exists() or target.is_symlink()):
                raise DataError(f"{label}: would unpack into '{stem}', which the archive already holds")
            files = extract_all(zf, target, label, progress, budget)
        inner.unlink()
        unpacked.append(inner)
        pending.extend((p, level + 1) for p in sorted(files) if p.suffix == ".zip")
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
