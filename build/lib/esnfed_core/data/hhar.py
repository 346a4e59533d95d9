"""HHAR reader and preprocessing (PROTOCOL §1): the four UCI CSVs of `Activity recognition exp/`,
or the UCI zip with its nested zip read in place, turned into per-user 100 Hz windows.

Pipeline per user and device model: chunked CSV reading with explicit dtypes, keeping only the rows
of the requested models; per physical copy (`nexus4_1`, `nexus4_2`) a nearest as-of join of
gyroscope onto accelerometer rows on Arrival_Time within the tolerance, unmatched gyroscope rows
appended; the copy whose worst column has the lower NaN fraction is kept (tie: copy 1); index
decimation to the target rate; rows with any NaN dropped; with ``features: ijcnn32`` the IncFed
paper's 32 features (:func:`ijcnn32`); per-column z-score; non-overlapping windows, tail dropped.
`null`-activity rows are dropped as the files are read, before the join (as the authors' code), or
with ``drop_null: after_decimation`` together with the NaN rows.

Memory: only the kept models' rows of one sensor pair (phones, then watches) are held at a time,
33 bytes per row (int64 time, 3 float64 values, int8 label), plus one CSV chunk.

Params (``params["preprocess"]["hhar"]`` in params.yaml; missing keys take these defaults):
  devices            [nexus4, s3, s3mini, lgwatch]  models used, in context order
  rates              nominal Hz per model (nexus4 200, s3 150, s3mini 100, samsungold 50,
                     gear 100, lgwatch 200): the f of the decimation
  target_rate        100     Hz after decimation; `native`: no decimation, every joined row kept (each
                     model at its own rate: the ESANN 2022 protocol's Nexus4 at ~200 Hz). A number
                     equal to a model's rate follows the authors' formula, which leaves out the last row
  window             200     steps per window
  join_tolerance_ms  5       as-of join tolerance on Arrival_Time (inclusive)
  chunk_rows         500000  CSV rows per chunk (memory/speed trade-off only)
  drop_null          at_read | after_decimation   when `null`-activity rows go. at_read (default, as
                     the authors' code, vdecaro/federated-esn data/hhar.py: pandas reads `null` as
                     NaN and `dropna(subset=['gt'])` runs at load): before the join, so they take no
                     part in the copy choice or the decimation phase. after_decimation: kept through
                     the join (counted in the copy choice's NaN fraction, shifting the decimation
                     phase) and dropped with the NaN rows after decimation
  max_nan_fraction   1.0     skip a user-device whose kept copy has a worst-column NaN fraction
                     >= this (the authors' code: 0.1); 1.0 never skips
  std_ddof           0       0 = population std (PROTOCOL); 1 = pandas' default in the authors' code
  features           raw     raw: the 6 axes. ijcnn32: the IncFed paper's (IJCNN 2021) 32 features, computed
                     after the NaN drop and before the z-score (:func:`ijcnn32`, docs/protocol.md "IJCNN
                     2021 protocol variant"): the 6 axes; the mean, std, min and max of each axis over the
                     last ``stats_window`` rows, held for ``stats_hop`` rows (causal); |acc| and |gyro|
  stats_window       200     rows per statistics window (ijcnn32)
  stats_hop          100     rows between statistics windows (ijcnn32; 100 of 200: 50 % overlap)
"""

from __future__ import annotations

import contextlib
import csv
import io
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Callable, Iterator

import numpy as np

if TYPE_CHECKING:  # pandas is imported by the functions that read (every esnfed command imports
    import pandas as pd  # this module through the params schema; pandas adds ~0.2 s to each)

from esnfed_core.data import archive
from esnfed_core.data.paths import check_input
from esnfed_core.data.processed import UserData
from esnfed_core.errors import ConfigError, DataError
from esnfed_core.quote import brief, quote
from esnfed_core.validation import ParameterError, check_param

