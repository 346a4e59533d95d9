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
    original = RayBackend.terminate
    with session.shared_ray(1) as config:
        assert ray.is_initialized()
        assert {n["NodeManagerAddress"] for n in ray.nodes()} == {"127.0.0.1"}
        assert ray.cluster_resources()["CPU"] == 1
        assert RayBackend.terminate is not original  # a simulation's end leaves Ray running
        assert os.environ[CONFIG_ENV] == str(config)
        session.use_run(config, {"app": "incfed", "lambda": 0.5})
        session.use_run(config, {"app": "fedip"})
        assert json.loads(config.read_text()) == {"app": "fedip"}
    assert not ray.is_initialized() and RayBackend.terminate is original
    assert os.environ[CONFIG_ENV] == "before.json" and not config.exists()


def test_an_unknown_app_is_refused_before_ray_starts(tmp_path, capsys):
    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_text(json.dumps({"app": "incfed"}))
    bad.write_text(json.dumps({"app": "fedavg", "secagg": True}))
    assert run.main([str(good), str(bad)]) == 1
    assert f"{bad}: no Flower app for app='fedavg' secagg=True" in capsys.readouterr().err
    assert not ray.is_initialized()
