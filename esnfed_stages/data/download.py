"""Stage `download` (run by hand, not by DVC): fetch the official WESAD or HHAR archive over HTTP(S),
resuming a partial download, verify it, and unpack it (nested zips too) into the raw layout.

The archive is kept as ``<cache>/<key>-<name>.part`` while incomplete (``key`` hashes the URL and
the expected size, so another ``--url`` or ``--size`` never reuses an old file); an interrupted run
resumes it with an HTTP Range request whose answer must start at the requested byte. A download
stops as soon as it passes the expected size, refuses a redirect from https to http, and gives up
after an overall deadline (a rerun resumes). A complete archive is checked (size, sha256 when known, every zip CRC)
before anything is unpacked; the dataset folder ``<out>/<WESAD|HHAR>`` appears by one rename only
when everything succeeded, together with ``download.json`` (url, size, sha256 of the archive).
"""

from __future__ import annotations

import hashlib
import http.client
import os
import re
import shutil
import socket
import tempfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable

from esnfed_core.data import archive
from esnfed_core.errors import ConfigError, DataError
from esnfed_core.quote import quote
from esnfed_stages.data._datasets import DIRNAMES, check_dataset
from esnfed_stages._io import atomic_path, dumps_json, fsync_dir, output_lock

CHUNK = 1 << 20
MAX_UNKNOWN_SIZE = 16 << 30  # bytes accepted when neither the spec nor the server gives a size
DEADLINE = 6 * 3600.0  # seconds for a whole download, retries included (--deadline)


@dataclass(frozen=True)
class ArchiveSpec:
    """An official archive: where it is, what it must look like once downloaded."""

    url: str
    filename: str
    size: int | None  # bytes, None when not known from a checked source
    sha256: str | None  # None: unknown; the digest of what was downloaded is recorded instead
    required: tuple[str, ...]  # paths that must exist under <out>/<DIRNAME> after unpacking
    note: str


KNOWN: dict[str, ArchiveSpec] = {
    "wesad": ArchiveSpec(
        # The authors' Sciebo share, linked from the WESAD home page and the UCI entry.
        url="https://uni-siegen.sciebo.de/s/HGdUkoNlW1Ub0Gx/download",
        filename="WESAD.zip",
        # Audited release size (DATA-FACTS A, [F]; the same figure appears in an independent
        # download script). No published checksum exists: the sha256 is recorded, not checked.
        size=2_249_444_501,
        sha256=None,
        required=("S2/S2.pkl",),
        note="WESAD (Schmidt et al., ICMI 2018), 15 subjects, ~2.2 GB",
    ),
    "hhar": ArchiveSpec(
        url="https://archive.ics.uci.edu/static/public/344/heterogeneity+activity+recognition.zip",
        filename="heterogeneity+activity+recognition.zip",
        # One third-party script gives 822,098,071 bytes (unverified, so not enforced); UCI
        # publishes no checksum. Size is checked against the server's Content-Length instead.
        size=None,
        sha256=None,
        required=tuple(f"Activity recognition exp/{n}.csv" for n in
                       ("Phones_accelerometer", "Phones_gyroscope", "Watch_accelerometer", "Watch_gyroscope")),
        note="HHAR (Stisen et al., SenSys 2015), UCI 344, ~0.8 GB",
    ),
}

Progress = Callable[[str, int, int | None], None]  # (phase, bytes done, bytes total or None)


@dataclass(frozen=True)
class DownloadResult:
    folder: Path | None  # <out>/<DIRNAME> when unpacked
    archive: Path  # the verified archive (deleted after unpacking unless kept)
    size: int
    sha256: str
    resumed_from: int  # bytes already on disk when this run started
    verified: tuple[str, ...]  # what was checked: "size", "sha256", "zip-crc", "layout"


def _again(part: Path, have: int) -> str:
    """What to do after a failed download: resume from the partial file when it holds bytes."""
    return f"run the same command again to resume from {part}" if have else \
        "nothing was received: check the connection (or the URL) and run the same command again"

