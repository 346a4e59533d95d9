"""Stage `select`: model selection for one dataset and method, per training share: seeded random
search (stationary methods; deep ones at the selected units of their shallow counterpart) or the
budget grid (continual methods, from the best IP/FedIP config and on its trial's seed).

Writes runs/select/<dataset>/<method>/<pct>/trial-XXXX.json as each trial finishes (atomically),
and best.json once every trial of the share has succeeded (``params_budget`` and
``params_budget_digest``: params.yaml's budget it was selected under and the digest of what of it
the selection drew from; retrain and the methods built on it refuse it under another, or under
the same name edited since: experiment_params.BudgetSpec; a heterogeneous method's trial files and
best.json also record its heterogeneity settings, ``params``, and retrain refuses other ones:
heterogeneity.record). A rerun reuses each trial file whose key still matches (same config, seed,
settings, data and code) and recomputes the rest.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from esnfed_core.errors import ConfigError, DataError
from esnfed_core.method import Method
from esnfed_core.quote import quote
from esnfed_core.search import Dimension, continual_budgets
from esnfed_stages.experiment import heterogeneity
from esnfed_stages._io import read_json, write_json
from esnfed_stages.params.experiment import BudgetSpec, ExperimentParams, RunnerConfig
from esnfed_stages.experiment.fingerprint import code_fingerprint, result_key
from esnfed_stages.experiment.jobs import Progress, StageResult, clean_share, run_pending, run_shares
from esnfed_stages.experiment.best import best_of, read_best, search_trials
from esnfed_stages.layout import TRIAL_FILE, best_path, select_dir, trial_path
from esnfed_stages.experiment.models import check_best_config
from esnfed_stages.experiment.runner import Outcome, TrialTask
from esnfed_stages.experiment.trial_data import Dataset

_BEST_FILE = re.compile(r"^best\.json$")  # rewritten once every trial of the share has succeeded


@dataclass(frozen=True)
class PlannedTrial:
    dataset: str
    pct: str
    index: int
    path: Path
    key: str
    task: TrialTask


@dataclass
class ShareSummary:
    """What select did for one training share."""

    pct: str
    n_trials: int
    resumed: int = 0
    ran: int = 0
    failed: list[tuple[int, str]] = field(default_factory=list)
    best: dict[str, Any] | None = None


class SelectResult(StageResult[ShareSummary]):
    """What select did for one dataset and method."""


def _base_config(runs: Path, dataset: str, method: Method, pct: str, budget: BudgetSpec) -> dict[str, Any]:
    return read_best(runs, dataset, Method.parse(method.base), pct, budget, before=method.id)


def base_seed(runs: Path, dataset: str, method: Method, pct: str, base: dict[str, Any]) -> int:
    """The seed the selected stationary trial (IP for CLIP, FedIP for FedCLIP) ran with, from its
    best.json: every budget candidate of ``method`` runs with it (docs/protocol.md §6), so the
    candidates share that trial's reservoir and differ in the budget alone."""
    seed = base.get("seed")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise DataError(f"{best_path(runs, dataset, method.base, pct)}: seed: expected the selected trial's "
                        f"seed (an integer >= 0), got {quote(seed)}: rerun `esnfed select --dataset {dataset} "
                        f"--algo {method.base} --pct {pct}`")
    return seed


def pin_units(dims: list[Dimension], shallow: dict[str, Any], where: Path) -> list[Dimension]:
    """``dims`` with ``units`` fixed to the shallow selection's: a deep method is compared with its
    shallow counterpart at the same total units (docs/deep.md); the other draws are unchanged."""
    units = shallow.get("units")
    if isinstance(units, bool) or not isinstance(units, int) or units < 1:
        raise DataError(f"{where}: config.units: expected a positive integer, got {quote(units)}")
    return [Dimension("units", values=(units,)) if d.name == "units" else d for d in dims]


def plan_share(exp: ExperimentParams, data: Dataset, method: Method, pct: str,
               runs: Path) -> tuple[list[PlannedTrial], dict[str, Any] | None]:
    """The trials of one share (and, for continual methods, the best stationary trial reused)."""
    directory = select_dir(runs, data.name, method.id, pct)
    base = None
    if method.continual:
        base = _base_config(runs, data.name, method, pct, exp.budget_spec)
        rounds = base["config"].get("rounds")
        stationary = {k: base["config"][k] for k in method.config_keys + method.optional_keys
                      if k != "budget" and k in base["config"]}  # a sparse base stays sparse
        missing = set(method.config_keys) - set(stationary) - {"budget"}
        if missing:
            raise DataError(f"{best_path(runs, data.name, method.base, pct)}: config lacks {', '.join(sorted(missing))}")
        if "budget" in method.config_keys:
            configs = [{**stationary, "budget": b}
                       for b in continual_budgets(rounds, data.n_contexts, method.federated)]
        else:  # joint: no budget to search (it stops early on validation), one trial
            configs = [stationary]
        seeds = [base_seed(runs, data.name, method, pct, base)] * len(configs)  # only the budget varies
    else:
        dims = exp.method_space(data.name, method)
        if method.deep:  # deep at the shallow counterpart's selected total units
            base = _base_config(runs, data.name, method, pct, exp.budget_spec)
            dims = pin_units(dims, base["config"], best_path(runs, data.name, method.base, pct))
        configs, seeds = search_trials(exp, data.name, method, pct, dims)
    ref = data.ref(data.train_users(pct), data.validation_users)
    out = []
    for i, (config, seed) in enumerate(zip(configs, seeds)):
        key = result_key(kind="select", dataset=data.name, method=method.id, pct=pct, index=i, seed=seed,
                         config=config, settings=exp.settings.used_by(method, True), data=ref.fingerprint,
                         code=code_fingerprint(method, exp.settings.device),
                         blas_threads=exp.runner.blas_threads)
        task = TrialTask(f"{data.name}/{method.id}/{pct}#{i}", ref, method.id, config, seed, exp.settings)
        out.append(PlannedTrial(data.name, pct, i, trial_path(directory, i), key, task))
    return out, base


