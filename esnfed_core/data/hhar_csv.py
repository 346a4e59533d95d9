"""Chunked reading of the HHAR CSVs with explicit dtypes and bounded lines: the columns and
vocabulary of the files (classes, device models), :func:`iter_chunks` over one CSV, and
:func:`read_streams`, the kept models' rows of one CSV grouped per recording (:class:`Stream`)."""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Callable, Iterator

import numpy as np

if TYPE_CHECKING:  # pandas is imported by the functions that read (every esnfed command imports
    import pandas as pd  # this module through the params schema and hhar; pandas adds ~0.2 s to each)

from esnfed_core.data import archive
from esnfed_core.data.hhar_source import HharSource
from esnfed_core.errors import DataError
from esnfed_core.quote import brief, quote

CLASSES = ("stand", "sit", "walk", "stairsup", "stairsdown", "bike")
PHONE_MODELS = ("nexus4", "s3", "s3mini", "samsungold")
WATCH_MODELS = ("gear", "lgwatch")
COLUMNS = ("Index", "Arrival_Time", "Creation_Time", "x", "y", "z", "User", "Model", "Device", "gt")
DTYPES = {
    "Index": "int64",
    "Arrival_Time": "int64",
    "Creation_Time": "int64",  # 19-digit epoch ns on some devices: int64, never float
    "x": "float64",
    "y": "float64",
    "z": "float64",
    "User": "category",
    "Model": "category",
    "Device": "category",
    "gt": "category",
}
NULL_LABEL = "null"

# Strings read as a missing signal value (then reported as NaN); `gt` keeps "null" as a string.
_NA_SIGNAL = ["", "nan", "NaN", "NAN", "null", "NULL", "NA", "N/A", "None", "none"]
_LABEL_INDEX = {name: i for i, name in enumerate(CLASSES)}
# Bounds of the CSV text. The real files' lines are at most 131 bytes; fields are never quoted, so
# they are read with quoting off and a field cannot outgrow its line.
MAX_LINE = 512
MAX_HEADER = 64 * 1024


class _LineBounded(io.RawIOBase):
    """The CSV bytes of ``raw`` as they stream past, with every line checked against
    :data:`MAX_LINE` before the parser sees it (one numpy scan per buffer): a file with an endless
    line or field fails at once, naming the line, instead of filling memory."""

    def __init__(self, raw: IO[bytes], display: str, first_line: int):
        super().__init__()
        self._raw, self._display = raw, display
        self._line = first_line  # number of the line the next byte belongs to
        self._run = 0  # bytes of that line already seen

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:  # type: ignore[override]
        data = self._raw.read(len(buf))
        n = len(data)
        if n:
            self._check(np.frombuffer(data, np.uint8))
            buf[:n] = data
        return n

    def _check(self, chunk: np.ndarray) -> None:
        ends = np.flatnonzero(chunk == 0x0A)
        if ends.size == 0:
            self._run += chunk.size
            self._bound(self._run, self._line)
            return
        self._bound(self._run + int(ends[0]), self._line)
        if ends.size > 1:
            lengths = np.diff(ends) - 1
            longest = int(np.argmax(lengths))
            self._bound(int(lengths[longest]), self._line + 1 + longest)
        self._line += int(ends.size)
        self._run = chunk.size - int(ends[-1]) - 1
        self._bound(self._run, self._line)

    def _bound(self, length: int, line: int) -> None:
        if length > MAX_LINE:
            raise DataError(f"{self._display}: line {line} is longer than {MAX_LINE} bytes "
                            "(HHAR lines have about 100): not an HHAR CSV, or a damaged one")


def _bounded(raw: IO[bytes], display: str, first_line: int) -> io.BufferedReader:
    return io.BufferedReader(_LineBounded(raw, display, first_line), buffer_size=1 << 20)


def _header(line: bytes, disp: str) -> list[str]:
    if len(line) >= MAX_HEADER and not line.endswith(b"\n"):
        raise DataError(f"{disp}: header line longer than {MAX_HEADER} bytes (not an HHAR CSV?)")
    if not line.strip():
        raise DataError(f"{disp}: empty file (no header line)")
    try:
        text = line.decode("utf-8-sig").strip()
    except UnicodeDecodeError:
        raise DataError(f"{disp}: header is not UTF-8 text (not a CSV?)") from None
    return [c.strip() for c in text.split(",")]


