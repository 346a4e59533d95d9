"""The model selection's traffic for the communication table: each finished share's trial records
(runs/select/<dataset>/<method>/<pct>/trial-XXXX.json, esnfed_stages/experiment/select.py) read into
esnfed_core.communication.SelectionTrial, so the table totals what every trial sent at its own sizes.

A share counts once its selection finished (best.json written: every one of its ``n_trials``
trials succeeded); without best.json, or without any trial record beside it, it is unknown (None,
n/a). A trial record that is missing while others are there, unreadable, or lacks a field the
total needs is one DataError naming the file: never skipped.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from esnfed_core.errors import DataError
from esnfed_core.method import Method
from esnfed_core.quote import quote
from esnfed_core.communication import SelectionTrial, check_communication, counts_selection
from esnfed_core.validation import ParameterError
from esnfed_core.vocabulary import PCTS
from esnfed_stages._io import read_json
from esnfed_stages.layout import best_under
from esnfed_stages.layout import trial_path

Share = tuple[str, str, str]  # (dataset, method, pct)


def _positive(path: Path, key: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise DataError(f"{path}: {key}: expected a positive integer, got {quote(v)}")
    return v


def read_trial(path: Path, method: str) -> SelectionTrial:
    """One finished trial record of ``method``: its training bytes (``communication``), N (its
    ``selected_config.units``: a deep method's total) and, where its selection is totalled, the λ
    values it scored (``scores.per_lambda``); DataError naming ``path`` otherwise."""
    rec = read_json(path, "not found (best.json counts it)")
    if not isinstance(rec, dict):
        raise DataError(f"{path}: expected a trial record (an object), got {quote(rec)}")
    if rec.get("status") != "ok":
        raise DataError(f"{path}: status: expected \"ok\" (best.json is written once every trial succeeded), "
                        f"got {quote(rec.get('status'))}")
    comm = rec.get("communication")
    try:
        check_communication("communication", comm, True)
    except ParameterError as exc:
        raise DataError(f"{path}: {exc}") from None
    config = rec.get("selected_config")
    units = _positive(path, "selected_config.units", config.get("units") if isinstance(config, dict) else None)
    lambdas = None
    if counts_selection(method):
        scores = rec.get("scores")
        per = scores.get("per_lambda") if isinstance(scores, dict) else None
        if not isinstance(per, list) or not per:
            raise DataError(f"{path}: scores.per_lambda: expected the validation score of each λ scored, "
                            f"got {quote(per)}")
        lambdas = len(per)
    return SelectionTrial(comm["up_bytes"], comm["down_bytes"], units, comm["clients"], lambdas,
                          comm.get("readout_bias") is True)


def share_trials(select_dir: str | Path, dataset: str, method: str, pct: str) -> tuple[SelectionTrial, ...] | None:
    """The trials of one share's finished selection (``n_trials`` of its best.json), None where
    best.json is absent (the selection did not run or finish) or no trial record is beside it (a
    folder of best.json files alone): unknown. Some records but not all, or a damaged one: DataError
    naming the file and the select command that rewrites it."""
    best_file = best_under(select_dir, dataset, method, pct)
    if not best_file.exists() and not best_file.is_symlink():
        return None
    best = read_json(best_file)
    n = _positive(best_file, "n_trials", best.get("n_trials") if isinstance(best, dict) else None)
    paths = [trial_path(best_file.parent, i) for i in range(n)]
    if not any(p.exists() or p.is_symlink() for p in paths):
        return None
    try:
        return tuple(read_trial(p, method) for p in paths)
    except DataError as exc:
        raise DataError(f"{exc}; rerun `esnfed select --dataset {dataset} {Method.parse(method).cli_options} "
                        f"--pct {pct}`") from None


def load(select_dir: str | Path, pairs: Iterable[tuple[str, str]]) -> dict[Share, tuple[SelectionTrial, ...] | None]:
    """:func:`share_trials` of every share of the (dataset, method) ``pairs``; empty without
    ``select_dir`` (no selection to read: every share unknown)."""
    if not Path(select_dir).is_dir():
        return {}
    return {(ds, m, pct): share_trials(select_dir, ds, m, pct) for ds, m in pairs for pct in PCTS}