def spec_for(dataset: str, url: str | None = None, sha256: str | None = None, size: int | None = None) -> ArchiveSpec:
    """The known archive of ``dataset`` with command-line overrides (size 0 = do not check)."""
    spec = KNOWN[check_dataset(dataset)]
    if url is not None:
        if not url.startswith(("http://", "https://")):
            raise ConfigError(f"--url: expected an http(s) address, got {quote(url)}")
        spec = replace(spec, url=url)
    if sha256 is not None:
        digest = sha256.strip().lower()
        if len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
            raise ConfigError(f"--sha256: expected 64 hex digits, got {quote(sha256)}")
        spec = replace(spec, sha256=digest)
    if size is not None:
        if size < 0:
            raise ConfigError(f"--size: must be >= 0 (0 = do not check), got {size}")
        spec = replace(spec, size=size or None)
    return spec


def cache_paths(spec: ArchiveSpec, cache: Path) -> tuple[Path, Path]:
    """(complete archive, partial download) in ``cache``, named by the URL and expected size."""
    key = hashlib.sha256(f"{spec.url}\n{spec.size}".encode()).hexdigest()[:12]
    final = Path(cache) / f"{key}-{spec.filename}"
    return final, final.with_name(final.name + ".part")


# ----------------------------------------------------------------------------------------------
# HTTP with resume
# ----------------------------------------------------------------------------------------------
class _NoDowngrade(urllib.request.HTTPRedirectHandler):
    """Follow redirects, except from https to anything else (plain http would drop the TLS)."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        if req.full_url.lower().startswith("https://") and not newurl.lower().startswith("https://"):
            raise DataError(f"{req.full_url}: refused a redirect from https to {newurl}")
        return super().redirect_request(req, fp, code, msg, headers, newurl)


_OPENER = urllib.request.build_opener(_NoDowngrade)
_RANGE = re.compile(r"^\s*bytes\s+(\d+)-(\d+)/(\d+|\*)\s*$")


def _check_range(url: str, resp, offset: int, part: Path) -> None:
    """A 206 answer must cover the bytes from ``offset`` on, or the file would be spliced wrong."""
    rng = resp.headers.get("Content-Range", "")
    m = _RANGE.match(rng)
    if m is None or int(m.group(1)) != offset:
        raise DataError(f"{url}: asked for the bytes from {offset} on, the server answered the range "
                        f"{quote(rng[:80])} (refused; delete {part} to download from the start)")

def _total_from(resp, offset: int) -> int | None:
    """The full archive size from a 206 Content-Range or a 200 Content-Length."""
    if resp.status == 206:
        rng = resp.headers.get("Content-Range", "")
        if "/" in rng and rng.rsplit("/", 1)[1].strip().isdigit():
            return int(rng.rsplit("/", 1)[1])
        length = resp.headers.get("Content-Length")
        return offset + int(length) if length and length.isdigit() else None
    length = resp.headers.get("Content-Length")
    return int(length) if length and length.isdigit() else None


def _open(url: str, offset: int, timeout: float):
    headers = {"User-Agent": "esnfed-pipeline download", "Accept-Encoding": "identity"}
    if offset:
        headers["Range"] = f"bytes={offset}-"
    return _OPENER.open(urllib.request.Request(url, headers=headers), timeout=timeout)


def fetch(url: str, part: Path, *, timeout: float = 60.0, retries: int = 3, expected: int | None = None,
          deadline: float = DEADLINE, progress: Progress | None = None) -> tuple[int, int]:
    """Download ``url`` into ``part``, resuming from its current size; return (size, resumed_from).

    A dropped connection is retried ``retries`` times, each time resuming where it stopped. A
    server that ignores Range restarts the download from zero. The download stops as soon as it
    passes ``expected`` bytes (else the size the server announced, else MAX_UNKNOWN_SIZE), and
    when ``deadline`` seconds have passed.
    """
    part.parent.mkdir(parents=True, exist_ok=True)
    resumed_from = part.stat().st_size if part.exists() else 0
    attempt = 0
    end = time.monotonic() + deadline

    def left() -> float:
        remaining = end - time.monotonic()
        if remaining <= 0:
            have = part.stat().st_size if part.exists() else 0
            raise DataError(f"{url}: deadline of {deadline:g} s passed after {have} bytes; {_again(part, have)}")
        return remaining

    while True:
        offset = part.stat().st_size if part.exists() else 0
        if expected is not None and offset > expected:
            part.unlink()  # longer than the archive can be: not a partial download of it
            offset = resumed_from = 0
        try:
            try:
                resp = _open(url, offset, min(timeout, left()))
            except urllib.error.HTTPError as exc:
                if exc.code == 416 and offset:
                    # Range beyond the end: complete already if the server's size says so
                    total = exc.headers.get("Content-Range", "").rsplit("/", 1)[-1]
                    if total.isdigit() and int(total) == offset:
                        return offset, resumed_from
                    part.unlink()  # a stale or foreign partial file: start over
                    resumed_from = 0
                    continue
                raise DataError(f"{url}: HTTP {exc.code} {exc.reason}") from None
            with resp:
                if offset and resp.status != 206:
                    offset = 0  # Range ignored: the body is the whole file
                    resumed_from = 0
                if resp.status == 206:
                    _check_range(url, resp, offset, part)
                total = _total_from(resp, offset)
                if expected is not None and total is not None and total != expected:
                    part.unlink(missing_ok=True)
                    raise DataError(f"{url}: the server announces {total} bytes, expected {expected} (nothing "
                                    "kept; pass --size to accept another size)")
                limit = expected if expected is not None else total if total is not None else MAX_UNKNOWN_SIZE
                with open(part, "r+b" if offset else "wb") as f:
                    f.seek(offset)
                    f.truncate()
                    done = offset
                    if progress is not None:
                        progress("download", done, total)
                    while chunk := resp.read1(max(1, min(CHUNK, limit + 1 - done))):
                        f.write(chunk)
                        done += len(chunk)
                        if done > limit:
                            f.close()
                            part.unlink()
                            raise DataError(f"{url}: the server sent more than the expected {limit} bytes "
                                            "(stopped; the partial file was removed)")
                        if progress is not None:
                            progress("download", done, total)
                        left()
                    f.flush()
                    os.fsync(f.fileno())
            if total is not None and done != total:
                raise http.client.IncompleteRead(b"", total - done)
            return done, resumed_from
        except (urllib.error.URLError, http.client.HTTPException, ConnectionError, socket.timeout,
                TimeoutError) as exc:
            attempt += 1
            have = part.stat().st_size if part.exists() else 0
            if attempt > retries:
                reason = getattr(exc, "reason", None) or type(exc).__name__
                raise DataError(f"{url}: download interrupted after {have} bytes ({reason}); "
                                f"{_again(part, have)}") from None
            time.sleep(min(2.0 ** attempt * 0.1, 30.0, left()))


def sha256_file(path: Path, progress: Progress | None = None) -> str:
    h = hashlib.sha256()
    total = path.stat().st_size
    done = 0
    with open(path, "rb") as f:
        while block := f.read(CHUNK):
            h.update(block)
            done += len(block)
            if progress is not None:
                progress("verify", done, total)
    return h.hexdigest()


# ----------------------------------------------------------------------------------------------
# The stage
# ----------------------------------------------------------------------------------------------
def run(dataset: str, out_root: str | Path = "data/raw", *, url: str | None = None, sha256: str | None = None,
        size: int | None = None, cache_dir: str | Path | None = None, unpack: bool = True,
        keep_archive: bool = False, force: bool = False, retries: int = 3, timeout: float = 60.0,
        deadline: float = DEADLINE, progress: Progress | None = None) -> DownloadResult:
    """Download, verify and unpack ``dataset`` into ``<out_root>/<WESAD|HHAR>``.

    ``cache_dir`` (default ``<out_root>/.downloads``) holds the archive while downloading.
    ``unpack=False`` puts the verified archive in ``<out_root>/<DIRNAME>/`` as is (the HHAR reader
    reads the UCI zip in place). An existing dataset folder is only replaced with ``force``.
    The dataset folder is locked for the run: a second download into it stops at once.
    """
    spec = spec_for(dataset, url, sha256, size)
    out_root = Path(out_root)
    target = out_root / DIRNAMES[dataset]
    cache = Path(cache_dir) if cache_dir is not None else out_root / ".downloads"
    final, part = cache_paths(spec, cache)
    with output_lock(target), output_lock(final):
        return _run(dataset, spec, out_root, target, final, part, unpack=unpack, keep_archive=keep_archive,
                    force=force, retries=retries, timeout=timeout, deadline=deadline, progress=progress)


def _run(dataset: str, spec: ArchiveSpec, out_root: Path, target: Path, final: Path, part: Path, *,
         unpack: bool, keep_archive: bool, force: bool, retries: int, timeout: float, deadline: float,
         progress: Progress | None) -> DownloadResult:
    if target.exists() and any(target.iterdir()) and not force:
        raise DataError(f"{target}: already exists and is not empty (pass --force to replace it)")
    resumed_from = 0
    if final.is_file():
        got = final.stat().st_size  # a complete archive kept by an earlier run: verify it again
        resumed_from = got
    else:
        got, resumed_from = fetch(spec.url, part, timeout=timeout, retries=retries, expected=spec.size,
                                  deadline=deadline, progress=progress)
    current = final if final.is_file() else part

    verified = ["size"]
    if spec.size is not None and got != spec.size:
        current.unlink()
        raise DataError(f"{spec.url}: downloaded {got} bytes, expected {spec.size} (the file was removed; "
                        "run again to retry, or pass --size to accept another size)")
    digest = sha256_file(current, progress)
    if spec.sha256 is not None:
        if digest != spec.sha256:
            current.unlink()
            raise DataError(f"{spec.url}: sha256 mismatch: expected {spec.sha256}, got {digest} "
                            "(the download was removed; nothing was unpacked)")
        verified.append("sha256")
    try:
        archive.check_zip(current)
    except DataError as exc:
        current.unlink()
        raise DataError(f"{exc}; the download was removed, run again to retry") from None
    verified.append("zip-crc")
    if current is part:
        os.replace(part, final)
        fsync_dir(final.parent)

    receipt = {"dataset": dataset, "url": spec.url, "file": spec.filename, "size": got, "sha256": digest,
               "sha256_known": spec.sha256 is not None, "verified": verified, "source": spec.note}
    out_root.mkdir(parents=True, exist_ok=True)
    if not unpack:
        with atomic_path(target) as tmp:
            tmp.mkdir()
            (tmp / "download.json").write_text(dumps_json(receipt), encoding="utf-8")
            if keep_archive:
                shutil.copyfile(final, tmp / spec.filename)
            else:
                shutil.move(final, tmp / spec.filename)  # a rename when the cache is on the same disk
        return DownloadResult(target, target / spec.filename, got, digest, resumed_from, tuple(verified))

    with atomic_path(target) as tmp:
        with tempfile.TemporaryDirectory(dir=out_root, prefix=f".{target.name}.unpack.",
                                         ignore_cleanup_errors=True) as staging:
            staging = Path(staging)
            done = [0]

            def unpacked(n: int) -> None:
                done[0] += n
                if progress is not None:
                    progress("unpack", done[0], None)

            budget = archive.Budget()  # the caps hold for the archive and its nested zips together
            with archive.open_zip(final, str(final)) as zf:
                archive.extract_all(zf, staging, str(final), unpacked, budget)
            root = _dataset_root(staging, target.name)
            archive.unpack_nested(root, str(final), unpacked, budget)
            missing = [r for r in spec.required if not (root / r).is_file()]
            if missing:
                raise DataError(f"{final}: archive lacks {missing[0]} (not the {dataset} archive?)")
            verified.append("layout")
            receipt["verified"] = verified
            (root / "download.json").write_text(dumps_json(receipt), encoding="utf-8")
            os.replace(root, tmp)
    if not keep_archive:
        final.unlink()
    return DownloadResult(target, final, got, digest, resumed_from, tuple(verified))


def _dataset_root(staging: Path, dirname: str) -> Path:
    """The folder that becomes <out>/<DIRNAME>: the archive's single top folder when it is named
    like the dataset (WESAD.zip holds WESAD/), else the whole extraction (the HHAR zip is flat)."""
    entries = [p for p in staging.iterdir() if p.name != "__MACOSX"]
    if len(entries) == 1 and entries[0].is_dir() and entries[0].name.lower() == dirname.lower():
        return entries[0]
    return staging
