"""Stage `import`: your own per-user labelled time series -> the processed-data contract
(data/processed/<dataset>/, docs/data-contract.md), like `preprocess` does for the papers' datasets;
with ``labelled: false`` (`--unlabelled`), new recordings without labels, for `esnfed predict` only.

Inputs: one CSV or Parquet file, or a folder of them, or a NumPy .npz of 1-D arrays named like the
columns, holding a row per sample with columns for the user, the time, the label, optionally the
context, and the features. Files are read in chunks of ``chunk_rows`` rows; each chunk's rows are
appended to a scratch file per user, so memory holds one chunk plus one user's rows, never the
whole input. Then each user is resampled, windowed and z-scored (esnfed_core/data/tabular.py) and
written through preprocess.write_processed (atomic: a failure leaves no partial output).
Bad input is one line naming the file, the row (1 = first data row; CSV line = row + 1) and the column.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from esnfed_core.data.processed import MANIFEST, MAX_USER_CHARS, UserData, load_manifest
from esnfed_core.data.import_options import TIME_UNITS
from esnfed_core.data.tabular import Cuts, Rows, user_windows
from esnfed_core.errors import DataError
from esnfed_core.quote import quote
from esnfed_stages.data._datasets import check_own_name
from esnfed_stages.data.preprocess import write_processed
from esnfed_stages.layout import PROCESSED_DIR as DEFAULT_OUT
from esnfed_stages._io import clean_stale_tmp, made_folder, output_lock, scratch_folder
from esnfed_stages.data.import_readers import (FEATURE_LIMIT, QUOTED, READERS, Chunk, bad_cell, cell_numbers, cell_texts,
                                               check_long_fields, input_files)
from esnfed_stages.params.imports import ImportParams

_PLAIN = re.compile(r"[A-Za-z0-9_-]+")  # a user name: it becomes a file name
# Bounds checked as the input is read (docs/data-contract.md §5, "Limits"): each is refused at the
# file, row or column that crosses it, before memory or the file system pay for it (the bounds of
# one file's header and fields: import_readers.py).
MAX_CODES = 127  # distinct classes, and contexts: the contract stores them as int8
MAX_USERS = 100_000  # each user becomes a file of the output folder


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
                    raise bad_cell(chunk, i, column, f"{quote(u, QUOTED)} is not among {self.p.name(what)} "
                               f"({_listed(list(fixed), 10)})")
                if len(codes) >= MAX_CODES:
                    raise bad_cell(chunk, i, column, f"{quote(u, QUOTED)} is value {len(codes) + 1} of the column: "
                               f"the contract stores {what} as int8 (at most {MAX_CODES})")
                codes[u] = len(codes)
            mapped[j] = codes[u]
        return mapped[inverse]

    def _users(self, chunk: Chunk) -> np.ndarray:
        """The chunk's user column, each value checked as a file name: plain, at most
        MAX_USER_CHARS characters, and no more than MAX_USERS users in all."""
        users = cell_texts(chunk, self.p.user)
        lengths = np.fromiter((len(u) for u in users), dtype=np.int64, count=users.size)
        for i in np.flatnonzero((lengths > MAX_USER_CHARS) | ~np.fromiter(
                (bool(_PLAIN.fullmatch(u)) for u in users), dtype=bool, count=users.size))[:1]:
            u = users[i]
            problem = (f"a user id of {len(u)} characters (at most {MAX_USER_CHARS}: it becomes a file name)"
                       if len(u) > MAX_USER_CHARS else
                       f"user {quote(u, QUOTED)} is not a plain name (letters, digits, _ or -): it becomes a file name")
            raise bad_cell(chunk, int(i), self.p.user, problem)
        if len(self.pieces) + users.size > MAX_USERS:  # the exact count only when it may be over
            new = [u for u in dict.fromkeys(users.tolist()) if u not in self.pieces]
            if len(self.pieces) + len(new) > MAX_USERS:
                u = new[MAX_USERS - len(self.pieces)]
                raise bad_cell(chunk, int(np.flatnonzero(users == u)[0]), self.p.user,
                           f"user {quote(u, QUOTED)} is user {MAX_USERS + 1}: at most {MAX_USERS} users are "
                           "imported (each becomes a file); is it the right column?")
        return users

    def add(self, chunk: Chunk) -> None:
        p = self.p
        check_long_fields(chunk)
        users = self._users(chunk)
        labels = cell_texts(chunk, p.label) if p.labelled else None
        time = cell_numbers(chunk, p.time) * TIME_UNITS[p.time_unit]
        feats = np.stack([cell_numbers(chunk, f, FEATURE_LIMIT, p.missing != "refuse") for f in p.features], axis=1)
        ctx_values = cell_texts(chunk, p.context) if p.context else None
        rows = np.flatnonzero(~np.isin(labels, list(p.drop_labels))) if p.drop_labels else np.arange(users.size)
        if not rows.size:
            return
        # unlabelled: every step class code 0 of no class (the manifest lists none, y holds 0)
        label = (self._codes(chunk, p.label, labels[rows], rows, self.labels, p.classes, "classes") if p.labelled
                 else np.zeros(rows.size))
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
        if not p.labelled and (out / MANIFEST).is_file() and load_manifest(out).get("labelled") is not False:
            raise DataError(f"{out}: holds labelled data; an unlabelled import does not replace it (give another "
                            "--out, e.g. data/new)")
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
        if p.labelled and len(spill.seen_labels) < 2:  # every step the same class: any classifier scores 100 %
            only = [name for name, code in spill.labels.items() if code in spill.seen_labels]
            raise DataError(f"{p.source}: column {quote(p.label)} holds one class only ({', '.join(only)})"
                            + _dropped(p) + "; classification needs at least 2")
        _check_listed(spill, p)
        classes, class_order = _order(spill.labels, p.classes) if p.labelled else ([], np.zeros(1, np.int64))
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
                 "context_map": {name: i for i, name in enumerate(contexts)} if p.context else None,
                 **({} if p.labelled else {"labelled": False})}
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
    if not manifest["classes"]:  # unlabelled
        return []
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
