"""One Ray session for several Flower simulations in one process: `python -m esnfed_flower.run`
with several RUN_JSONs (the pipeline's `flower` stage runs its four apps so) starts Ray once.

flwr 1.42's ``run_simulation`` runs on a Ray session the process has already started
(``RayBackend.init_ray`` initialises Ray only when it is not), but ``RayBackend.terminate`` ends
every simulation with ``ray.shutdown()``: each simulation would pay Ray's start (2-4 s on two
cores) and stop (1.3 s). While ``shared_ray`` is open, the backend's terminate ends the
simulation's actors only (what it does before ``ray.shutdown()``); on exit the method is restored
and Ray shut down. flwr has no option for this (vce_api.start_vce builds a RayBackend, hard-wired),
hence the patch of the pinned version's method (tests_flower/test_flower_session.py checks that the
session restores it; test_flower_cmd.py that several apps in one session give the separate runs'
readouts and byte counts).

The session is a local instance on the loopback (esnfed_stages.experiment.ray_loopback), started with what
flwr's init_ray would pass (the driver's sys.path as the workers' PYTHONPATH, Flower's default
logging). Ray's workers take their environment from the session's start, so the run config file
named by $ESNFED_FLOWER_RUN (common.CONFIG_ENV) is one path for the whole session: ``shared_ray``
yields it and ``use_run`` writes each run's config there before its simulation.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator, Mapping

import ray

from esnfed_flower.common import CONFIG_ENV
from esnfed_stages.experiment.ray_loopback import start_local


def _end_actors(backend: Any) -> None:
    """RayBackend.terminate without ray.shutdown(): the simulation's actors exit, Ray stays."""
    if backend.pool:
        backend.pool.terminate_all_actors()


@contextlib.contextmanager
def shared_ray(num_cpus: int) -> Iterator[Path]:
    """Start Ray (``num_cpus``) on the loopback, keep it across run_simulation calls; yields the
    run config path for $ESNFED_FLOWER_RUN. Refuses a process where Ray already runs."""
    from flwr.server.superlink.fleet.vce.backend.raybackend import RayBackend  # noqa: PLC0415

    if ray.is_initialized():
        raise RuntimeError("esnfed_flower.session: Ray is already running in this process")
    saved_env = os.environ.get(CONFIG_ENV)
    with tempfile.TemporaryDirectory(prefix="esnfed-flower-session-") as tmp:
        config = Path(tmp) / "run.json"
        os.environ[CONFIG_ENV] = str(config)
        pythonpath = os.pathsep.join(p for p in (*sys.path, os.environ.get("PYTHONPATH", "")) if p)
        original = RayBackend.terminate
        try:
            start_local("esnfed flower", "see esnfed_stages/experiment/ray_loopback.py", num_cpus=num_cpus,
                        logging_level="WARNING", log_to_driver=True,
                        runtime_env={"env_vars": {"PYTHONPATH": pythonpath}})
            RayBackend.terminate = _end_actors
            yield config
        finally:
            RayBackend.terminate = original
            ray.shutdown()
            if saved_env is None:
                os.environ.pop(CONFIG_ENV, None)
            else:
                os.environ[CONFIG_ENV] = saved_env


def use_run(config: Path, rc: Mapping[str, Any]) -> None:
    """Make ``rc`` the session's run config (written whole, then renamed into place)."""
    tmp = config.with_suffix(".tmp")
    tmp.write_text(json.dumps(rc))
    os.replace(tmp, config)
