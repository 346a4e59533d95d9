"""Dispatch of trials (selection and retraining) through one pure function, on a joblib backend.

Every trial is a :class:`TrialTask`; :func:`execute` loads its data (cached per worker process),
calls :func:`fit_trial` under a fixed number of BLAS threads, and returns an
:class:`Outcome` (the fitted model, or the error). :func:`run_tasks` hands outcomes to a callback
in the parent as they finish, so the stage writes each result at once.

Backends: "loky" (local processes, the default) and "sequential" (in this process). Another
backend registers a setup function with :func:`register_backend`; "ray" is looked up lazily in
``esnfed_stages.experiment.ray_backend``, which must call ``register_backend("ray", setup)`` on import.
Results do not depend on the backend: each trial runs with ``blas_threads`` BLAS threads wherever
it runs, and its numbers depend only on (method, config, seed, data, settings).

On an accelerated device (``settings.device`` torch-cpu | cuda) the ESN methods' tasks are
batched instead: tasks of the same data, method and reservoir size run as one call of
:func:`esnfed_core.accel.trials.fit_batch` in this process (at most ``MAX_TRIALS`` per call),
and each task still gets its own Outcome, so the stages write one result per trial as before.
"""

from __future__ import annotations

import contextlib
import importlib
import time
import traceback
from dataclasses import dataclass, replace
from typing import Any, Callable, Mapping, Sequence

from threadpoolctl import threadpool_limits

from esnfed_core.accel import check_supported, require_torch
from esnfed_core.errors import ConfigError, EsnfedError
from esnfed_core.method import Method
from esnfed_core.quote import quote
from esnfed_core.settings import Settings
from esnfed_core.trial import FittedModel, TrialData
from esnfed_stages.params.experiment import RunnerConfig
from esnfed_stages.experiment.trial_data import DataRef, load_trial_data


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


def fit_trial(method: str | Method, config: Mapping[str, Any], seed: int, data: TrialData,
              settings: Settings, *, score: bool = True) -> FittedModel:
    """One trial on the kernels ``settings`` choose: the method's family picks the path
    (:meth:`esnfed_core.methods.Family.fit`: the numpy trial, one reservoir per client, or a batch
    of one on the torch kernels)."""
    m = method if isinstance(method, Method) else Method.parse(method)
    return m.family.fit(m, config, seed, data, settings, score=score)


def execute(task: TrialTask, blas_threads: int) -> Outcome:
    """The worker side: never raises for a failing trial, so one failure cannot stop the others."""
    start = time.perf_counter()
    try:
        with threadpool_limits(limits=blas_threads):
            data = load_trial_data(task.data)
            model = fit_trial(task.method, task.config, task.seed, data, task.settings, score=task.score)
        return Outcome(model, None, None, time.perf_counter() - start)
    except Exception as exc:  # noqa: BLE001 - recorded and reported by the stage
        return Outcome(None, f"{type(exc).__name__}: {exc}", traceback.format_exc(),
                       time.perf_counter() - start)


def _batch_key(task: TrialTask) -> tuple:
    """Tasks with the same key can share one batched call: same data, method, scoring, fixed λ
    or not, fixed settings and reservoir size."""
    return (task.data, task.method, task.score, "lambda" in task.config, repr(task.settings),
            int(task.config["units"]))


def batches(tasks: Sequence[TrialTask], max_trials: int) -> list[list[TrialTask]]:
    """Accelerated tasks grouped by :func:`_batch_key` (first-appearance order), split into
    groups of at most ``max_trials``."""
    groups: dict[tuple, list[TrialTask]] = {}
    for t in tasks:
        groups.setdefault(_batch_key(t), []).append(t)
    return [g[i : i + max_trials] for g in groups.values() for i in range(0, len(g), max_trials)]


def execute_batch(tasks: Sequence[TrialTask], blas_threads: int) -> list[Outcome]:
    """One batched call for tasks of one :func:`_batch_key`; a failure fails each of them (a
    rerun resumes). Each outcome's ``seconds`` is its share of the batch's time."""
    from esnfed_core.accel.trials import fit_batch  # noqa: PLC0415 (imports torch)

    start = time.perf_counter()
    first = tasks[0]
    try:
        with threadpool_limits(limits=blas_threads), _torch_threads(first.settings.device, blas_threads):
            data = load_trial_data(first.data)
            models = fit_batch(first.method, [t.config for t in tasks], [t.seed for t in tasks], data,
                               first.settings, score=first.score)
        share = (time.perf_counter() - start) / len(tasks)
        return [Outcome(m, None, None, share) for m in models]
    except Exception as exc:  # noqa: BLE001 - recorded and reported by the stage
        share = (time.perf_counter() - start) / len(tasks)
        return [Outcome(None, f"{type(exc).__name__}: {exc}", traceback.format_exc(), share) for _ in tasks]


class _torch_threads:
    """torch's CPU threads = blas_threads on torch-cpu (as the numpy path's BLAS threads)."""

    def __init__(self, device: str, threads: int):
        self.device, self.threads, self.saved = device, threads, None

    def __enter__(self):
        if self.device == "torch-cpu":
            import torch  # noqa: PLC0415

            self.saved = torch.get_num_threads()
            torch.set_num_threads(self.threads)

    def __exit__(self, *exc):
        if self.saved is not None:
            import torch  # noqa: PLC0415

            torch.set_num_threads(self.saved)


def for_method(config: RunnerConfig, method: Method) -> RunnerConfig:
    """The random baseline's trials only draw labels: worker start-up would cost more than the
    work, so they run in this process (same numbers either way)."""
    return replace(config, backend="sequential") if method.family.sequential else config


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
            importlib.import_module(f"esnfed_stages.experiment.{config.backend}_backend")
        except ImportError as exc:
            raise ConfigError(
                f"runner.backend: {quote(config.backend)} is not available ({exc}); "
                "install the optional extra or choose loky/sequential"
            ) from None
    if config.backend not in _BACKENDS:
        raise ConfigError(f"runner.backend: {quote(config.backend)} did not register itself")
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
    accelerated = [t for t in tasks if t.settings.accelerated(Method.parse(t.method))]
    if accelerated:
        require_torch(accelerated[0].settings.device)
        for t in accelerated:  # refuse what the torch kernels cannot run before running anything
            check_supported(Method.parse(t.method), t.config, t.settings.device)
        from esnfed_core.accel.trials import MAX_TRIALS  # noqa: PLC0415

        for group in batches(accelerated, MAX_TRIALS):
            for task, outcome in zip(group, execute_batch(group, config.blas_threads)):
                on_done(task, outcome)
        tasks = [t for t in tasks if not t.settings.accelerated(Method.parse(t.method))]
        if not tasks:
            return
    if config.backend == "sequential" or config.n_jobs == 1 or len(tasks) == 1:
        for task in tasks:
            on_done(task, execute(task, config.blas_threads))
        return
    _setup(config)
    from joblib import Parallel, delayed, parallel_config  # noqa: PLC0415 (only a pool pays for joblib)

    try:
        with parallel_config(backend=config.backend, n_jobs=config.n_jobs):
            results = Parallel(return_as="generator_unordered")(
                delayed(_indexed)(i, task, config.blas_threads) for i, task in enumerate(tasks)
            )
            # closing: whatever stops the loop (a signal, a failed write in on_done) closes the
            # generator at once, and joblib then kills the workers instead of letting them compute on
            with contextlib.closing(results):
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
