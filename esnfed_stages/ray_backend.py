"""The "ray" trial backend: joblib's Ray backend (``ray.util.joblib``) for running the trials of a
stage on a Ray cluster; imported by the runner only when ``runner.backend`` is ray (optional extra).

Connects to the cluster named by ``RAY_ADDRESS`` (e.g. ``ray://head:10001`` or ``head:6379``), else
starts a local Ray instance; a Ray session already started in this process is reused. Every node
must have this package installed and read the processed data at the same path (a shared folder):
workers load their users from ``DataRef.directory`` as local workers do.
"""

from __future__ import annotations

import logging
import os

import ray
from joblib import register_parallel_backend
from ray.util.joblib.ray_backend import RayBackend

from esnfed_stages.experiment import RunnerConfig
from esnfed_stages.runner import register_backend


class StreamingRayBackend(RayBackend):
    """Ray's joblib backend, yielding each result as it finishes (``return_as="generator_unordered"``).

    joblib refuses generators on multiprocessing pools, which RayBackend derives from, because of
    a stdlib pool limitation that Ray's own pool (``ray.util.multiprocessing``) does not share:
    its completion callbacks run on Ray's result thread and the runner always exhausts the
    generator. Streaming is what lets the stage write each trial as soon as it finishes, so a
    crash on a cluster loses only the trials in flight.
    """

    supports_return_generator = True


def setup(config: RunnerConfig) -> None:
    """Register the joblib backend and attach to (or start) a Ray cluster, once per process."""
    register_parallel_backend("ray", StreamingRayBackend)
    if not ray.is_initialized():
        address = os.environ.get("RAY_ADDRESS") or None
        local = {} if address else {"include_dashboard": False}  # a local instance needs no web UI
        ray.init(address=address, logging_level=logging.WARNING, **local)


register_backend("ray", setup)