def iter_chunks(source: HharSource, name: str, columns=COLUMNS, chunk_rows: int = 500_000
                ) -> Iterator[pd.DataFrame]:
    """Yield the CSV ``name`` in DataFrames of at most ``chunk_rows`` rows with ``DTYPES``.

    `gt` keeps the literal string "null"; a missing or non-numeric signal becomes NaN and is
    reported by the caller with its line; any other unparsable value raises DataError naming the
    file, line and column. The frame index is the 0-based data row number in the file.
    """
    import pandas as pd  # noqa: PLC0415 (see the module imports)

    disp = source.display(name)
    columns = list(columns)
    done = 0
    with source.open(name) as f:
        try:
            header = _header(f.readline(MAX_HEADER), disp)
            missing = [c for c in columns if c not in header]
            if missing:
                raise DataError(f"{disp}: missing column(s) {', '.join(missing)} "
                                f"(header: {brief(','.join(header))})")
            reader = pd.read_csv(_bounded(f, disp, 2), header=None, names=header, usecols=columns,
                                 dtype={c: DTYPES[c] for c in columns}, keep_default_na=False,
                                 na_values={c: _NA_SIGNAL for c in ("x", "y", "z") if c in columns},
                                 chunksize=chunk_rows, engine="c", index_col=False, quoting=csv.QUOTE_NONE)
            with reader:
                for chunk in reader:
                    if chunk.empty:
                        continue
                    done += len(chunk)
                    yield chunk
        except pd.errors.EmptyDataError:
            pass  # header only: reported below
        except (ValueError, pd.errors.ParserError) as exc:
            raise _locate_bad_value(source, name, header, columns, done, chunk_rows, exc) from None
        except archive.ZIP_ERRORS as exc:
            raise DataError(f"{disp}: corrupt archive data after row {done} ({brief(exc)})") from None
        except UnicodeDecodeError:
            raise DataError(f"{disp}: not UTF-8 text after row {done}") from None
    if done == 0:
        raise DataError(f"{disp}: no data rows (header only)")


def _locate_bad_value(source, name, header, columns, first_row, nrows, exc) -> DataError:
    """Re-read the failing chunk as text to name the first bad cell; runs on the error path only."""
    import pandas as pd  # noqa: PLC0415 (see the module imports)

    disp = source.display(name)
    reason = brief(exc)
    if isinstance(exc, pd.errors.ParserError):
        return DataError(f"{disp}: malformed CSV ({reason})")
    try:
        with source.open(name) as f:
            # an int skiprows skips lines in C, cheap even deep into a 13 M-row file
            text = pd.read_csv(_bounded(f, disp, 1), skiprows=first_row + 1, nrows=nrows, header=None,
                               names=header, usecols=list(columns), dtype=str, keep_default_na=False,
                               index_col=False, quoting=csv.QUOTE_NONE)
    except Exception:  # noqa: BLE001 - the original error is the one to report
        return DataError(f"{disp}: unreadable value after data row {first_row} ({reason})")
    for col in columns:
        if DTYPES[col] == "category":
            continue
        raw = text[col]
        if DTYPES[col] == "float64":
            bad = pd.to_numeric(raw, errors="coerce").isna() & ~raw.isin(_NA_SIGNAL)
            what = "not a number"
        else:
            num = pd.to_numeric(raw, errors="coerce")
            bad = num.isna() | (num.astype("float64") % 1 != 0)
            what = "not an integer"
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            return DataError(f"{disp}: line {first_row + i + 2}, column {col}: {quote(raw.iloc[i])} is {what}")
    return DataError(f"{disp}: unreadable value after data row {first_row} ({reason})")


@dataclass
class Stream:
    """One recording (user, device copy, sensor), rows in file order."""

    time: np.ndarray  # int64 Arrival_Time, ms
    values: np.ndarray  # float64 (n, 3)
    label: np.ndarray  # int8 class index, -1 for `null`

    def __len__(self) -> int:
        return self.time.size

    def sorted(self) -> "Stream":
        # stable: rows with equal (batched) Arrival_Time keep their file order
        order = np.argsort(self.time, kind="stable")
        return Stream(self.time[order], self.values[order], self.label[order])


@dataclass
class FileStreams:
    """The kept rows of one CSV grouped per (user, model, device copy)."""

    display: str
    streams: dict[tuple[str, str, str], Stream] = field(default_factory=dict)
    rows_read: int = 0
    rows_kept: int = 0


