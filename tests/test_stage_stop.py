"""A trial stage stopped by SIGTERM or SIGINT stops its joblib (loky) worker processes too, exits
with one line and 128 + the signal, and leaves no partial output behind.

Without it the signal ended only the parent: its two loky workers went on computing the trials
nobody would collect (for 40 minutes in the run that found it), holding the parent's stdout open.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from experiment_data import cli_ok, make_dataset, read_params, small_params, stage_options, write_params

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow  # a few seconds per signal: a real `esnfed retrain` with a worker pool

RETRAIN = ["retrain", "--algo", "fedclip", "--strategy", "joint", "--pct", "100"]


@pytest.fixture(scope="module")
def selected(tmp_path_factory) -> Path:
    """FedCLIP-joint selected on the tiny dataset (one round per context, in this process), then
    params.yaml's joint strategy made to run until a patience of 10^8 rounds: each retrain's trial
    computes for as long as it is let, so only a stop can end the workers."""
    root = tmp_path_factory.mktemp("stop")
    make_dataset(root)
    params = small_params()
    params["continual"]["joint"] = {"patience": 1, "max_rounds": 1}
    write_params(root, params)
    for algo in (["fedip"], ["fedclip", "--strategy", "joint"]):
        cli_ok("select", "--algo", *algo, "--pct", "100", *stage_options(root))
    params = read_params(root)
    params["continual"]["joint"] = {"patience": 10**8, "max_rounds": None}
    params["runner"] = {"backend": "loky", "n_jobs": 2, "blas_threads": 1}
    write_params(root, params)
    return root


def _workers(proc: psutil.Process) -> list[psutil.Process]:
    return [c for c in proc.children(recursive=True) if "LokyProcess" in " ".join(c.cmdline())]


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    out = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                out.append(p)
        except psutil.NoSuchProcess:
            pass
    return out


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_stopped_retrain_ends_its_workers_and_writes_nothing(selected, tmp_path, signum):
    models = selected / "runs" / "models"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COLUMNS": "200"}
    err_path = tmp_path / "stderr.txt"
    # Output to files, not pipes: a worker that outlives the parent holds its pipes open.
    with open(tmp_path / "stdout.txt", "w") as out, open(err_path, "w") as err:
        proc = subprocess.Popen([sys.executable, "-m", "esnfed_cli", *RETRAIN, *stage_options(selected)],
                                env=env, stdout=out, stderr=err)
    parent = psutil.Process(proc.pid)
    descendants: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 120
        while len(_workers(parent)) < 2:  # both trials running, in two workers
            assert proc.poll() is None, err_path.read_text()
            assert time.monotonic() < deadline, "no two loky workers appeared"
            time.sleep(0.05)
        time.sleep(0.5)  # let them be inside their trials
        descendants = parent.children(recursive=True)  # the workers and loky's resource trackers
        proc.send_signal(signum)
        returncode = proc.wait(timeout=10)
        time.sleep(2)  # grace for the helpers (resource trackers) that end when the parent's pipes close
        left = _alive(descendants)
        assert left == [], [p.cmdline() for p in left]
    finally:
        for p in _alive(descendants):
            p.kill()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert returncode == 128 + signum
    name = signal.Signals(signum).name
    assert err_path.read_text().strip() == (
        f"error: `esnfed retrain` stopped by {name}; its worker processes were stopped; finished work is "
        "saved, rerun to resume")
    assert not models.exists() or [p for p in models.rglob("*") if p.is_file()] == []
