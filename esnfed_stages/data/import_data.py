"""Stage `import`: your own per-user labelled time series -> the processed-data contract
(data/processed/<dataset>/, docs/data-contract.md), like `preprocess` does for the papers' datasets.

Inputs: one CSV or Parquet file, or a folder of them, or a NumPy .npz of 1-D arrays named like the
columns, holding a row per sample with columns for the user, the time, the label, optionally the
context, and the features. Files are read in chunks of ``chunk_rows`` rows; each chunk's rows are
appended to a scratch file per user, so memory holds one chunk plus one user's rows, never the
whole input. Then each user is resampled, windowed and z-scored (esnfed_core/data/tabular.py) and
written through preprocess.write_processed (atomic: a failure leaves no partial output).
Bad input is one line naming the file, the row (1 = first data row; CSV line = row + 1) and the column.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

import numpy as np

if TYPE_CHECKING:  # pandas is imported by the functions that read (every esnfed command imports
    import pandas as pd  # this module through the params schema; pandas adds ~0.2 s to each)

from esnfed_core.data.npz import MAX_EXPANSION, SLACK_BYTES, npz_names, read_npz
from esnfed_core.data.paths import check_input
from esnfed_core.data.processed import MAX_USER_CHARS, UserData
from esnfed_core.data.import_options import MISSING, TIME_UNITS
from esnfed_core.data.tabular import Cuts, Rows, user_windows
from esnfed_core.errors import ConfigError, DataError
from esnfed_core.quote import brief, quote
from esnfed_core.validation import Bound, ParameterError
from esnfed_stages.data._datasets import check_own_name
from esnfed_stages.data.preprocess import write_processed
from esnfed_stages.layout import PROCESSED_DIR as DEFAULT_OUT
from esnfed_stages._io import clean_stale_tmp, made_folder, output_lock, scratch_folder

FORMATS = ("auto", "csv", "parquet", "npz")
SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet", ".npz": "npz"}
# Bounds of the numeric import options, in one place (the schema checks params.yaml through
# import_params, so params.yaml and the command line meet the same bounds).
BOUNDS = {"window": Bound(integer=True, low=1), "rate": Bound(low=0.0, low_open=True),
          "max_gap": Bound(low=0.0, low_open=True), "chunk_rows": Bound(integer=True, low=1)}
_PLAIN = re.compile(r"[A-Za-z0-9_-]+")  # a user name: it becomes a file name
# Bounds checked as the input is read (docs/data-contract.md §5, "Limits"): each is refused at the
# file, row or column that crosses it, before memory or the file system pay for it.
MAX_CODES = 127  # distinct classes, and contexts: the contract stores them as int8
MAX_USERS = 100_000  # each user becomes a file of the output folder
MAX_COLUMNS = 10_000  # columns of a CSV header (names of a Parquet schema or an .npz)
MAX_HEADER_BYTES = 1 << 20  # bytes of a CSV's header line
MAX_FIELD_CHARS = 10_000  # characters of one field of a wanted column
# Cells (rows x header columns) of one chunk read from a CSV: a wide header reads fewer rows per
# chunk, so memory follows the input's size, not chunk_rows times the columns the header declares.
CHUNK_CELLS = 2_000_000
QUOTED = 40  # characters of a cell value an error quotes (the line stays short whatever the cell)
# How a message names a value given on the command line (`esnfed import`), not in params.yaml
CLI_NAMES = {"source": "argument SOURCE"}


@dataclass(frozen=True)
class ImportParams:
    """``imports.<dataset>`` of params.yaml (or the command line), checked."""

    source: str
    features: tuple[str, ...]
    window: int
    rate: float | None = None
    max_gap: float | None = None  # seconds; None: tabular.default_max_gap per user
    missing: str = "refuse"  # a missing (empty, NaN) feature value: refuse, interpolate or drop (tabular.MISSING)
    user: str = "user"
    time: str = "time"
    label: str = "label"
    context: str | None = None
    time_unit: str = "s"
    classes: tuple[str, ...] | None = None
    contexts: tuple[str, ...] | None = None
    drop_labels: tuple[str, ...] = ()
    format: str = "auto"
    delimiter: str = ","
    chunk_rows: int = 100_000
    key: str = field(default="imports", compare=False)  # where the values came from, for messages
    given: frozenset[str] = field(default=frozenset(), compare=False)  # the fields the command line gave

    def name(self, value: str) -> str:
        """How messages name field ``value``: its option (--contexts, argument SOURCE) when the
        command line gave it, else its params.yaml key (imports.<dataset>.contexts)."""
        if value in self.given:
            return CLI_NAMES.get(value, "--" + value.replace("_", "-"))
        return f"{self.key}.{value}"

    def __post_init__(self) -> None:
        n = self.name
        _text(n("source"), self.source)
        for name in ("user", "time", "label"):
            _text(n(name), getattr(self, name))
        if self.context is not None:
            _text(n("context"), self.context)
        if not self.features or not all(isinstance(f, str) and f for f in self.features):
            raise ConfigError(f"{n('features')}: expected a non-empty list of column names, got {quote(self.features)}")
        columns = [self.user, self.time, self.label, *([self.context] if self.context else []), *self.features]
        if len(set(columns)) != len(columns):
            twice = next(c for c in columns if columns.count(c) > 1)
            named = [f for f in ("user", "time", "label", "context", "features")
                     if twice == getattr(self, f) or (f == "features" and twice in self.features)]
            where = " and ".join(map(n, named)) if self.given & set(named) else self.key
            raise ConfigError(f"{where}: a column is named twice among user, time, label, context and features: "
                              f"{quote(columns)}")
        for name in ("window", "rate", "max_gap", "chunk_rows"):
            value = getattr(self, name)
            if value is not None:
                try:
                    BOUNDS[name].check(n(name), value)
                except ParameterError as exc:
                    raise ConfigError(str(exc)) from None
        for name, allowed in (("time_unit", tuple(TIME_UNITS)), ("format", FORMATS), ("missing", MISSING)):
            if getattr(self, name) not in allowed:
                raise ConfigError(f"{n(name)}: expected one of {', '.join(allowed)}, got {quote(getattr(self, name))}")
        if not isinstance(self.delimiter, str) or len(self.delimiter) != 1:
            raise ConfigError(f"{n('delimiter')}: expected one character, got {quote(self.delimiter)}")
        for name in ("classes", "contexts", "drop_labels"):
            value = getattr(self, name)
            if value is not None and (len(set(value)) != len(value) or not all(isinstance(v, str) for v in value)):
                raise ConfigError(f"{n(name)}: expected a list of distinct strings, got {quote(value)}")
        if self.classes is not None and not self.classes:
            raise ConfigError(f"{n('classes')}: expected a non-empty list")
        if self.contexts is not None and self.context is None:
            raise ConfigError(f"{n('contexts')}: lists context values but no context column is given")

    def recorded(self) -> dict[str, Any]:
        """The settings as the manifest records them (``params``), without where they came from."""
        return {k: v for k, v in vars(self).items() if k not in ("key", "given")}

    @property
    def columns(self) -> list[str]:
        return [self.user, self.time, self.label, *([self.context] if self.context else []), *self.features]


def _text(key: str, value: Any) -> None:
    if not isinstance(value, str) or not value:
        raise ConfigError(f"{key}: expected a non-empty string, got {quote(value)}")


_LISTS = ("features", "classes", "contexts", "drop_labels")


def import_params(values: Mapping[str, Any], key: str = "imports", **overrides: Any) -> ImportParams:
    """``values`` (a params section) with the non-None ``overrides`` (the command line's: messages
    name them by their option, ImportParams.name) on top, checked."""
    if not isinstance(values, Mapping):
        raise ConfigError(f"{key}: expected a mapping, got {quote(values)}")
    allowed = set(ImportParams.__dataclass_fields__) - {"key", "given"}
    for k in values:
        if k not in allowed:
            raise ConfigError(f"{key}.{k}: unknown key (expected {', '.join(sorted(allowed))})")
    given = {k: v for k, v in overrides.items() if v is not None}
    merged = {**values, **given}
    for k in ("source", "features", "window"):
        if k not in merged:
            raise ConfigError(f"{key}.{k}: missing")
    for k in _LISTS:
        v = merged.get(k)
        if v is not None:
            if not isinstance(v, (list, tuple)):
                raise ConfigError(f"{key}.{k}: expected a list, got {quote(v)}")
            merged[k] = tuple(str(i) if k != "features" and isinstance(i, (int, float)) and not isinstance(i, bool)
                              else i for i in v)
    return ImportParams(**merged, key=key, given=frozenset(given))


# ---------------------------------------------------------------- reading tables in chunks
@dataclass(frozen=True)
class Chunk:
    """Rows ``first`` .. of one input file, every wanted column as text (None = missing cell)."""

    file: Path
    first: int  # 1-based row number of the chunk's first data row
    frame: pd.DataFrame
    header: tuple[str, ...] | None = None  # a CSV's header row (a short row's missing fields read as '')
    delimiter: str = ","


def input_files(p: ImportParams) -> list[tuple[Path, str]]:
    """(file, format) of a file source, or of every supported file of a folder (sorted by name)."""
    src = Path(p.source)
    if src.is_dir():
        files = sorted(f for f in src.iterdir() if f.is_file() and f.suffix.lower() in SUFFIXES
                       and (p.format == "auto" or SUFFIXES[f.suffix.lower()] == p.format))
        if not files:
            raise DataError(f"{src}: no {' / '.join(SUFFIXES) if p.format == 'auto' else p.format} files in the folder")
        return [(f, SUFFIXES[f.suffix.lower()]) for f in files]
    check_input(src, f"input file or folder not found ({p.name('source')})")
    fmt = p.format if p.format != "auto" else SUFFIXES.get(src.suffix.lower())
    if fmt is None:
        raise DataError(f"{src}: unknown file type {quote(src.suffix)}; set {p.key}.format to csv, parquet or npz")
    return [(src, fmt)]


def _missing_columns(file: Path, have: list[str], want: list[str], hint: str = "") -> None:
    """A wanted column absent, or named twice in the header (which one would be read?): DataError."""
    if len(have) > MAX_COLUMNS:
        raise DataError(f"{file}: {len(have)} columns, over {MAX_COLUMNS}; expected the columns of a table")
    missing = [c for c in want if c not in have]
    if missing:
        listed = ", ".join(map(str, have))
        listed = listed if len(listed) <= 120 else listed[:120] + f"... ({len(have)} in all)"
        raise DataError(f"{file}: column {quote(missing[0], QUOTED)} not found (columns: {listed})" + hint)
    twice = [c for c in want if have.count(c) > 1]
    if twice:
        raise DataError(f"{file}: column {quote(twice[0])} appears {have.count(twice[0])} times in the header")


def _not_utf8(file: Path) -> DataError:
    """The first line of ``file`` that is not UTF-8, as one line (pandas names only a position
    inside its read buffer)."""
    with open(file, "rb") as f:
        for n, raw in enumerate(f, 1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                return DataError(f"{file}: line {n}: not UTF-8 text (byte 0x{raw[exc.start]:02x}); "
                                 "save the file as UTF-8")
    return DataError(f"{file}: not UTF-8 text; save the file as UTF-8")


def _delimiter_hint(header: list[str], p: ImportParams) -> str:
    """A header read as one column that holds another common delimiter: name it."""
    found = [d for d in (";", "\t", ",", "|") if d != p.delimiter and len(header) == 1 and d in str(header[0])]
    return (f"; the header is one column: is the delimiter {quote(found[0])}? set {p.key}.delimiter"
            if found else "")


def _csv_header(file: Path, p: ImportParams) -> list[str]:
    """The header row of a CSV, read from at most MAX_HEADER_BYTES bytes (a header of a million
    names, or a file without a newline, is refused before it is parsed) and at most MAX_COLUMNS
    names. Blank lines before it are skipped, as pandas does; a UTF-8 byte order mark is dropped."""
    with open(file, "rb") as f:
        raw = f.read(MAX_HEADER_BYTES + 1)
    start = len(raw) - len(raw.lstrip(b"\r\n"))
    end = raw.find(b"\n", start)
    if end < 0:
        if len(raw) > MAX_HEADER_BYTES:
            raise DataError(f"{file}: the header (line 1) is longer than {MAX_HEADER_BYTES} bytes; expected a "
                            "line of column names")
        end = len(raw)
    if not raw[start:end].strip():
        raise DataError(f"{file}: the file is empty (expected a header row, then one row per sample)")
    try:
        text = raw[start:end].rstrip(b"\r").decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError:
        raise _not_utf8(file) from None
    if text.count(p.delimiter) >= MAX_COLUMNS:
        raise DataError(f"{file}: the header has {text.count(p.delimiter) + 1} columns, over {MAX_COLUMNS}; "
                        "expected a line of column names")
    try:
        return next(csv.reader([text], delimiter=p.delimiter, strict=True), [])
    except csv.Error as exc:
        raise DataError(f"{file}: cannot read the CSV header ({brief(exc)})") from None


def _csv_chunks(file: Path, p: ImportParams) -> Iterator[Chunk]:
    import pandas as pd  # noqa: PLC0415 (see the module imports)

    # The header row read as text: pandas would rename a repeated name (a, a.1), hiding the repeat.
    header = _csv_header(file, p)
    _missing_columns(file, header, p.columns, _delimiter_hint(header, p))
    first = 1
    rows = max(1, min(p.chunk_rows, CHUNK_CELLS // max(len(header), 1)))
    try:
        # No usecols: with it pandas silently drops the fields of a row longer than the header, so a
        # decimal comma ("0,6") would shift that row's values; without it such a row is an error.
        reader = pd.read_csv(file, sep=p.delimiter, dtype=str, keep_default_na=False,
                             chunksize=rows, engine="c", quoting=csv.QUOTE_MINIMAL)
        for frame in reader:
            yield Chunk(file, first, frame[p.columns], tuple(header), p.delimiter)
            first += len(frame)
    except UnicodeDecodeError:
        raise _not_utf8(file) from None
    except (ValueError, pd.errors.ParserError, OverflowError) as exc:
        raise DataError(f"{file}: row {first} or after (line {first + 1}+): cannot parse ({brief(exc, 120)})") from None


def _parquet_chunks(file: Path, p: ImportParams) -> Iterator[Chunk]:
    try:
        import pyarrow.parquet as pq  # noqa: PLC0415 - only Parquet inputs need it
    except ModuleNotFoundError:
        raise ConfigError(f"{file}: reading Parquet needs pyarrow (pip install 'esnfed[parquet]')") from None
    try:
        pf = pq.ParquetFile(file)
        _missing_columns(file, pf.schema_arrow.names, p.columns)
        _parquet_bounds(file, pf, p.columns)
        first = 1
        for batch in pf.iter_batches(batch_size=p.chunk_rows, columns=p.columns):
            frame = batch.to_pandas()
            yield Chunk(file, first, frame.astype(object).where(frame.notna(), ""))
            first += len(frame)
    except (OSError, ValueError) as exc:  # pyarrow.ArrowInvalid is a ValueError
        raise DataError(f"{file}: cannot read as Parquet ({brief(exc)})") from None


def _parquet_bounds(file: Path, pf: Any, columns: list[str]) -> None:
    """Refuse a Parquet file whose declared rows or inflated pages exceed MAX_EXPANSION times its
    size (plus SLACK_BYTES): run-length and dictionary encodings hold millions of equal values in a
    few bytes, and every row read costs 8 bytes per column in memory and in the spill."""
    size = file.stat().st_size
    budget = MAX_EXPANSION * size + SLACK_BYTES
    meta = pf.metadata
    wanted = {pf.schema_arrow.get_field_index(c) for c in columns}
    inflated = sum(meta.row_group(g).column(j).total_uncompressed_size
                   for g in range(meta.num_row_groups) for j in wanted)
    rows_bytes = meta.num_rows * len(columns) * 8
    if max(inflated, rows_bytes) > budget:
        raise DataError(f"{file}: declares {meta.num_rows} rows ({rows_bytes} bytes as numbers, {inflated} bytes "
                        f"of pages) in a file of {size} bytes, beyond {MAX_EXPANSION} times its size (a "
                        "decompression bomb?)")


def _npz_chunks(file: Path, p: ImportParams) -> Iterator[Chunk]:
    """An .npz of equal-length 1-D arrays named like the columns (each array is read whole)."""
    import pandas as pd  # noqa: PLC0415 (see the module imports)

    _missing_columns(file, npz_names(file), p.columns)
    arrays = read_npz(file, p.columns)  # never unpickled; memory bounded by the file's size
    n = None
    for c, a in arrays.items():
        if a.ndim != 1 or (n is not None and a.size != n):
            raise DataError(f"{file}: array {quote(c)} must be 1-D with one value per row "
                            f"(shape {a.shape}, expected ({n if n is not None else 'rows'},))")
        n = a.size
    for start in range(0, n or 0, p.chunk_rows):
        frame = pd.DataFrame({c: a[start:start + p.chunk_rows] for c, a in arrays.items()})
        yield Chunk(file, start + 1, frame)  # numbers stay numbers; _texts() reads the rest as text


READERS: dict[str, Callable[[Path, ImportParams], Iterator[Chunk]]] = {
    "csv": _csv_chunks, "parquet": _parquet_chunks, "npz": _npz_chunks}


def _bad(chunk: Chunk, i: int, column: str, problem: str) -> DataError:
    row = chunk.first + i
    short = _short_row(chunk, row)
    if short is not None:
        return short
    line = f" (line {row + 1})" if chunk.file.suffix.lower() == ".csv" else ""
    return DataError(f"{chunk.file}: row {row}{line}, column {quote(column)}: {problem}")


def _short_row(chunk: Chunk, row: int) -> DataError | None:
    """A CSV row with fewer fields than the header (a file cut short, say): pandas reads its
    missing fields as empty cells, so a bad cell there names the row's field count instead. The
    file is read again up to the row (csv.reader, pandas' quoting; blank lines skipped as pandas
    does): only on the way to an error."""
    if chunk.header is None:
        return None
    try:
        return _count_fields(chunk, row)
    except csv.Error:  # a field over csv's limit: no count, the caller's message stands
        return None


def _count_fields(chunk: Chunk, row: int) -> DataError | None:
    assert chunk.header is not None
    with open(chunk.file, newline="", encoding="utf-8", errors="replace") as f:
        reader = csv.reader(f, delimiter=chunk.delimiter)
        records = (r for r in reader if r)
        next(records, None)  # the header
        for n, record in enumerate(records, 1):
            if n == row:
                if len(record) >= len(chunk.header):
                    return None
                return DataError(f"{chunk.file}: row {row} (line {reader.line_num}) has {len(record)} field"
                                 f"{'' if len(record) == 1 else 's'}, expected {len(chunk.header)} as the header "
                                 f"(is the file cut short?)")
    return None


# A feature is stored as float32 (docs/data-contract.md): a larger magnitude cannot be represented,
# and squaring it in the float64 z-score would overflow.
FEATURE_LIMIT = float(np.finfo(np.float32).max)


def _numbers(chunk: Chunk, column: str, limit: float | None = None, missing: bool = False) -> np.ndarray:
    """The column as float64; one DataError naming the first row that is not a finite number, or
    (``limit``) whose magnitude exceeds it. ``missing``: a missing value (an empty cell, NaN) is NaN,
    not an error (infinity and text still are)."""
    import pandas as pd  # noqa: PLC0415 (see the module imports)

    raw = chunk.frame[column]
    kind = getattr(raw.dtype, "kind", "O")
    if kind in "cmM":  # complex: the imaginary part would be dropped; dates: in which unit?
        what = "complex numbers" if kind == "c" else "dates or durations (store times as numbers in time_unit)"
        raise _bad(chunk, 0, column, f"the column holds {what}, dtype {raw.dtype}; expected real numbers")
    num = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(num)
    if missing and bad.any():
        text = raw.astype(str).str.strip().str.lower()
        bad &= ~(raw.isna() | text.isin(("", "nan"))).to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise _bad(chunk, i, column, f"{quote(str(raw.iloc[i]), QUOTED)} is not a finite number")
    if limit is not None and (big := np.abs(num) > limit).any():
        i = int(np.flatnonzero(big)[0])
        raise _bad(chunk, i, column, f"{quote(str(raw.iloc[i]), QUOTED)} is beyond float32's range "
                   f"(magnitude at most {limit:.4g}): features are stored as float32")
    return num


def _texts(chunk: Chunk, column: str) -> np.ndarray:
    col = chunk.frame[column]
    # a missing value (NaN of a float or text column from .npz or Parquet) is an empty cell, not "nan"
    raw = col.astype(str).where(col.notna(), "").str.strip().to_numpy(dtype=object)
    empty = raw == ""
    if empty.any():
        raise _bad(chunk, int(np.flatnonzero(empty)[0]), column, "empty cell")
    return raw


def _long_fields(chunk: Chunk) -> None:
    """A text cell over MAX_FIELD_CHARS characters (a lost quote or newline joins lines into one
    field): one error naming its row and column, before it is parsed or quoted."""
    for column in chunk.frame.columns:
        col = chunk.frame[column]
        if getattr(col.dtype, "kind", "O") not in "OSU":
            continue
        lengths = col.map(lambda v: len(v) if isinstance(v, (str, bytes)) else 0).to_numpy(dtype=np.int64)
        if lengths.size and lengths.max() > MAX_FIELD_CHARS:
            i = int(np.argmax(lengths > MAX_FIELD_CHARS))
            raise _bad(chunk, i, str(column), f"a field of {lengths[i]} characters, over {MAX_FIELD_CHARS} (a "
                       "quote or a line break lost?)")


# ---------------------------------------------------------------- spilling rows per user
class Spill:
    """Rows of every chunk appended to one scratch file (float64: time, label code, context code,
    features), each chunk's rows grouped by user, with per user the (first row, rows) pieces it
    holds there; the label and context values coded in first-seen order. One file and one write
    per chunk, not a file per user: 50,000 users cost 50,000 index entries, not 50,000 files
    opened once per chunk (and the grouping is a sort, not a scan of the chunk per user)."""

    def __init__(self, folder: Path, p: ImportParams) -> None:
        self.p = p
        self.width = 3 + len(p.features)
        self.path = folder / "rows.bin"
        self.path.touch()
        self.written = 0  # rows in the scratch file
        self.pieces: dict[str, list[tuple[int, int]]] = {}
        self.sources: dict[str, set[str]] = {}
        self.labels: dict[str, int] = {l: i for i, l in enumerate(p.classes)} if p.classes else {}
        self.contexts: dict[str, int] = {c: i for i, c in enumerate(p.contexts)} if p.contexts else {}
        self.seen_labels: set[int] = set()  # label codes of the rows kept (``classes`` may list more)
        self.seen_contexts: set[int] = set()  # context codes likewise (``contexts`` may list more)

    def _codes(self, chunk: Chunk, column: str, values: np.ndarray, rows: np.ndarray,
               codes: dict[str, int], fixed: tuple[str, ...] | None, what: str) -> np.ndarray:
        """Codes of ``values`` (the chunk's rows ``rows``); a value outside a fixed list is an
        error, and so is the value past MAX_CODES (int8), at the first row holding it."""
        uniq, first, inverse = np.unique(values, return_index=True, return_inverse=True)
        mapped = np.empty(uniq.size, dtype=np.float64)
        for j in np.argsort(first, kind="stable"):  # in row order: an error names the earliest row
            u = uniq[j]
            if u not in codes:
                i = int(rows[first[j]])
                if fixed is not None:
                    raise _bad(chunk, i, column, f"{quote(u, QUOTED)} is not among {self.p.name(what)} "
                               f"({_listed(list(fixed), 10)})")
                if len(codes) >= MAX_CODES:
                    raise _bad(chunk, i, column, f"{quote(u, QUOTED)} is value {len(codes) + 1} of the column: "
                               f"the contract stores {what} as int8 (at most {MAX_CODES})")
                codes[u] = len(codes)
            mapped[j] = codes[u]
        return mapped[inverse]

    def _users(self, chunk: Chunk) -> np.ndarray:
        """The chunk's user column, each value checked as a file name: plain, at most
        MAX_USER_CHARS characters, and no more than MAX_USERS users in all."""
        users = _texts(chunk, self.p.user)
        lengths = np.fromiter((len(u) for u in users), dtype=np.int64, count=users.size)
        for i in np.flatnonzero((lengths > MAX_USER_CHARS) | ~np.fromiter(
                (bool(_PLAIN.fullmatch(u)) for u in users), dtype=bool, count=users.size))[:1]:
            u = users[i]
            problem = (f"a user id of {len(u)} characters (at most {MAX_USER_CHARS}: it becomes a file name)"
                       if len(u) > MAX_USER_CHARS else
                       f"user {quote(u, QUOTED)} is not a plain name (letters, digits, _ or -): it becomes a file name")
            raise _bad(chunk, int(i), self.p.user, problem)
        if len(self.pieces) + users.size > MAX_USERS:  # the exact count only when it may be over
            new = [u for u in dict.fromkeys(users.tolist()) if u not in self.pieces]
            if len(self.pieces) + len(new) > MAX_USERS:
                u = new[MAX_USERS - len(self.pieces)]
                raise _bad(chunk, int(np.flatnonzero(users == u)[0]), self.p.user,
                           f"user {quote(u, QUOTED)} is user {MAX_USERS + 1}: at most {MAX_USERS} users are "
                           "imported (each becomes a file); is it the right column?")
        return users

    def add(self, chunk: Chunk) -> None:
        p = self.p
        _long_fields(chunk)
        users = self._users(chunk)
        labels = _texts(chunk, p.label)
        time = _numbers(chunk, p.time) * TIME_UNITS[p.time_unit]
        feats = np.stack([_numbers(chunk, f, FEATURE_LIMIT, p.missing != "refuse") for f in p.features], axis=1)
        ctx_values = _texts(chunk, p.context) if p.context else None
        rows = np.flatnonzero(~np.isin(labels, list(p.drop_labels))) if p.drop_labels else np.arange(labels.size)
        if not rows.size:
            return
        label = self._codes(chunk, p.label, labels[rows], rows, self.labels, p.classes, "classes")
        self.seen_labels.update(np.unique(label).astype(np.int64).tolist())
        ctx = (self._codes(chunk, p.context, ctx_values[rows], rows, self.contexts, p.contexts, "contexts")
               if p.context else np.zeros(rows.size))
        self.seen_contexts.update(np.unique(ctx).astype(np.int64).tolist())
        names, code = np.unique(users[rows], return_inverse=True)
        order = np.argsort(code, kind="stable")  # grouped by user, each user's rows in file order
        table = np.column_stack([time[rows], label, ctx, feats[rows]])[order]
        with open(self.path, "ab") as f:
            f.write(np.ascontiguousarray(table).tobytes())
        counts = np.bincount(code, minlength=names.size)
        starts = self.written + np.concatenate([[0], np.cumsum(counts)[:-1]])
        source = str(chunk.file)
        for u, start, n in zip(names.tolist(), starts.tolist(), counts.tolist()):
            self.pieces.setdefault(u, []).append((start, n))
            self.sources.setdefault(u, set()).add(source)
        self.written += table.shape[0]

    def rows(self, user: str, class_order: np.ndarray, context_order: np.ndarray, f: Any) -> Rows:
        """The user's rows (read from ``f``, the scratch file open for reading), with label and
        context codes renumbered to the final order."""
        parts = []
        for start, n in self.pieces[user]:
            f.seek(start * self.width * 8)
            parts.append(np.fromfile(f, dtype=np.float64, count=n * self.width))
        table = (parts[0] if len(parts) == 1 else np.concatenate(parts)).reshape(-1, self.width)
        return Rows(table[:, 0], class_order[table[:, 1].astype(np.int64)],
                    context_order[table[:, 2].astype(np.int64)], table[:, 3:])


def _order(codes: dict[str, int], fixed: tuple[str, ...] | None) -> tuple[list[str], np.ndarray]:
    """Final names (the fixed list, else sorted values) and code -> final index."""
    names = list(fixed) if fixed is not None else sorted(codes, key=_natural)
    remap = np.empty(max(len(codes), 1), dtype=np.int64)
    for value, code in codes.items():
        remap[code] = names.index(value)
    return names, remap


def _natural(text: str) -> list:
    """Sort key putting P2 before P10."""
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", text) if t]


def run(dataset: str, p: ImportParams, out_root: str | Path | None = None,
        on_user: Callable[[str, UserData], None] | None = None,
        on_read: Callable[[Path, int], None] | None = None, warn: Callable[[str], None] | None = None) -> dict:
    """Import ``p.source`` into ``<out_root>/<dataset>`` (default data/processed); returns the manifest.
    ``on_read(file, rows)`` is called after each chunk read (rows read of that file so far),
    ``on_user(user, data)`` after each user is written, ``warn(line)`` for what the import did
    but the user may not expect (sampling_warnings, missing_warnings, gap_warnings, short_warnings,
    empty_class_warnings)."""
    check_own_name("--dataset", dataset)  # the rule of params.yaml imports.<name> (and never a path)
    files = input_files(p)
    out = Path(out_root if out_root is not None else DEFAULT_OUT) / dataset
    # The lock from the first read: the temporaries of this dataset that a killed run left (its
    # scratch folder, a half-written output) are reclaimed under it, and a second import of the
    # same dataset stops before reading instead of after.
    with made_folder(out.parent), output_lock(out):
        clean_stale_tmp(out.parent, prefix=f".{dataset}.")
        manifest, lines = _imported(dataset, p, files, out, on_user, on_read)
    for line in lines:
        if warn is not None:
            warn(line)
    return manifest


def _imported(dataset: str, p: ImportParams, files: list[tuple[Path, str]], out: Path,
              on_user: Callable[[str, UserData], None] | None, on_read: Callable[[Path, int], None] | None
              ) -> tuple[dict, list[str]]:
    """run() under the output's lock: (the manifest written, the warning lines)."""
    with scratch_folder(out.with_name(f"{dataset}.import")) as scratch:
        spill = Spill(scratch, p)
        for file, fmt in files:
            for chunk in READERS[fmt](file, p):
                spill.add(chunk)
                if on_read is not None:
                    on_read(file, chunk.first - 1 + len(chunk.frame))
        if not spill.pieces:
            raise DataError(f"{p.source}: no rows to import")
        if len(spill.seen_labels) < 2:  # every step the same class: any classifier scores 100 %
            only = [name for name, code in spill.labels.items() if code in spill.seen_labels]
            raise DataError(f"{p.source}: column {quote(p.label)} holds one class only ({', '.join(only)})"
                            + _dropped(p) + "; classification needs at least 2")
        _check_listed(spill, p)
        classes, class_order = _order(spill.labels, p.classes)
        contexts, context_order = _order(spill.contexts, p.contexts) if p.context else (["all"], np.zeros(1, np.int64))
        for what, names in (("classes", classes), ("contexts", contexts)):
            if len(names) > 127:
                raise DataError(f"{p.source}: {len(names)} {what}; the contract stores them as int8 (at most 127)")

        sampling: dict[str, tuple[int, float, float]] = {}  # per user; memory: one user's rows (module doc)
        cuts: dict[str, Cuts] = {}
        short: list[str] = []  # users without a whole window, skipped

        def users():
            with open(spill.path, "rb") as f:
                yield from each_user(f)
            if len(short) == len(spill.pieces):
                raise DataError(no_user_left(cuts, p))
            if p.context and (empty := [c for c, n in zip(contexts, windows) if n == 0]):
                raise DataError(f"{p.source}: context {quote(empty[0], QUOTED)} of {p.name('context')} has rows but "
                                f"no whole window in any user (too few rows in one run); drop its rows or shorten "
                                f"{p.name('window')}")

        def each_user(f):
            for user in sorted(spill.pieces, key=_natural):
                rows = spill.rows(user, class_order, context_order, f)
                sampling[user] = user_sampling(rows.time)
                try:
                    data, cuts[user] = user_windows(rows, p.window, p.rate, p.max_gap, p.missing)
                except DataError as exc:
                    raise DataError(f"{p.source}: user {quote(user)}: {exc}") from None
                if data is None:
                    short.append(user)
                    continue
                windows[:] += np.bincount(data.context.astype(np.int64), minlength=len(contexts))
                yield user, data, {"sources": sorted(spill.sources[user])}

        windows = np.zeros(len(contexts), dtype=np.int64)  # of each context, over the users
        described = {"feature_names": list(p.features), "classes": classes, "context_names": contexts}
        root = Path(p.source) if Path(p.source).is_dir() else Path(p.source).parent
        settings = {k: (list(v) if isinstance(v, tuple) else v) for k, v in p.recorded().items()}
        extra = {"params": settings, "source": "import",
                 "label_map": {name: i for i, name in enumerate(classes)},
                 "context_map": {name: i for i, name in enumerate(contexts)} if p.context else None}
        manifest = write_processed(dataset, out, described, users, root, extra, on_user, locked=True)
    return manifest, [*sampling_warnings(sampling, p), *missing_warnings(cuts, p), *gap_warnings(cuts, p),
                      *short_warnings(short, cuts, p), *empty_class_warnings(manifest, p)]


def _dropped(p: ImportParams) -> str:
    return " once drop_labels are dropped" if p.drop_labels else ""


def _check_listed(spill: Spill, p: ImportParams) -> None:
    """A value of ``classes`` or ``contexts`` without a row is a typo far more often than a wish for
    an empty one (a class no user can learn or be scored on; a context every continual method
    would fail on, trials later): one error naming them."""
    for what, listed, codes, seen, found_what in (("classes", p.classes, spill.labels, spill.seen_labels, "labels"),
                                                  ("contexts", p.contexts, spill.contexts, spill.seen_contexts,
                                                   "contexts")):
        if listed is None:
            continue
        absent = [c for c in listed if codes[c] not in seen]
        if absent:
            found = [c for c in listed if c not in absent]
            raise DataError(f"{p.name(what)}: {', '.join(map(quote, absent))} {'has' if len(absent) == 1 else 'have'} "
                            f"no rows in {p.source}{_dropped(p)} (typo? the {found_what} found: {', '.join(found)})")


def _seconds(window: int, rate: float | None) -> str:
    return f"{window} steps at {rate:g} Hz ({window / rate:g} s)" if rate else f"{window} rows"


def no_user_left(cuts: Mapping[str, Cuts], p: ImportParams) -> str:
    """The error when no user has a whole window; a wrong time unit is the usual cause (seconds
    read as ms or us squeeze a recording into a blink; the reverse meets MAX_UPSAMPLE with a rate)."""
    user, longest = max(((u, c.longest) for u, c in cuts.items()), key=lambda t: t[1])
    unit = {"s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds"}[p.time_unit]
    return (f"{p.source}: no user has a whole window of {_seconds(p.window, p.rate)} in a run of one context "
            f"without a gap (longest: {longest:.3g} s, user {quote(user, QUOTED)}); is {p.name('time_unit')} right "
            f"(time read in {unit}{'' if 'time_unit' in p.given else ': --time-unit'})? else shorten "
            f"{p.name('window')}"
            + (f" or raise {p.name('max_gap')} (gaps cut the runs)" if any(c.gaps for c in cuts.values()) else ""))


def _listed(items: list[str], most: int = 5, sep: str = ", ") -> str:
    return sep.join(items[:most]) + (f"{sep}..." if len(items) > most else "")


def short_warnings(short: list[str], cuts: Mapping[str, Cuts], p: ImportParams) -> list[str]:
    """The users skipped for want of a whole window (the import goes on with the others)."""
    if not short:
        return []
    listed = [f"{u}: {cuts[u].span:.4g} s recorded, the longest run {cuts[u].longest:.4g} s" for u in short]
    return [f"{p.source}: {len(short)} user{'s' if len(short) > 1 else ''} skipped, without a whole window of "
            f"{_seconds(p.window, p.rate)} in a run of one context without a gap ({_listed(listed, sep='; ')})"]


def _count(n: int, what: str) -> str:
    return f"{n} {what}{'s' if n != 1 else ''}"


def missing_warnings(cuts: Mapping[str, Cuts], p: ImportParams) -> list[str]:
    """Missing feature values imported (``missing``: interpolate or drop): how many values were
    interpolated and rows dropped, in all and per user."""
    hit = {u: c for u, c in cuts.items() if c.interpolated or c.dropped}
    if not hit:
        return []
    values, rows = sum(c.interpolated for c in hit.values()), sum(c.dropped for c in hit.values())
    if p.missing == "drop":
        what = (f"{_count(rows, 'row')} with a missing feature value dropped ({p.key}.missing = drop: where the rows "
                "left lie over the gap threshold (max_gap) apart, the recording is cut as at a gap in time)")
        listed = [f"{u}: {_count(c.dropped, 'row')}" for u, c in hit.items()]
    else:
        what = (f"{_count(values, 'missing feature value')} interpolated linearly in time, {_count(rows, 'row')} "
                f"dropped ({p.key}.missing = interpolate: never across a run of missing values over the gap "
                "threshold (max_gap), which cuts the recording as a gap in time does, nor at a recording's start "
                "or end)")
        listed = [f"{u}: {_count(c.interpolated, 'value')} interpolated, {_count(c.dropped, 'row')} dropped"
                  for u, c in hit.items()]
    return [f"{p.source}: {what} ({_listed(listed, sep='; ')})"]


def gap_warnings(cuts: Mapping[str, Cuts], p: ImportParams) -> list[str]:
    """Gaps inside a context: each cut the recording (no window spans it, nothing is filled in)."""
    gapped = {u: c for u, c in cuts.items() if c.gaps}
    if not gapped:
        return []
    listed = [f"{u}: {c.gaps} gap{'s' if c.gaps > 1 else ''}, {c.gap_seconds:.4g} s"
              + (f", {c.lost_windows} window{'s' if c.lost_windows > 1 else ''} lost at the cuts" if c.lost_windows
                 else "") for u, c in gapped.items()]
    limits = sorted({c.max_gap for c in gapped.values()})
    limit = (f"over {p.name('max_gap')} = {p.max_gap:g} s" if p.max_gap is not None else
             f"over {limits[0]:.3g} s" + (f" to {limits[-1]:.3g} s per user" if len(limits) > 1 else "")
             + f", the default max_gap; set {p.key}.max_gap or --max-gap")
    total = sum(c.gaps for c in gapped.values())
    return [f"{p.source}: {total} gap{'s' if total > 1 else ''} in time inside a context ({limit}) not filled in: "
            f"the recording is cut at each, no window spans one, the time in them is not imported "
            f"({_listed(listed, sep='; ')})"]


def empty_class_warnings(manifest: Mapping[str, Any], p: ImportParams) -> list[str]:
    """A class with rows but no step in any window (its rows all fell in skipped users or the dropped tails of segments)."""
    counts = np.sum([u["class_counts"] for u in manifest["users"].values()], axis=0)
    empty = [c for c, n in zip(manifest["classes"], counts) if n == 0]
    if not empty:
        return []
    return [f"{p.source}: class{'es' if len(empty) > 1 else ''} {', '.join(map(quote, empty))} of {p.name('label')} "
            f"{'have' if len(empty) > 1 else 'has'} rows but no step in any window (they all fell in skipped "
            "users or the dropped tails of segments): no user can learn or be scored on it"]


# Sampling intervals further apart than this ratio (10th to 90th percentile over the users) are
# "mixed": without ``rate``, a window of ``window`` rows then spans different durations.
MIXED_RATIO = 1.5


def user_sampling(time: np.ndarray) -> tuple[int, float, float]:
    """One user's rows at a time already seen, and the 10th and 90th percentile of its sampling
    intervals (nan for fewer than two distinct times)."""
    distinct = np.unique(time)
    steps = np.diff(distinct)
    lo, hi = np.percentile(steps, [10, 90]) if steps.size else (np.nan, np.nan)
    return time.size - distinct.size, float(lo), float(hi)


def sampling_warnings(sampling: Mapping[str, tuple[int, float, float]], p: ImportParams) -> list[str]:
    """Lines on what data-contract §5 does silently: rows at a time the user already has are
    dropped (the first is kept: e.g. a user's rows in two files), and without ``rate`` mixed
    sampling intervals (within or across users, user_sampling) are windowed as they are."""
    out = []
    repeated = {u: n for u, (n, _, _) in sampling.items() if n}
    if repeated:
        listed = _listed([f"{u}: {n} row{'s' if n > 1 else ''}" for u, n in repeated.items()])
        out.append(f"{p.source}: rows at a time the user already has were dropped, the first kept ({listed}); "
                   f"is a user in two files, or {p.name('user')} the wrong column?")
    lows = [lo for _, lo, _ in sampling.values() if lo == lo]
    highs = [hi for _, _, hi in sampling.values() if hi == hi]
    if p.rate is None and lows and min(lows) > 0 and max(highs) / min(lows) > MIXED_RATIO:
        out.append(f"{p.source}: sampling intervals vary from {min(lows):.3g} s to {max(highs):.3g} s (10th to 90th "
                   f"percentile per user) and no rate is set, so windows of {p.window} rows span different "
                   f"durations; set {p.key}.rate (--rate) to resample")
    return out