def _check_models(chunk, disp: str) -> None:
    """DataError naming the line of the first row whose Model is none of HHAR's six: the reader
    takes the columns it needs by position (``usecols``), so a row with a field too many before
    Model (a decimal comma, a stray delimiter) is shifted, and its user letter lands in Model;
    without this check the row would be dropped unseen with the other models' rows."""
    unknown = chunk["Model"].cat.categories.difference(PHONE_MODELS + WATCH_MODELS)
    if len(unknown):
        r = int(np.flatnonzero(chunk["Model"].isin(unknown).to_numpy())[0])
        raise DataError(f"{disp}: line {chunk.index[r] + 2}, column Model: unknown device model "
                        f"{quote(chunk['Model'].iloc[r])} (expected one of "
                        f"{', '.join(PHONE_MODELS + WATCH_MODELS)}; a field too many in that row?)")


def read_streams(source: HharSource, name: str, models, *, chunk_rows: int = 500_000,
                 drop_null: bool = False, progress: Callable[[str, int], None] | None = None) -> FileStreams:
    """Read one CSV in chunks, keeping only rows of ``models``, grouped per (user, model, device)."""
    disp = source.display(name)
    parts: dict[tuple[str, str, str], list[tuple[np.ndarray, np.ndarray, np.ndarray]]] = {}
    out = FileStreams(disp)
    cols = ("Arrival_Time", "x", "y", "z", "User", "Model", "Device", "gt")
    for chunk in iter_chunks(source, name, cols, chunk_rows):
        out.rows_read += len(chunk)
        if progress is not None:
            progress(name, len(chunk))
        _check_models(chunk, disp)
        keep = chunk["Model"].isin(models).to_numpy()
        if not keep.any():
            continue
        rows = chunk.index.to_numpy()[keep]
        values = chunk[["x", "y", "z"]].to_numpy(dtype=np.float64)[keep]
        finite = np.isfinite(values)
        if not finite.all():
            r, c = np.argwhere(~finite)[0]
            raise DataError(f"{disp}: line {rows[r] + 2}, column {'xyz'[c]}: "
                            f"value is {values[r, c]} (missing, NaN or infinite)")
        gt = chunk["gt"].cat
        lut = np.array([-1 if c == NULL_LABEL else _LABEL_INDEX.get(c, -2) for c in gt.categories] + [-2],
                       dtype=np.int8)
        label = lut[gt.codes.to_numpy()[keep]]
        if (label == -2).any():
            r = int(np.flatnonzero(label == -2)[0])
            raise DataError(f"{disp}: line {rows[r] + 2}, column gt: unknown activity "
                            f"{quote(chunk['gt'].to_numpy()[keep][r])} (expected one of {', '.join(CLASSES)}, null)")
        time = chunk["Arrival_Time"].to_numpy()[keep]
        cats = [chunk[c].cat for c in ("User", "Model", "Device")]
        codes = [c.codes.to_numpy()[keep].astype(np.int64) for c in cats]
        sizes = [len(c.categories) for c in cats]
        key = (codes[0] * sizes[1] + codes[1]) * sizes[2] + codes[2]
        uniq, inverse = np.unique(key, return_inverse=True)
        order = np.argsort(inverse, kind="stable")
        bounds = np.concatenate([[0], np.cumsum(np.bincount(inverse, minlength=uniq.size))])
        for j, k in enumerate(uniq):
            k = int(k)
            names = (cats[0].categories[k // (sizes[1] * sizes[2])],
                     cats[1].categories[(k // sizes[2]) % sizes[1]],
                     cats[2].categories[k % sizes[2]])
            sel = order[bounds[j]:bounds[j + 1]]
            if drop_null:  # a recording of `null` rows only stays, empty, so it is reported
                sel = sel[label[sel] >= 0]
            parts.setdefault(names, []).append((time[sel], values[sel], label[sel]))
            out.rows_kept += int(sel.size)
    while parts:  # popping frees each recording's pieces once joined: peak = data + one recording
        key_names, chunks = parts.popitem()
        out.streams[key_names] = Stream(np.concatenate([c[0] for c in chunks]),
                                        np.concatenate([c[1] for c in chunks]),
                                        np.concatenate([c[2] for c in chunks]).astype(np.int8))
        del chunks
    return out
