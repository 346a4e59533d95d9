"""The select stage's search and its outcome as the later stages read them: the candidates and
seeds of a share's random search, the best trial, best.json read back and checked against
params.yaml (retrain, privacy, flower, the report), and the seeds a share is retrained with."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from esnfed_core.errors import DataError
from esnfed_core.method import Method
from esnfed_core.search import Dimension, derive_seed, sample_config
from esnfed_stages import provenance
from esnfed_stages._io import read_json
from esnfed_stages.params.experiment import BudgetSpec, ExperimentParams
from esnfed_stages.layout import TRIAL_FILE, best_path
from esnfed_stages.experiment.models import check_best_config


def trial_seed(exp: ExperimentParams, dataset: str, pct: str, index: int) -> int:
    """Seed of trial ``index``: the same for every method at that index (common random numbers)."""
    return derive_seed(exp.seed, "trial", dataset, pct, index)


def _trial_status(path: Path) -> Any:
    try:
        record = read_json(path)
    except DataError:
        return None
    return record.get("status") if isinstance(record, dict) else None


def _why_no_best(directory: Path, command: str, before: str | None) -> str:
    """Why a share has no best.json, and the select command that writes it: never run, stopped
    before every trial finished, or a trial failed (best.json is written only when none did)."""
    trials = sorted(p for p in directory.glob("trial-*.json") if TRIAL_FILE.match(p.name))
    failed = [p.name for p in trials if _trial_status(p) == "failed"]
    if failed:
        return (f"not found: select failed for {len(failed)} trial(s) ({', '.join(failed[:3])}"
                f"{', ...' if len(failed) > 3 else ''}: the error is in the file); rerun {command}")
    if trials:
        return f"not found: select did not finish ({len(trials)} trial file(s) written); rerun {command}"
    return f"not found: run {command}" + (f" before {before}" if before else " first")


def read_best(runs: Path, dataset: str, method: Method, pct: str, budget: BudgetSpec,
              before: str | None = None, settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """best.json of one share, selected under params.yaml's ``budget`` as it is now (its name and
    digest, :meth:`BudgetSpec.check`) and, where it records them, with ``settings`` (params.yaml's
    values by key: a heterogeneous method's, heterogeneity.record; provenance.check); otherwise one
    DataError naming it, why it is missing or stale, and the select command to run (``before``: the
    method that needs it)."""
    return check_best(best_path(runs, dataset, method.id, pct), dataset, method, pct, budget, before, settings)


def check_best(path: Path, dataset: str, method: Method, pct: str, budget: BudgetSpec | None,
               before: str | None = None, settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """best.json at ``path`` (one share's, :func:`read_best`; the report's under its --select-dir)
    read and checked as :func:`read_best` says (``budget`` None: params.yaml names none, as the
    report may read, nothing to check it against)."""
    command = f"`esnfed select --dataset {dataset} {method.cli_options} --pct {pct}`"
    missing = "file not found" if path.exists() or path.is_symlink() \
        else _why_no_best(path.parent, command, before)
    best = read_json(path, missing)
    if not isinstance(best, dict) or not isinstance(best.get("config"), dict):
        raise DataError(f"{path}: no 'config' object")
    if budget is not None:
        budget.check(path, best, "params_budget", "selected", dataset, method, command)
    provenance.check(path, best, settings or {}, command, verb="selected")
    if before is None or Method.parse(before).continual:
        check_best_config(path, method, best["config"])  # every key is reused (deep: pin_units checks units)
    return best


def search_trials(exp: ExperimentParams, dataset: str, method: Method, pct: str,
                  dims: list[Dimension]) -> tuple[list[dict[str, Any]], list[int]]:
    """The random search's candidates of one share: trial i's config drawn from ``dims`` and its
    seed (:func:`trial_seed`), for the budget's trials (the privacy stage's public configuration
    scores the same candidates on other users: esnfed_stages/studies/privacy_config.py)."""
    configs = [sample_config(dims, exp.seed, dataset, pct, i) for i in range(exp.n_trials(method))]
    return configs, [trial_seed(exp, dataset, pct, i) for i in range(len(configs))]


def best_of(records: list[dict[str, Any]]) -> dict[str, Any]:
    """The trial with the highest score; ties go to the lowest index (deterministic)."""
    return max(sorted(records, key=lambda r: r["index"]), key=lambda r: r["scores"]["score"])


def retrain_seed(exp: ExperimentParams, dataset: str, pct: str, k: int) -> int:
    return derive_seed(exp.seed, "retrain", dataset, pct, k)


def selected_config(runs: Path, dataset: str, method: str, pct: str, budget: BudgetSpec,
                    settings: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """best.json's config of one share, selected under params.yaml's ``budget`` as it is now and
    with ``settings`` (heterogeneity.record) where it records them (read_best: missing or
    stale -> one line naming the select command to run)."""
    return read_best(runs, dataset, Method.parse(method), pct, budget, settings=settings)["config"]
