"""The skeleton select and retrain share: their entry (the shares a method runs, each share's folder
locked, the runner, settings and dataset of the run: ``run_shares``), a share's folder cleared of
what no longer belongs to the plan (``clean_share``); then, given the jobs a stage planned and the
ones it found done (by key), run the rest, largest shares first, hand each outcome
to the stage as it arrives, and report progress as (finished, total) throughout."""

from __future__ import annotations

import re
from pathlib import Path
from dataclasses import dataclass
from typing import Callable, Generic, Protocol, Sequence, TypeVar

from esnfed_core.method import Method
from esnfed_stages.experiment import heterogeneity
from esnfed_stages._io import clean_stale_tmp, output_locks
from esnfed_stages.params.experiment import ExperimentParams, RunnerConfig
from esnfed_stages.experiment.runner import Outcome, TrialTask, for_method, run_tasks
from esnfed_stages.experiment.trial_data import Dataset, open_dataset

Progress = Callable[[int, int], None]


class Job(Protocol):
    """A planned trial or retrain: its task, its share and its index within the share."""

    task: TrialTask
    pct: str
    index: int


J = TypeVar("J", bound=Job)
R = TypeVar("R")
S = TypeVar("S")  # a stage's summary of one share: its ``pct`` and its ``failed`` (index, error)


@dataclass
class StageResult(Generic[S]):
    """What select or retrain did for one dataset and method: a summary per share."""

    dataset: str
    method: str
    shares: list[S]

    @property
    def failed(self) -> list[tuple[str, int, str]]:
        """(share, index, error) of every failed job."""
        return [(s.pct, i, e) for s in self.shares for i, e in s.failed]


def run_shares(share_dir: Callable[[Path, str, str, str], Path], dataset: str, method: Method, pcts: list[str],
               exp: ExperimentParams, data_dir: Path, runs_dir: Path, runner: RunnerConfig | None,
               body: Callable[[list[str], ExperimentParams, Dataset, RunnerConfig], R]) -> R:
    """A select or retrain run: the shares of ``pcts`` the method runs (``heterogeneity.shares``),
    each one's folder ``share_dir(runs_dir, dataset, method.id, pct)`` locked for the run (a second
    run on the same share stops at once), then ``body(pcts, exp, data, runner)``: the runner for the
    method (default ``exp.runner``; ``for_method``), ``exp`` on its device with the method's
    settings for the dataset (``heterogeneity.settings_for``), and the dataset opened (for a
    continual method, its splits checked to cover every context: ``Dataset.check_contexts``)."""
    pcts = heterogeneity.shares(exp, method, pcts)  # heterogeneous methods: the budget's shares
    with output_locks([share_dir(runs_dir, dataset, method.id, p) for p in pcts]):
        runner = for_method(runner or exp.runner, method)
        exp = heterogeneity.settings_for(exp.on_device(runner.device), method, dataset)
        data = open_dataset(data_dir, dataset, exp.processed.get(dataset))
        if method.continual:  # a partition written before `esnfed partition` checked the contexts
            data.check_contexts(method.id, pcts)
        return body(pcts, exp, data, runner)


def clean_share(directory: Path, numbered: re.Pattern[str], n: int, stale: re.Pattern[str]) -> None:
    """Remove from a share's folder what no longer belongs to a plan of ``n`` jobs: files that
    ``numbered`` matches (group 1: the job's index) past the count, files that ``stale`` matches,
    and temporaries of a killed run (only ours: see ``clean_stale_tmp``)."""
    if not directory.is_dir():
        return
    clean_stale_tmp(directory)
    for p in directory.iterdir():
        m = numbered.match(p.name)
        if (m and int(m.group(1)) >= n) or stale.match(p.name):
            p.unlink()


def run_pending(pending: Sequence[J], total: int, runner: RunnerConfig,
                on_result: Callable[[J, Outcome], None], progress: Progress | None = None) -> None:
    """Run ``pending`` (the ``total`` planned jobs less those done) and pass each outcome to
    ``on_result`` in the parent, where the stage writes it at once.

    Largest shares first: their jobs are the longest, and starting them first balances the
    workers (the order changes no result).
    """
    finished = total - len(pending)
    if progress:
        progress(finished, total)
    by_task = {id(job.task): job for job in pending}

    def on_done(task: TrialTask, outcome: Outcome) -> None:
        nonlocal finished
        on_result(by_task[id(task)], outcome)
        finished += 1
        if progress:
            progress(finished, total)

    run_tasks([job.task for job in sorted(pending, key=lambda j: (-int(j.pct), j.index))], runner, on_done)
