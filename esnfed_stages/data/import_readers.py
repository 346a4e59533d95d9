"""Reading a user's own files for `esnfed import` in chunks (CSV, Parquet, .npz), each wanted
column as text, and parsing a chunk's cells: every bad cell, short row or oversized field is one
line naming the file, the row and the column (docs/data-contract.md §5, "Limits")."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator

import numpy as np

if TYPE_CHECKING:  # pandas is imported by the functions that read (pandas adds ~0.2 s to an import)
    import pandas as pd

from esnfed_core.data.npz import MAX_EXPANSION, SLACK_BYTES, npz_names, read_npz
from esnfed_core.data.paths import check_input
from esnfed_core.errors import ConfigError, DataError
from esnfed_core.quote import brief, quote
from esnfed_stages.params.imports import SUFFIXES, ImportParams

# Bounds checked as a file is read (docs/data-contract.md §5, "Limits"; the import stage checks
# the users and codes it collects, import_data.MAX_USERS and MAX_CODES).
MAX_COLUMNS = 10_000  # columns of a CSV header (names of a Parquet schema or an .npz)
MAX_HEADER_BYTES = 1 << 20  # bytes of a CSV's header line
MAX_FIELD_CHARS = 10_000  # characters of one field of a wanted column
# Cells (rows x header columns) of one chunk read from a CSV: a wide header reads fewer rows per
# chunk, so memory follows the input's size, not chunk_rows times the columns the header declares.
CHUNK_CELLS = 2_000_000
QUOTED = 40  # characters of a cell value an error quotes (the line stays short whatever the cell)

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
        yield Chunk(file, start + 1, frame)  # numbers stay numbers; cell_texts() reads the rest as text

READERS: dict[str, Callable[[Path, ImportParams], Iterator[Chunk]]] = {
    "csv": _csv_chunks, "parquet": _parquet_chunks, "npz": _npz_chunks}


def bad_cell(chunk: Chunk, i: int, column: str, problem: str) -> DataError:
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


def cell_numbers(chunk: Chunk, column: str, limit: float | None = None, missing: bool = False) -> np.ndarray:
    """The column as float64; one DataError naming the first row that is not a finite number, or
    (``limit``) whose magnitude exceeds it. ``missing``: a missing value (an empty cell, NaN) is NaN,
    not an error (infinity and text still are)."""
    import pandas as pd  # noqa: PLC0415 (see the module imports)

    raw = chunk.frame[column]
    kind = getattr(raw.dtype, "kind", "O")
    if kind in "cmM":  # complex: the imaginary part would be dropped; dates: in which unit?
        what = "complex numbers" if kind == "c" else "dates or durations (store times as numbers in time_unit)"
        raise bad_cell(chunk, 0, column, f"the column holds {what}, dtype {raw.dtype}; expected real numbers")
    num = pd.to_numeric(raw, errors="coerce").to_numpy(dtype=np.float64)
    bad = ~np.isfinite(num)
    if missing and bad.any():
        text = raw.astype(str).str.strip().str.lower()
        bad &= ~(raw.isna() | text.isin(("", "nan"))).to_numpy()
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise bad_cell(chunk, i, column, f"{quote(str(raw.iloc[i]), QUOTED)} is not a finite number")
    if limit is not None and (big := np.abs(num) > limit).any():
        i = int(np.flatnonzero(big)[0])
        raise bad_cell(chunk, i, column, f"{quote(str(raw.iloc[i]), QUOTED)} is beyond float32's range "
                   f"(magnitude at most {limit:.4g}): features are stored as float32")
    return num


def cell_texts(chunk: Chunk, column: str) -> np.ndarray:
    col = chunk.frame[column]
    # a missing value (NaN of a float or text column from .npz or Parquet) is an empty cell, not "nan"
    raw = col.astype(str).where(col.notna(), "").str.strip().to_numpy(dtype=object)
    empty = raw == ""
    if empty.any():
        raise bad_cell(chunk, int(np.flatnonzero(empty)[0]), column, "empty cell")
    return raw


def check_long_fields(chunk: Chunk) -> None:
    """A text cell over MAX_FIELD_CHARS characters (a lost quote or newline joins lines into one
    field): one error naming its row and column, before it is parsed or quoted."""
    for column in chunk.frame.columns:
        col = chunk.frame[column]
        if getattr(col.dtype, "kind", "O") not in "OSU":
            continue
        lengths = col.map(lambda v: len(v) if isinstance(v, (str, bytes)) else 0).to_numpy(dtype=np.int64)
        if lengths.size and lengths.max() > MAX_FIELD_CHARS:
            i = int(np.argmax(lengths > MAX_FIELD_CHARS))
            raise bad_cell(chunk, i, str(column), f"a field of {lengths[i]} characters, over {MAX_FIELD_CHARS} (a "
                       "quote or a line break lost?)")
