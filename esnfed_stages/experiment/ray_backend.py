"""The "ray" trial backend: joblib's Ray backend (``ray.util.joblib``) for running the trials of a
stage on a Ray cluster; imported by the runner only when ``runner.backend`` is ray (optional extra).

Connects to the cluster named by ``RAY_ADDRESS`` (``head:6379``, from a machine of the cluster; a
Ray Client address ``ray://...`` needs ``ray[client]``), else starts a local Ray instance whose
processes listen on 127.0.0.1 only (no dashboard); a Ray session already started in this process
is reused. A cluster's nodes must share a private, trusted network: Ray's ports take any
connection from it, and the driver unpickles every result a worker sends back. Every node must have this package installed
and read the processed data at the same path (a shared folder): workers load their users from
``DataRef.directory`` as local workers do. Connection errors Ray raises are one-line ConfigErrors.
"""

from __future__ import annotations

import logging
import os

import ray
from joblib import register_parallel_backend
from ray.util.joblib.ray_backend import RayBackend

from esnfed_core.errors import ConfigError
from esnfed_stages.params.experiment import RunnerConfig
from esnfed_stages.experiment.ray_loopback import start_local
from esnfed_stages.experiment.runner import register_backend


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
    # joblib always hands the pool a multiprocessing context, which Ray's pool ignores with a
    # warning on every stage run; nothing is lost, so keep the console to the stage's own output.
    logging.getLogger("ray.util.multiprocessing.pool").setLevel(logging.ERROR)
    if not ray.is_initialized():
        address = os.environ.get("RAY_ADDRESS") or None
        try:
            if address:
                ray.init(address=address, logging_level=logging.WARNING)
            else:
                start_local("runner.backend ray", "set RAY_ADDRESS to a cluster on a trusted network, or use "
                            "another backend", logging_level=logging.WARNING)
        except ConfigError:
            raise
        except Exception as exc:  # noqa: BLE001 - Ray raises several types; all mean "no cluster"
            where = f"the cluster at RAY_ADDRESS={address}" if address else "a local Ray instance"
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            raise ConfigError(f"runner.backend ray: cannot start or reach {where} "
                              f"({type(exc).__name__}: {first})") from None


register_backend("ray", setup)
