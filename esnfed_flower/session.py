"""One Ray session for several Flower simulations in one process: `python -m esnfed_flower.run`
with several RUN_JSONs (the pipeline's `flower` stage runs its four apps so) starts Ray once.

flwr 1.42's ``run_simulation`` runs on a Ray session the process has already started
(``RayBackend.init_ray`` initialises Ray only when it is not), but ``RayBackend.terminate`` ends
every simulation with ``ray.shutdown()``: each simulation would pay Ray's start (2-4 s on two
cores) and stop (1.3 s), and start its ClientApp actors (a Ray worker process each, which imports
flwr, numpy and the apps: ~2 s of a 4 s FedIP test simulation). While ``shared_ray`` is open the
backend keeps Ray running at a simulation's end, and keeps its actors too when every one of them
is idle: the next simulation asking the same client resources builds on them (an actor holds no
state of a run: the ClientApp, message and context come with each call, the run config is read
from its file). Actors still busy are killed and the pool dropped. On exit the methods are
restored and Ray shut down. flwr has no option for this (vce_api.start_vce builds a RayBackend,
hard-wired), hence the patch of the pinned version's methods (tests_flower/test_flower_session.py
checks the reuse and that the session restores them; test_flower_cmd.py that several apps in one
session give the separate runs' readouts and byte counts).

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


class _KeptActors:
    """The RayBackend methods of a shared session: ``build`` takes the actors the last simulation
    left idle (same client resources and actor arguments), ``terminate`` leaves Ray running and
    keeps the pool when all its actors are idle."""

    def __init__(self, build: Any):
        self._build = build  # Flower's RayBackend.build
        self.pool: Any = None
        self._key: str | None = None
        self.reused = 0  # simulations that built on kept actors

    @staticmethod
    def _key_of(backend: Any) -> str:
        return repr((sorted(backend.client_resources.items()), sorted(backend.actor_kwargs.items())))

    def build(self, backend: Any, app_fn: Any) -> None:
        if self.pool is not None and self._key == self._key_of(backend):
            backend.pool, backend.app_fn = self.pool, app_fn
            self.pool = None
            self.reused += 1
            return
        self.drop()
        self._build(backend, app_fn)

    def terminate(self, backend: Any) -> None:
        pool = backend.pool
        if pool is None:
            return
        if not pool._future_to_actor and len(pool.pool) == pool.num_actors:
            self.drop()
            self.pool, self._key = pool, self._key_of(backend)
        else:  # a message still in flight: these actors are not handed to another simulation
            for actor in list(pool.pool) + list(pool._future_to_actor.values()):
                ray.kill(actor)
        backend.pool = None

    def drop(self) -> None:
        """End the kept actors, if any."""
        if self.pool is not None:
            self.pool.terminate_all_actors()
        self.pool = None


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
        original = RayBackend.build, RayBackend.terminate
        kept = _KeptActors(RayBackend.build)
        try:
            start_local("esnfed flower", "see esnfed_stages/experiment/ray_loopback.py", num_cpus=num_cpus,
                        logging_level="WARNING", log_to_driver=True,
                        runtime_env={"env_vars": {"PYTHONPATH": pythonpath}})
            RayBackend.build = lambda backend, app_fn: kept.build(backend, app_fn)
            RayBackend.terminate = lambda backend: kept.terminate(backend)
            yield config
        finally:
            RayBackend.build, RayBackend.terminate = original
            kept.drop()
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