CLASSES = ("stand", "sit", "walk", "stairsup", "stairsdown", "bike")
FEATURE_NAMES = ("acc_x", "acc_y", "acc_z", "gyro_x", "gyro_y", "gyro_z")
FEATURE_SETS = ("raw", "ijcnn32")
STATISTICS = ("mean", "std", "min", "max")  # ijcnn32's windowed statistics, in column order
IJCNN32_NAMES = (FEATURE_NAMES + tuple(f"{a}_{s}" for s in STATISTICS for a in FEATURE_NAMES)
                 + ("acc_mag", "gyro_mag"))
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
NATIVE = "native"  # target_rate: no decimation
FOLDER = "Activity recognition exp"
OUTER_ZIP = "heterogeneity+activity+recognition.zip"
INNER_ZIP = "Activity recognition exp.zip"
FILE_NAMES = ("Phones_accelerometer", "Phones_gyroscope", "Watch_accelerometer", "Watch_gyroscope")

DEFAULT_PARAMS: dict = {
    "devices": ["nexus4", "s3", "s3mini", "lgwatch"],
    "rates": {"nexus4": 200, "s3": 150, "s3mini": 100, "samsungold": 50, "gear": 100, "lgwatch": 200},
    "target_rate": 100,
    "window": 200,
    "join_tolerance_ms": 5,
    "chunk_rows": 500_000,
    "drop_null": "at_read",
    "max_nan_fraction": 1.0,
    "std_ddof": 0,
    "features": "raw",
    "stats_window": 200,
    "stats_hop": 100,
}

# Strings read as a missing signal value (then reported as NaN); `gt` keeps "null" as a string.
_NA_SIGNAL = ["", "nan", "NaN", "NAN", "null", "NULL", "NA", "N/A", "None", "none"]
_LABEL_INDEX = {name: i for i, name in enumerate(CLASSES)}
_SAFE_ID = re.compile(r"[A-Za-z0-9_-]+")  # matched in full (no trailing newline)
# Bounds of the CSV text. The real files' lines are at most 131 bytes; fields are never quoted, so
# they are read with quoting off and a field cannot outgrow its line.
MAX_LINE = 512
MAX_HEADER = 64 * 1024


# ----------------------------------------------------------------------------------------------
# Where the files are: a folder of CSVs or the UCI zip (nested zip read in place)
# ----------------------------------------------------------------------------------------------
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


# ----------------------------------------------------------------------------------------------
# Chunked reading with explicit dtypes
# ----------------------------------------------------------------------------------------------
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


# ----------------------------------------------------------------------------------------------
# Alignment, copy choice, decimation, normalisation, windows: pure functions over arrays
# ----------------------------------------------------------------------------------------------
def asof_nearest(left: np.ndarray, right: np.ndarray, tolerance: float) -> np.ndarray:
    """For each sorted ``left`` time, the index of the nearest sorted ``right`` time within
    ``tolerance`` (inclusive), or -1. Ties between an earlier and a later candidate go to the
    earlier one, and among equal times to the last (backward) or first (forward) row — the rules
    of ``pandas.merge_asof(direction="nearest")``."""
    n = right.size
    if n == 0:
        return np.full(left.size, -1, dtype=np.int64)
    back = np.searchsorted(right, left, side="right") - 1
    fwd = np.searchsorted(right, left, side="left")
    bdiff = np.where(back >= 0, left - right[np.maximum(back, 0)], np.inf)
    fdiff = np.where(fwd < n, right[np.minimum(fwd, n - 1)] - left, np.inf)
    bok = bdiff <= tolerance
    fok = fdiff <= tolerance
    take_fwd = fok & (~bok | (fdiff < bdiff))
    return np.where(take_fwd, fwd, np.where(bok, back, -1)).astype(np.int64)