def _finished(trial: PlannedTrial) -> dict[str, Any] | None:
    """The saved record of ``trial`` if it finished successfully with the same key."""
    if not trial.path.is_file():
        return None
    try:
        record = read_json(trial.path)
    except DataError:
        return None  # unreadable: recompute (never happens with atomic writes, but be safe)
    if isinstance(record, dict) and record.get("key") == trial.key and record.get("status") == "ok" \
            and _usable(trial, record):
        return record
    return None


def _usable(trial: PlannedTrial, record: dict[str, Any]) -> bool:
    """Whether a finished record holds what best.json is built from (its index, a finite score,
    a config of finite numbers): an edited or damaged one is recomputed, never crashes the ranking."""
    scores = record.get("scores")
    score = scores.get("score") if isinstance(scores, dict) else None
    index = record.get("index")
    if isinstance(index, bool) or index != trial.index or not isinstance(record.get("selected_config"), dict) \
            or isinstance(score, bool) or not isinstance(score, (int, float)) or not math.isfinite(score):
        return False
    try:
        check_best_config(trial.path, Method.parse(trial.task.method), record["selected_config"])
    except (DataError, ConfigError):
        return False
    return True


def _record(trial: PlannedTrial, outcome: Outcome, labels: Mapping[str, Any]) -> dict[str, Any]:
    t = trial.task
    rec = {
        "dataset": trial.dataset, "method": t.method, "pct": trial.pct, "index": trial.index,
        "seed": t.seed, "config": dict(t.config), "key": trial.key, "seconds": round(outcome.seconds, 3),
        **labels,  # a heterogeneous method's settings (heterogeneity.labels)
    }
    if outcome.ok:
        m = outcome.model
        rec.update(status="ok", scores=m.validation, selected_config=m.config,
                   communication=m.communication, error=None, traceback=None)
    else:
        rec.update(status="failed", scores=None, selected_config=None, communication=None,
                   error=outcome.error, traceback=outcome.traceback)
    return rec


def run(
    dataset: str,
    method: Method,
    pcts: list[str],
    exp: ExperimentParams,
    *,
    data_dir: Path = Path("data"),
    runs_dir: Path = Path("runs"),
    runner: RunnerConfig | None = None,
    progress: Progress | None = None,
) -> SelectResult:
    """Select for each share in ``pcts``; failed trials are recorded, never raised.

    ``exp`` is params.yaml's experiment sections, parsed once (``experiment_params``);
    ``runner`` (default ``exp.runner``) carries the command-line overrides.
    Each share's folder is locked for the run: a second run on the same share stops at once.
    """
    return run_shares(select_dir, dataset, method, pcts, exp, data_dir, runs_dir, runner,
                      lambda pcts, exp, data, runner: _run(dataset, method, pcts, exp, data, runs_dir, runner, progress))


def _run(dataset: str, method: Method, pcts: list[str], exp: ExperimentParams, data: Dataset, runs_dir: Path,
         runner: RunnerConfig, progress: Progress | None) -> SelectResult:
    if method.continual and data.n_contexts < 1:
        raise ConfigError(f"{dataset}: no contexts for {method.id}")
    plans: dict[str, list[PlannedTrial]] = {}
    bases: dict[str, Any] = {}
    done: dict[str, dict[int, dict]] = {}
    for pct in pcts:  # every share planned before any folder is cleaned: a missing base changes nothing
        plans[pct], bases[pct] = plan_share(exp, data, method, pct, runs_dir)
    for pct in pcts:
        clean_share(select_dir(runs_dir, dataset, method.id, pct), TRIAL_FILE, len(plans[pct]), _BEST_FILE)
        done[pct] = {t.index: r for t in plans[pct] if (r := _finished(t)) is not None}
    summaries = {p: ShareSummary(p, len(plans[p]), resumed=len(done[p])) for p in pcts}
    pending = [t for p in pcts for t in plans[p] if t.index not in done[p]]
    settings = heterogeneity.labels(exp, method)

    def on_result(trial: PlannedTrial, outcome: Outcome) -> None:
        rec = _record(trial, outcome, settings)
        write_json(trial.path, rec)
        s = summaries[trial.pct]
        s.ran += 1
        if outcome.ok:
            done[trial.pct][trial.index] = rec
        else:
            s.failed.append((trial.index, outcome.error))

    run_pending(pending, sum(len(v) for v in plans.values()), runner, on_result, progress)

    for pct in pcts:
        s = summaries[pct]
        s.failed.sort()
        if s.failed or len(done[pct]) != len(plans[pct]):
            continue
        best = best_of(list(done[pct].values()))
        base = bases[pct]
        s.best = {
            "dataset": dataset, "method": method.id, "pct": pct, "trial": best["index"], "seed": best["seed"],
            "score": best["scores"]["score"], "scores": best["scores"], "config": best["selected_config"],
            "n_trials": len(plans[pct]), **exp.budget_spec.labels("params_budget", dataset, method),
            **settings,
            "base": None if base is None else {"method": method.base, "trial": base["trial"],
                                               "config": base["config"]},
        }
        write_json(best_path(runs_dir, dataset, method.id, pct), s.best)
    return SelectResult(dataset, method.id, [summaries[p] for p in pcts])

