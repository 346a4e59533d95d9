"""Shared setup of the Flower apps' tests."""

from __future__ import annotations

import os

import pytest
from threadpoolctl import threadpool_limits

# Ray starts its workers (the ClientApps' actors) at nice 15. Beside the package suite (`make test`
# runs both at once) they then got the CPU only when nothing else wanted it, and the Flower suite
# took 1,198 s instead of 680 s alone: at nice 0 they share the cores fairly. Set before any Ray
# instance starts (the flwr run tests' SuperLinks inherit it).
os.environ.setdefault("RAY_worker_niceness", "0")


@pytest.fixture(autouse=True)
def one_blas_thread():
    """The expected arrays are computed in this process with one BLAS thread, as the apps' Ray
    workers (num_cpus=1) and the pipeline's trials run: OpenBLAS splits its sums by thread, so
    equal bits are only asserted between computations with the same thread count."""
    with threadpool_limits(1):
        yield



class _Simulations:
    """Flower's run_simulation on one Ray session (esnfed_flower.session, as the pipeline's flower
    stage runs its apps): each simulation would otherwise start Ray (2-4 s on two cores) and shut it
    down (1.3 s). One actor per client (num_cpus 1) on 2 CPUs, as the tests' own sessions had."""

    def __init__(self):
        self._open()

    def _open(self):
        from esnfed_flower.session import shared_ray

        self._session = shared_ray(2)
        self._config = self._session.__enter__()

    def close(self):
        self._session.__exit__(None, None, None)

    def __call__(self, server_app, client_app, num_supernodes: int, run: dict) -> None:
        """One simulation with ``run`` as the run config, on the shared session."""
        from flwr.simulation import run_simulation

        from esnfed_flower.session import use_run

        use_run(self._config, run)
        run_simulation(server_app, client_app, num_supernodes=num_supernodes,
                       backend_config={"client_resources": {"num_cpus": 1}})

    def alone(self, server_app, client_app, num_supernodes: int, run: dict) -> None:
        """One simulation on a Ray of its own (started and shut down by Flower), the shared
        session closed meanwhile: for runs that must stop with an error, whose end the shared
        session's actor-only terminate was not made for."""
        import json
        import os
        import tempfile

        from flwr.simulation import run_simulation

        self.close()
        try:
            with tempfile.TemporaryDirectory() as tmp:
                config = os.path.join(tmp, "run.json")
                with open(config, "w") as f:
                    json.dump(run, f)
                os.environ["ESNFED_FLOWER_RUN"] = config
                try:
                    run_simulation(server_app, client_app, num_supernodes=num_supernodes,
                                   backend_config={"client_resources": {"num_cpus": 1},
                                                   "init_args": {"num_cpus": 2}})
                finally:
                    os.environ.pop("ESNFED_FLOWER_RUN", None)
        finally:
            self._open()


@pytest.fixture(scope="module")
def simulation():
    """``simulate(server_app, client_app, num_supernodes, run)`` on the module's Ray session
    (``simulate.alone``: on a Ray of its own). Module scope: Ray is down again before the next
    module (test_flower_session.py asserts a process without Ray)."""
    sims = _Simulations()
    try:
        yield sims
    finally:
        sims.close()