@dataclass
class Joined:
    """One device copy after the join: time-sorted rows of 6 columns (NaN where a sensor is
    missing) and the activity (-1 for `null`)."""

    time: np.ndarray
    values: np.ndarray  # float64 (n, 6): acc x, y, z, gyro x, y, z
    label: np.ndarray  # int8

    def nan_fraction(self) -> float:
        """The worst column's missing fraction over the 6 signals and the activity (1.0 if empty)."""
        n = self.time.size
        if n == 0:
            return 1.0
        per_col = np.concatenate([np.isnan(self.values).sum(axis=0), [(self.label < 0).sum()]])
        return float(per_col.max() / n)


def join_copy(acc: Stream, gyro: Stream, tolerance: float) -> Joined:
    """Accelerometer rows get the nearest gyroscope values within ``tolerance``; gyroscope rows
    with no accelerometer row within it are appended; then all rows are stably time-sorted."""
    acc, gyro = acc.sorted(), gyro.sorted()
    m = asof_nearest(acc.time, gyro.time, tolerance)
    acc_rows = np.full((len(acc), 6), np.nan)
    acc_rows[:, :3] = acc.values
    hit = m >= 0
    acc_rows[hit, 3:] = gyro.values[m[hit]]
    lonely = asof_nearest(gyro.time, acc.time, tolerance) < 0
    gyro_rows = np.full((int(lonely.sum()), 6), np.nan)
    gyro_rows[:, 3:] = gyro.values[lonely]
    time = np.concatenate([acc.time, gyro.time[lonely]])
    order = np.argsort(time, kind="stable")
    return Joined(time[order], np.concatenate([acc_rows, gyro_rows])[order],
                  np.concatenate([acc.label, gyro.label[lonely]])[order].astype(np.int8))


def choose_copy(copies: dict[str, Joined]) -> tuple[str, dict[str, float]]:
    """The copy whose worst column has the lowest NaN fraction; ties go to the first name."""
    fractions = {name: copies[name].nan_fraction() for name in sorted(copies)}
    best = min(fractions, key=lambda name: fractions[name])  # min keeps the first of equals
    return best, fractions


def decimation_indices(n: int, rate: float, target: float) -> np.ndarray:
    """Rows round(k·rate/target) for the k with k·rate/target below n − 1, as the authors'
    ``np.around(np.arange(0, len - 1, rate / target))``: the bound applies before rounding (numpy
    half-to-even), so a last position just below n − 1 that rounds up keeps row n − 1."""
    if n <= 1:
        return np.zeros(0, dtype=np.int64)
    return np.around(np.arange(0, n - 1, rate / target)).astype(np.int64)


def kept_rows(n: int, rate: float, target: float | str) -> np.ndarray:
    """The rows decimation keeps of ``n`` joined rows: every row for ``target`` ``native``, else
    :func:`decimation_indices`."""
    return np.arange(n, dtype=np.int64) if target == NATIVE else decimation_indices(n, rate, target)


