"""Stage `retrain`: the selected config of one dataset and method, retrained with k new seeds per
training share -> runs/models/<dataset>/<method>/<pct>/seed-<k>.npz + .json (see models.py).

Retrain seeds depend on (seed, dataset, share, k) only, so methods that selected the same config
(ridge and IncFed) get the same reservoirs. A rerun reuses every model whose key still matches.

λ of the stationary ESN methods (``retrain.lambda``): ``select`` (default, as the authors' code:
their retraining reruns the trainable with the whole λ grid) solves every λ of readout.lambdas for
the retrained reservoir and keeps the best on the validation users; the model's .json records the
grid and its validation accuracies (``lambda_selection``). ``frozen`` reuses best.json's λ.

A model's .json records the budget of its selection (``params_budget``, ``params_budget_digest``)
and, for a heterogeneous method, its heterogeneity settings (``params``); a best.json of another
budget or other settings than params.yaml's is refused, naming the select to rerun.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from esnfed_core.method import Method
from esnfed_stages.experiment import heterogeneity
from esnfed_stages._io import write_json
from esnfed_stages.params.experiment import ExperimentParams, RunnerConfig
from esnfed_stages.experiment.fingerprint import code_fingerprint, result_key
from esnfed_stages.experiment.jobs import Progress, StageResult, clean_share, run_pending, run_shares
from esnfed_stages.layout import model_dir
from esnfed_stages.experiment.models import model_paths, read_meta, save_model
from esnfed_stages.experiment.runner import Outcome, TrialTask
from esnfed_stages.experiment.best import retrain_seed, selected_config
from esnfed_stages.experiment.trial_data import Dataset

_MODEL_FILE = re.compile(r"^seed-(\d+)\.(npz|json)$")
_FAILED_FILE = re.compile(r"^seed-(\d+)\.failed\.json$")


@dataclass(frozen=True)
class PlannedRetrain:
    """One retrain to run: its task, share, index k and result key."""

    task: TrialTask
    pct: str
    index: int
    key: str


@dataclass
class RetrainSummary:
    pct: str
    config: dict[str, Any]
    seeds: list[int]
    resumed: int = 0
    ran: int = 0
    failed: list[tuple[int, str]] = field(default_factory=list)


class RetrainResult(StageResult[RetrainSummary]):
    """What retrain did for one dataset and method."""


def lambda_selection(model: Any, exp: ExperimentParams) -> dict[str, Any] | None:
    """How the retrain's λ was chosen: the grid and the validation accuracy of each λ for this
    reservoir (``select``), or the selection trial's λ (``frozen``); None without a ridge λ grid."""
    val = getattr(model, "validation", None)
    if val is not None and "per_lambda" in val:
        return {"mode": "select", "lambdas": list(exp.settings.lambdas), "lambda": val["lambda"],
                "validation_accuracy": list(val["per_lambda"])}
    if model.reservoir is None or Method.parse(model.method).continual:
        return None
    return {"mode": "frozen", "lambdas": [model.lam], "lambda": model.lam, "validation_accuracy": None}


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
) -> RetrainResult:
    """Retrain each share in ``pcts``; failed retrains are recorded, never raised.

    ``exp`` is params.yaml's experiment sections, parsed once (``experiment_params``);
    ``runner`` (default ``exp.runner``) carries the command-line overrides.
    Each share's folder is locked for the run: a second run on the same share stops at once.
    """
    return run_shares(model_dir, dataset, method, pcts, exp, data_dir, runs_dir, runner,
                      lambda pcts, exp, data, runner: _run(dataset, method, pcts, exp, data, runs_dir, runner, progress))


def _run(dataset: str, method: Method, pcts: list[str], exp: ExperimentParams, data: Dataset, runs_dir: Path,
         runner: RunnerConfig, progress: Progress | None) -> RetrainResult:
    summaries: dict[str, RetrainSummary] = {}
    pending: list[PlannedRetrain] = []
    score = exp.settings.retrain_scores(method)
    # Every share's selection is read before any folder is touched: a missing one changes nothing.
    settings = heterogeneity.record(exp, method)
    configs = {pct: selected_config(runs_dir, dataset, method.id, pct, exp.budget_spec, settings) for pct in pcts}
    # What each model records of the budget (that of the selection it was retrained from) and of
    # the heterogeneity settings (those of the selection too: checked just above).
    labels = {**exp.budget_spec.labels("params_budget", dataset, method), **heterogeneity.labels(exp, method)}
    for pct in pcts:
        config = configs[pct]
        if score:  # λ is chosen again for each retrained reservoir
            config = {k: v for k, v in config.items() if k != "lambda"}
        directory = model_dir(runs_dir, dataset, method.id, pct)
        clean_share(directory, _MODEL_FILE, exp.retrains, _FAILED_FILE)  # and a previous run's failure records
        # Joint continual training stops early on validation users, and λ selection scores on
        # them: they are part of the data then.
        validation = data.validation_users if method.continual or score else []
        ref = data.ref(data.train_users(pct), validation)
        seeds = [retrain_seed(exp, dataset, pct, k) for k in range(exp.retrains)]
        s = summaries[pct] = RetrainSummary(pct, config, seeds)
        for k, seed in enumerate(seeds):
            key = result_key(kind="retrain", dataset=dataset, method=method.id, pct=pct, retrain=k, seed=seed,
                             config=config, settings=exp.settings.used_by(method, score), data=ref.fingerprint,
                             code=code_fingerprint(method, exp.settings.device),
                             blas_threads=exp.runner.blas_threads)
            meta = read_meta(directory, k)
            if meta is not None and meta.get("key") == key:
                s.resumed += 1
                # The same model (same config, seed, data, code; its key holds the heterogeneity
                # settings): now this budget's, as it is now, and these settings'.
                if any(meta.get(name) != value for name, value in labels.items()):
                    write_json(model_paths(directory, k)[1], {**meta, **labels})
                continue
            task = TrialTask(f"{dataset}/{method.id}/{pct}/seed-{k}", ref, method.id, config, seed,
                             exp.settings, score=score)
            pending.append(PlannedRetrain(task, pct, k, key))

    def on_result(job: PlannedRetrain, outcome: Outcome) -> None:
        task, pct, k, key = job.task, job.pct, job.index, job.key
        s = summaries[pct]
        s.ran += 1
        if outcome.ok:
            meta = {"dataset": dataset, "pct": pct, "train_users": data.train_users(pct), "key": key,
                    **labels, "lambda_selection": lambda_selection(outcome.model, exp)}
            save_model(model_dir(runs_dir, dataset, method.id, pct), k, outcome.model, meta)
        else:
            s.failed.append((k, outcome.error))
            write_json(model_dir(runs_dir, dataset, method.id, pct) / f"seed-{k}.failed.json",
                       {"key": key, "seed": task.seed, "config": dict(task.config), "error": outcome.error,
                        "traceback": outcome.traceback})

    run_pending(pending, sum(len(s.seeds) for s in summaries.values()), runner, on_result, progress)
    for s in summaries.values():
        s.failed.sort()
    return RetrainResult(dataset, method.id, [summaries[p] for p in pcts])
