"""The shared Ray session of `python -m esnfed_flower.run` (esnfed_flower/session.py): Ray on the
loopback for the session, Flower's backend kept from shutting it down only while it is open, the
run config file the workers read; and a bad RUN_JSON refused before Ray starts. That several apps
in one session equal separate runs: test_flower_cmd.py."""

from __future__ import annotations

import json
import os

import ray
from flwr.server.superlink.fleet.vce.backend.raybackend import RayBackend

from esnfed_flower import run, session
from esnfed_flower.common import CONFIG_ENV


def test_shared_ray_keeps_ray_on_the_loopback_and_restores_flower(monkeypatch):
    monkeypatch.setenv(CONFIG_ENV, "before.json")
    original = RayBackend.build, RayBackend.terminate
    with session.shared_ray(1) as config:
        assert ray.is_initialized()
        assert {n["NodeManagerAddress"] for n in ray.nodes()} == {"127.0.0.1"}
        assert ray.cluster_resources()["CPU"] == 1
        # a simulation's end leaves Ray running, and its idle actors for the next one
        assert RayBackend.build is not original[0] and RayBackend.terminate is not original[1]
        assert os.environ[CONFIG_ENV] == str(config)
        session.use_run(config, {"app": "incfed", "lambda": 0.5})
        session.use_run(config, {"app": "fedip"})
        assert json.loads(config.read_text()) == {"app": "fedip"}
    assert not ray.is_initialized() and (RayBackend.build, RayBackend.terminate) == original
    assert os.environ[CONFIG_ENV] == "before.json" and not config.exists()


def test_an_unknown_app_is_refused_before_ray_starts(tmp_path, capsys):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps({"app": "incfed"}))
    bad.write_text(json.dumps({"app": "fedavg", "secagg": True}))
    assert run.main([str(good), str(bad)]) == 1
    assert f"{bad}: no Flower app for app='fedavg' secagg=True" in capsys.readouterr().err
    assert not ray.is_initialized()


class _Pool:
    """Flower's BasicActorPool's fields that the session reads: idle actors, busy ones, the count."""

    def __init__(self, idle: list, busy: dict):
        self.pool, self._future_to_actor, self.num_actors = idle, busy, len(idle) + len(busy)
        self.terminated = False

    def terminate_all_actors(self):
        self.terminated = True


class _Backend:
    client_resources, actor_kwargs = {"num_cpus": 1}, {}

    def __init__(self, pool=None):
        self.pool, self.app_fn = pool, None


def test_idle_actors_are_kept_for_the_next_simulation_and_busy_ones_killed(monkeypatch):
    killed, built = [], []
    monkeypatch.setattr(session.ray, "kill", killed.append)
    kept = session._KeptActors(lambda backend, app_fn: built.append(app_fn))
    idle = _Pool(["a", "b"], {})
    kept.terminate(_Backend(idle))
    nxt = _Backend()
    kept.build(nxt, "app")
    assert nxt.pool is idle and nxt.app_fn == "app" and built == [] and not idle.terminated
    other = _Backend()
    other.client_resources = {"num_cpus": 2}  # other resources: new actors
    ours = _Pool(["c"], {})
    kept.terminate(_Backend(ours))
    kept.build(other, "app2")
    assert built == ["app2"] and ours.terminated
    busy = _Pool(["d"], {"future": "e"})
    kept.terminate(_Backend(busy))
    assert sorted(killed) == ["d", "e"] and kept.pool is None
    kept.build(_Backend(), "app3")
    assert built == ["app2", "app3"]
