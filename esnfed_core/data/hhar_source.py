"""Where the HHAR files are (PROTOCOL §1): the four UCI CSVs of `Activity recognition exp/` in a
folder, or inside the UCI zip with its nested zip, read in place (:class:`HharSource`), and how a
raw data folder is searched for them (:func:`locate_source`)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Iterator

from esnfed_core.data import archive
from esnfed_core.data.paths import check_input
from esnfed_core.errors import DataError
from esnfed_core.quote import brief

FOLDER = "Activity recognition exp"
OUTER_ZIP = "heterogeneity+activity+recognition.zip"
INNER_ZIP = "Activity recognition exp.zip"
FILE_NAMES = ("Phones_accelerometer", "Phones_gyroscope", "Watch_accelerometer", "Watch_gyroscope")


@dataclass(frozen=True)
class HharSource:
    """The four CSVs, either in ``folder`` or inside ``zip_path`` → ``inner`` (a nested zip)."""

    folder: Path | None = None
    zip_path: Path | None = None
    inner: tuple[str, ...] = ()  # zip members leading to the zip that holds the CSVs
    _open: dict = field(default_factory=dict, compare=False, repr=False)

    def display(self, name: str) -> str:
        """How messages and the manifest name a CSV."""
        if self.folder is not None:
            return str(self.folder / f"{name}.csv")
        return ":".join([str(self.zip_path), *self.inner, f"{FOLDER}/{name}.csv"])

    @property
    def files(self) -> list[Path]:
        """The files on disk the data comes from (for checksums)."""
        if self.folder is not None:
            return [self.folder / f"{n}.csv" for n in FILE_NAMES if (self.folder / f"{n}.csv").is_file()]
        return [self.zip_path]

    @contextlib.contextmanager
    def opened(self) -> Iterator["HharSource"]:
        """Keep the zip holding the CSVs open across reads: a nested zip's directory is then read
        once, and members read in archive order need no extra decompression pass."""
        if self.folder is not None or "zip" in self._open:
            yield self
            return
        label = ":".join([str(self.zip_path), *self.inner])
        with contextlib.ExitStack() as stack:
            raw = stack.enter_context(archive.open_nested(self.zip_path, list(self.inner)) if self.inner
                                      else open(self.zip_path, "rb"))
            self._open["zip"] = stack.enter_context(archive.open_zip(raw, label))
            try:
                yield self
            finally:
                self._open.clear()

    @contextlib.contextmanager
    def open(self, name: str) -> Iterator[IO[bytes]]:
        if self.folder is not None:
            with open(check_input(self.folder / f"{name}.csv"), "rb") as f:
                yield f
            return
        with self.opened():
            zf = self._open["zip"]
            member = archive.find_member(zf, f"{name}.csv", ":".join([str(self.zip_path), *self.inner]))
            try:
                f = zf.open(member)
            except archive.ZIP_ERRORS as exc:
                raise DataError(f"{self.display(name)}: cannot open ({brief(exc)})") from None
            with f:
                yield f


def locate_source(raw_root: str | Path) -> HharSource:
    """Find HHAR under ``raw_root``: ``HHAR/Activity recognition exp/*.csv``, else the UCI zip
    (``heterogeneity+activity+recognition.zip``, or the inner ``Activity recognition exp.zip``)
    in ``raw_root/HHAR`` or ``raw_root``."""
    raw_root = check_input(raw_root, "raw data folder not found", folder=True)
    for base in (raw_root / "HHAR", raw_root):
        if (base / FOLDER).is_dir():
            return HharSource(folder=base / FOLDER)
    for base in (raw_root / "HHAR", raw_root):
        outer = base / OUTER_ZIP
        if outer.is_file():
            with archive.open_zip(outer, str(outer)) as zf:
                inner = archive.find_member(zf, INNER_ZIP, str(outer))
            return HharSource(zip_path=outer, inner=(inner,))
        if (base / INNER_ZIP).is_file():
            return HharSource(zip_path=base / INNER_ZIP)
    raise DataError(
        f"{raw_root / 'HHAR' / FOLDER}: HHAR data not found (expected the four CSVs there, or "
        f"{OUTER_ZIP} in {raw_root / 'HHAR'}; run `esnfed download --dataset hhar` or "
        "`esnfed synthesize --dataset hhar`)"
    )
