"""The skeleton select and retrain share: given the jobs a stage planned and the ones it found done
(by key), run the rest, largest shares first, hand each outcome to the stage as it arrives, and
report progress as (finished, total) throughout."""

from __future__ import annotations

from typing import Callable, Protocol, Sequence, TypeVar

from esnfed_stages.experiment_params import RunnerConfig
from esnfed_stages.runner import Outcome, TrialTask, run_tasks

Progress = Callable[[int, int], None]


class Job(Protocol):
    """A planned trial or retrain: its task, its share and its index within the share."""

    task: TrialTask
    pct: str
    index: int


J = TypeVar("J", bound=Job)


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
