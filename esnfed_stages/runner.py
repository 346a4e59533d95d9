"""Dispatch of trials (selection and retraining) through one pure function, on a joblib backend.

Every trial is a :class:`TrialTask`; :func:`execute` loads its data (cached per worker process),
calls :func:`esnfed_core.trial.fit` under a fixed number of BLAS threads, and returns an
:class:`Outcome` (the fitted model, or the error). :func:`run_tasks` hands outcomes to a callback
in the parent as they finish, so the stage writes each result at once.

Backends: "loky" (local processes, the default) and "sequential" (in this process). Another
backend registers a setup function with :func:`register_backend`; "ray" is looked up lazily in
``esnfed_stages.ray_backend``, which must call ``register_backend("ray", setup)`` on import.
Results do not depend on the backend: each trial runs with ``blas_threads`` BLAS threads wherever
it runs, and its numbers depend only on (method, config, seed, data, settings).
"""

from __future__ import annotations

import importlib
import time
import traceback
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

from joblib import Parallel, delayed, parallel_config
from threadpoolctl import threadpool_limits

from esnfed_core.errors import ConfigError, EsnfedError
from esnfed_core.trial import FittedModel, Method, Settings, fit
from esnfed_stages.experiment import DataRef, RunnerConfig, load_trial_data


@dataclass(frozen=True)
class TrialTask:
    """One call of the trial function, with a label for progress and error reports."""

    label: str
    data: DataRef
    method: str
    config: Mapping[str, Any]
    seed: int
    settings: Settings
    score: bool = True  # True: model selection (score on validation); False: retraining


@dataclass(frozen=True)
class Outcome:
    """What a task produced: the model, or the error (type and message) with its traceback."""

    model: FittedModel | None
    error: str | None
    traceback: str | None
    seconds: float

    @property
    def ok(self) -> bool:
        return self.error is None


def execute(task: TrialTask, blas_threads: int) -> Outcome:
    """The worker side: never raises for a failing trial, so one failure cannot stop the others."""
    start = time.perf_counter()
    try:
        with threadpool_limits(limits=blas_threads):
            data = load_trial_data(task.data)
            model = fit(task.method, task.config, task.seed, data, task.settings, score=task.score)
        return Outcome(model, None, None, time.perf_counter() - start)
    except Exception as exc:  # noqa: BLE001 - recorded and reported by the stage
        return Outcome(None, f"{type(exc).__name__}: {exc}", traceback.format_exc(),
                       time.perf_counter() - start)


def for_method(config: RunnerConfig, method: Method) -> RunnerConfig:
    """The random baseline's trials only draw labels: worker start-up would cost more than the
    work, so they run in this process (same numbers either way)."""
    return replace(config, backend="sequential") if method.algo == "random" else config


def _no_setup(config: RunnerConfig) -> None:
    return None


# name -> setup(config) run in the parent before dispatching (e.g. connect to a cluster).
_BACKENDS: dict[str, Callable[[RunnerConfig], None]] = {"loky": _no_setup, "sequential": _no_setup}


def register_backend(name: str, setup: Callable[[RunnerConfig], None]) -> None:
    """Make ``name`` usable as ``runner.backend`` (the joblib backend of the same name)."""
    _BACKENDS[name] = setup


def _setup(config: RunnerConfig) -> None:
    if config.backend not in _BACKENDS:
        try:
            importlib.import_module(f"esnfed_stages.{config.backend}_backend")
        except ImportError as exc:
            raise ConfigError(
                f"runner.backend: {config.backend!r} is not available ({exc}); "
                "install the optional extra or choose loky/sequential"
            ) from None
    if config.backend not in _BACKENDS:
        raise ConfigError(f"runner.backend: {config.backend!r} did not register itself")
    _BACKENDS[config.backend](config)


def run_tasks(
    tasks: Sequence[TrialTask],
    config: RunnerConfig,
    on_done: Callable[[TrialTask, Outcome], None],
) -> None:
    """Run every task; call ``on_done`` in this process as each one finishes (any order).

    A single task, or ``n_jobs == 1``, runs in this process (no worker start-up); its numbers
    are the same as in a worker since the BLAS thread count is the same.
    """
    if not tasks:
        return
    if config.backend == "sequential" or config.n_jobs == 1 or len(tasks) == 1:
        for task in tasks:
            on_done(task, execute(task, config.blas_threads))
        return
    _setup(config)
    try:
        with parallel_config(backend=config.backend, n_jobs=config.n_jobs):
            results = Parallel(return_as="generator_unordered")(
                delayed(_indexed)(i, task, config.blas_threads) for i, task in enumerate(tasks)
            )
            for i, outcome in results:
                on_done(tasks[i], outcome)
    except EsnfedError:
        raise
    except Exception as exc:  # a worker died (killed, out of memory): finished work is saved
        raise EsnfedError(
            f"trial runner ({config.backend}): {type(exc).__name__}: {exc}; "
            "finished trials are saved, rerun to resume"
        ) from exc


def _indexed(i: int, task: TrialTask, blas_threads: int) -> tuple[int, Outcome]:
    return i, execute(task, blas_threads)