def zscore(values: np.ndarray, ddof: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-column z-score; returns (normalised, mean, std)."""
    mean = values.mean(axis=0)
    std = values.std(axis=0, ddof=ddof)
    with np.errstate(divide="ignore", invalid="ignore"):  # a constant column is reported by the caller
        return (values - mean) / std, mean, std


def feature_names(p: dict) -> tuple[str, ...]:
    """The columns of the processed ``x`` under resolved params ``p`` (``features``)."""
    return IJCNN32_NAMES if p["features"] == "ijcnn32" else FEATURE_NAMES


def ijcnn32(values: np.ndarray, stats_window: int, stats_hop: int) -> np.ndarray:
    """The IncFed paper's 32 features of ``values`` (n, 6) (acc x, y, z, gyro x, y, z), one row per
    step t >= ``stats_window`` - 1, so (n - stats_window + 1, 32); (0, 32) when n < stats_window.

    Columns: the 6 axes at t; the mean, std (population), min and max of each axis (stat-major,
    :data:`IJCNN32_NAMES`) over the statistics window k = (t - stats_window + 1) // stats_hop, rows
    [k·hop, k·hop + stats_window): the latest window ending at or before t, so a statistic is held
    for the ``stats_hop`` steps from its window's last row and never reads a row after t (causal);
    |acc| and |gyro| at t (per step, not windowed).
    """
    n = values.shape[0]
    if n < stats_window:
        return np.zeros((0, 32), dtype=values.dtype)
    # (K, 6, stats_window) view of windows k at rows k·hop .. k·hop + stats_window - 1
    win = np.lib.stride_tricks.sliding_window_view(values, stats_window, axis=0)[::stats_hop]
    stats = np.concatenate([win.mean(axis=2), win.std(axis=2), win.min(axis=2), win.max(axis=2)], axis=1)
    steps = np.arange(stats_window - 1, n)
    held = stats[(steps - stats_window + 1) // stats_hop]
    now = values[steps]
    mags = np.stack([np.linalg.norm(now[:, :3], axis=1), np.linalg.norm(now[:, 3:], axis=1)], axis=1)
    return np.concatenate([now, held, mags], axis=1)


def to_windows(values: np.ndarray, label: np.ndarray, window: int) -> tuple[np.ndarray, np.ndarray]:
    """Non-overlapping windows of ``window`` steps; the tail that does not fill one is dropped."""
    w = values.shape[0] // window
    x = values[: w * window].reshape(w, window, values.shape[1]).astype(np.float32)
    y = label[: w * window].reshape(w, window).astype(np.int8)
    return x, y


@dataclass
class DeviceResult:
    x: np.ndarray
    y: np.ndarray
    info: dict


def process_device(copies: dict[str, Joined], rate: float, p: dict, where: str) -> DeviceResult | None:
    """Copy choice, decimation, NaN drop, z-score and windows for one user-device; None when the
    device is skipped by ``max_nan_fraction``. ``where`` prefixes error messages."""
    chosen, fractions = choose_copy(copies)
    info = {"copy": chosen, "nan_fraction": fractions}
    if fractions[chosen] >= p["max_nan_fraction"] and p["max_nan_fraction"] < 1.0:
        info.update(skipped=f"NaN fraction {fractions[chosen]:.3f} >= max_nan_fraction", windows=0)
        return DeviceResult(np.zeros((0, p["window"], len(feature_names(p))), np.float32),
                            np.zeros((0, p["window"]), np.int8), info)
    j = copies[chosen]
    idx = kept_rows(j.time.size, rate, p["target_rate"])
    values, label = j.values[idx], j.label[idx]
    ok = ~np.isnan(values).any(axis=1) & (label >= 0)
    values, label = values[ok], label[ok]
    info.update(rows_joined=int(j.time.size), rows_decimated=int(idx.size), rows_kept=int(values.shape[0]))
    if values.shape[0] == 0:
        raise DataError(f"{where}: no usable rows ({j.time.size} joined rows of {chosen}, all with "
                        "null activity or a missing sensor)")
    if p["features"] == "ijcnn32":  # features before the z-score, as the paper's order of steps
        # the first stats_window - 1 rows have no complete statistics window and are dropped
        need = p["window"] + p["stats_window"] - 1
        if values.shape[0] < need:
            raise DataError(f"{where}: only {values.shape[0]} usable rows after decimation, fewer than one "
                            f"window of {p['window']} feature rows ({need} rows with stats_window "
                            f"{p['stats_window']})")
        label = label[p["stats_window"] - 1:]
        values = ijcnn32(values, p["stats_window"], p["stats_hop"])
        info.update(rows_featured=int(values.shape[0]))
    if values.shape[0] < p["window"]:
        raise DataError(f"{where}: only {values.shape[0]} usable rows after decimation, fewer than one "
                        f"window of {p['window']}")
    z, mean, std = zscore(values, p["std_ddof"])
    flat = np.flatnonzero(~(std > 0) | ~np.isfinite(std))
    if flat.size:
        raise DataError(f"{where}: column {feature_names(p)[flat[0]]} is constant over the kept rows "
                        "(cannot z-score)")
    x, y = to_windows(z, label, p["window"])
    info.update(windows=int(x.shape[0]), mean=mean.tolist(), std=std.tolist())
    return DeviceResult(x, y, info)


# ----------------------------------------------------------------------------------------------
# The whole dataset
# ----------------------------------------------------------------------------------------------
def resolve_params(params: dict | None) -> dict:
    """Defaults merged with ``params``, validated; errors name the `preprocess.hhar` key."""
    params = dict(params or {})
    unknown = sorted(set(params) - set(DEFAULT_PARAMS))
    if unknown:
        raise ConfigError(f"params.yaml: unknown key preprocess.hhar.{unknown[0]}")
    p = {**DEFAULT_PARAMS, **params}
    p["rates"] = {**DEFAULT_PARAMS["rates"], **(params.get("rates") or {})}
    pre = "preprocess.hhar."
    try:
        devices = p["devices"]
        if not isinstance(devices, (list, tuple)) or not devices:
            raise ConfigError(f"params.yaml: {pre}devices must be a non-empty list")
        for d in devices:
            if d not in PHONE_MODELS + WATCH_MODELS:
                raise ConfigError(f"params.yaml: {pre}devices: unknown model {quote(d)} "
                                  f"(expected some of {', '.join(PHONE_MODELS + WATCH_MODELS)})")
        if len(set(devices)) != len(devices):
            raise ConfigError(f"params.yaml: {pre}devices lists a model twice")
        for d in devices:
            check_param(f"{pre}rates.{d}", p["rates"].get(d), low=0, low_open=True)
        if isinstance(p["target_rate"], str) and p["target_rate"] != NATIVE:
            raise ConfigError(f"params.yaml: {pre}target_rate: expected a number (Hz) or {NATIVE} (no "
                              f"decimation), got {quote(p['target_rate'])}")
        if p["target_rate"] != NATIVE:
            check_param(f"{pre}target_rate", p["target_rate"], low=0, low_open=True)
        for d in devices if p["target_rate"] != NATIVE else ():
            if p["rates"][d] < p["target_rate"]:
                raise ConfigError(f"params.yaml: {pre}rates.{d} ({p['rates'][d]}) is below target_rate "
                                  f"({p['target_rate']}): decimation cannot upsample")
        check_param(f"{pre}window", p["window"], integer=True, low=1)
        check_param(f"{pre}join_tolerance_ms", p["join_tolerance_ms"], low=0)
        check_param(f"{pre}chunk_rows", p["chunk_rows"], integer=True, low=1)
        check_param(f"{pre}max_nan_fraction", p["max_nan_fraction"], low=0, high=1, low_open=True)
        check_param(f"{pre}std_ddof", p["std_ddof"], integer=True, low=0, high=1)
        if p["features"] not in FEATURE_SETS:
            raise ConfigError(f"params.yaml: {pre}features: expected one of {', '.join(FEATURE_SETS)}, "
                              f"got {quote(p['features'])}")
        check_param(f"{pre}stats_window", p["stats_window"], integer=True, low=1)
        check_param(f"{pre}stats_hop", p["stats_hop"], integer=True, low=1, high=p["stats_window"])
        if p["drop_null"] not in ("after_decimation", "at_read"):
            raise ConfigError(f"params.yaml: {pre}drop_null must be 'after_decimation' or 'at_read', "
                              f"got {quote(p['drop_null'])}")
    except ParameterError as exc:
        raise ConfigError(f"params.yaml: {exc}") from None
    p["devices"] = list(devices)
    return p


def preprocess_hhar(raw_root: Path, params: dict | None = None, *,
                    progress: Callable[[str, int], None] | None = None
                    ) -> Iterator[tuple[str, UserData, dict]]:
    """Yield ``(user, UserData, info)`` per user present (sorted), per PROTOCOL §1.

    ``x`` float32 (W, window, F) (F: 6, or 32 with ``features: ijcnn32``), ``y`` int8 (W, window)
    classes ``CLASSES``, ``context`` int8 (W,) = position of the device in ``params["devices"]``;
    windows ordered by device, then time.
    ``info``: per device the copy kept, NaN fractions of both copies, row counts and windows, plus
    ``windows_per_device`` (list in device order) and ``sources`` (CSV names read). Everything is
    validated before the first user is yielded, so a DataError leaves nothing half-written.
    ``progress(file, rows)`` is called after each CSV chunk.
    """
    p = resolve_params(params)
    source = locate_source(raw_root)
    with source.opened():
        results, sources = _read_all(source, p, progress)
    devices = p["devices"]
    users = sorted(results)
    for u in users:
        missing = [d for d in devices if d not in results[u]]
        if missing:
            raise DataError(f"{source.display(_file_of(missing[0]))}: user '{u}' has no rows for device '{missing[0]}'")
    for u in users:
        parts, info = [], {"devices": {}, "windows_per_device": [], "sources": sources}
        for ci, d in enumerate(devices):
            r = results[u][d]
            parts.append(UserData(r.x, r.y, np.full(r.x.shape[0], ci, dtype=np.int8)))
            info["devices"][d] = r.info
            info["windows_per_device"].append(int(r.x.shape[0]))
        yield u, UserData.concat(parts), info


def _read_all(source: HharSource, p: dict, progress) -> tuple[dict[str, dict[str, "DeviceResult"]], list[str]]:
    results: dict[str, dict[str, DeviceResult]] = {}
    sources: list[str] = []
    for kind, models in (("Phones", PHONE_MODELS), ("Watch", WATCH_MODELS)):
        wanted = [d for d in p["devices"] if d in models]
        if not wanted:
            continue
        acc = read_streams(source, f"{kind}_accelerometer", wanted, chunk_rows=p["chunk_rows"],
                           drop_null=p["drop_null"] == "at_read", progress=progress)
        gyro = read_streams(source, f"{kind}_gyroscope", wanted, chunk_rows=p["chunk_rows"],
                            drop_null=p["drop_null"] == "at_read", progress=progress)
        sources += [acc.display, gyro.display]
        _process_kind(acc, gyro, wanted, p, results)
        del acc, gyro  # frees the raw rows before the next sensor pair is read
    return results, sources


def _file_of(model: str) -> str:
    return "Phones_accelerometer" if model in PHONE_MODELS else "Watch_accelerometer"


def _process_kind(acc: FileStreams, gyro: FileStreams, models: list[str], p: dict,
                  results: dict[str, dict[str, DeviceResult]]) -> None:
    seen = {(u, m) for (u, m, _) in acc.streams} | {(u, m) for (u, m, _) in gyro.streams}
    for m in models:
        if not any(mm == m for _, mm in seen):
            raise DataError(f"{acc.display}: no rows for device '{m}'")
    for u, m in sorted(seen):
        if not _SAFE_ID.fullmatch(u):
            raise DataError(f"{acc.display}: user id {quote(u)} is not a usable name (letters, digits, _ or -)")
        names = sorted({dev for (uu, mm, dev) in list(acc.streams) + list(gyro.streams) if (uu, mm) == (u, m)})
        empty = Stream(np.zeros(0, np.int64), np.zeros((0, 3)), np.zeros(0, np.int8))
        copies = {dev: join_copy(acc.streams.get((u, m, dev), empty), gyro.streams.get((u, m, dev), empty),
                                 p["join_tolerance_ms"]) for dev in names}
        where = f"{acc.display}: user '{u}', device '{m}'"
        results.setdefault(u, {})[m] = process_device(copies, p["rates"][m], p, where)
        for dev in names:  # free this user's raw rows as soon as they are processed
            acc.streams.pop((u, m, dev), None)
            gyro.streams.pop((u, m, dev), None)
