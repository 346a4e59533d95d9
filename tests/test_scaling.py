"""Scaling out and surviving faults: the same bytes from two runs of the whole pipeline and from
every trial backend (sequential, loky, Ray), a select killed with SIGKILL and resumed, failed
trials and retrains recorded and listed. Every test here runs stage commands end to end
(``pipeline``, hence ``slow``); the Ray one also starts a local Ray cluster (``ray``)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from esnfed_cli.main import app
from esnfed_core import trial as trial_mod
from experiment_data import make_dataset, small_params, write_params

pytestmark = pytest.mark.pipeline
runner = CliRunner()
ESNFED = str(Path(sys.executable).parent / "esnfed")
REPO_PARAMS = Path(__file__).resolve().parents[1] / "params.yaml"
EPOCH = "1700000000"

# The tiny pipeline: six synthetic WESAD subjects, a few seconds of each run.
SUBJECTS = ["S2", "S3", "S4", "S5", "S6", "S7"]
PARTITION = {"train": {25: ["S2"], 50: ["S2", "S3"], 75: ["S2", "S3", "S4"], 100: ["S2", "S3", "S4", "S5"]},
             "validation": ["S6"], "test": ["S7"]}
METHODS = [("random", None), ("ridge", None), ("incfed", None), ("fedavg", None), ("ip", None),
           ("fedip", None), ("fedclip", "naive")]
# FedCLIP runs IP, federated rounds and the continual loop: every part of a trial (its fedip
# selection, which it starts from, is copied from the loky run).
RAY_METHODS = [("fedclip", "naive")]


def _ok(args: list[str]) -> str:
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output + result.stderr
    return result.output


def _pipeline_params() -> dict:
    params = small_params()
    params["synthetic"]["wesad"].update(scale=0.005, subjects=SUBJECTS)
    params["preprocess"]["wesad"].update(subjects=SUBJECTS, window=350)
    params["partition"]["wesad"] = PARTITION
    params["plasticity"]["batch_size"] = 16
    return params


def _experiments(backend: str, methods=METHODS) -> None:
    jobs = ["--backend", backend, "--n-jobs", "1" if backend == "sequential" else "2"]
    for algo, strategy in methods:
        m = ["--dataset", "wesad", "--algo", algo, *(["--strategy", strategy] if strategy else [])]
        _ok(["select", *m, "--pct", "all", *jobs])
        _ok(["retrain", *m, *jobs])
        _ok(["assess", *m])


def _pipeline(root: Path, backend: str, monkeypatch) -> Path:
    """synthesize -> preprocess -> partition -> select -> retrain -> assess -> ttest -> report in
    ``root``, with the commands and default paths of dvc.yaml."""
    root.mkdir(parents=True)
    monkeypatch.chdir(root)
    write_params(root, _pipeline_params())
    for stage in ("synthesize", "preprocess", "partition"):
        _ok([stage, "--dataset", "wesad"])
    _experiments(backend)
    _ok(["ttest", "--allow-missing"])  # hhar and two continual strategies are not run
    _ok(["report", "--allow-missing"])
    return root


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """The pipeline twice from scratch: trials in this process, then in loky worker processes."""
    base = tmp_path_factory.mktemp("pipelines")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SOURCE_DATE_EPOCH", EPOCH)  # the date in the table headers
        return {backend: _pipeline(base / backend, backend, mp) for backend in ("sequential", "loky")}


def _files(folder: Path, pattern: str = "*") -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob(pattern)) if p.is_file()}


def test_reports_are_byte_identical_across_runs_and_backends(runs):
    ref, other = runs["sequential"], runs["loky"]
    tables = _files(ref / "reports" / "tables")
    assert {"ijcnn-wesad.md", "ijcnn-wesad.csv", "fedip.md", "communication.csv"} <= set(tables)
    metrics = json.loads((ref / "reports" / "metrics" / "wesad-fedip.json").read_text())
    assert set(metrics["test"]) == {"025", "050", "075", "100"}  # a real document, not an empty one
    for sub in ("data", "runs/assess"):
        assert _files(other / sub) == _files(ref / sub), sub
    assert (other / "reports" / "ttest.json").read_bytes() == (ref / "reports" / "ttest.json").read_bytes()
    for sub in ("tables", "plots", "figures", "metrics"):
        assert _files(other / "reports" / sub) == _files(ref / "reports" / sub), sub


def _records(root: Path, methods: list[str] | None = None) -> dict[str, dict]:
    """Every select record (trials and best.json) without the wall time, the one field that may differ."""
    out = {}
    for path in sorted((root / "runs" / "select").rglob("*.json")):
        if methods is None or path.parts[-3] in methods:
            rec = json.loads(path.read_text())
            rec.pop("seconds", None)
            out[path.relative_to(root).as_posix()] = rec
    return out


def _same_records(a: dict[str, dict], b: dict[str, dict]) -> None:
    assert sorted(a) == sorted(b)
    diff = [(name, f, a[name][f], b[name].get(f)) for name in a for f in a[name] if a[name][f] != b[name].get(f)]
    diff.sort(key=lambda d: ("fedclip" in d[0], d[0]))
    assert not diff, diff[:3]  # (file, field, one value, the other)


def _same_models(a_root: Path, b_root: Path, methods: list[str]) -> int:
    """Assert the saved models hold the same arrays (npz bytes differ by zip timestamps only)."""
    n = 0
    for method in methods:
        for path in sorted((a_root / "runs" / "models" / "wesad" / method).rglob("*.npz")):
            other = b_root / path.relative_to(a_root)
            with np.load(path) as a, np.load(other) as b:
                assert a.files == b.files
                for k in a.files:
                    assert a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k], equal_nan=True), (path, k)
            n += 1
    return n


def _ids(methods) -> list[str]:
    return [f"{a}-{s}" if s else a for a, s in methods]


def test_trials_and_models_are_the_same_bits_in_worker_processes(runs):
    ref = _records(runs["sequential"])
    assert len(ref) > 30 and all(r.get("status", "ok") == "ok" for r in ref.values())
    _same_records(_records(runs["loky"]), ref)  # floats compared exactly (JSON round-trips them)
    assert _same_models(runs["sequential"], runs["loky"], _ids(METHODS)) == len(METHODS) * 4 * 2


@pytest.fixture(scope="module")
def ray_run(runs, tmp_path_factory):
    """The Ray backend on a local 2-CPU instance started here (the stage attaches to it): select,
    retrain and assess of RAY_METHODS on the data of the sequential run."""
    import ray  # noqa: PLC0415 (only the Ray test pays for importing Ray)

    root = tmp_path_factory.mktemp("ray")
    shutil.copytree(runs["sequential"] / "data", root / "data")
    shutil.copy(runs["sequential"] / "params.yaml", root / "params.yaml")
    shutil.copytree(runs["loky"] / "runs" / "select" / "wesad" / "fedip", root / "runs" / "select" / "wesad" / "fedip")
    # Started before changing into root: Ray workers keep this working directory, so the stages'
    # relative paths (--data-dir data) must reach them as absolute ones.
    ray.init(num_cpus=2, include_dashboard=False, logging_level="warning")
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.chdir(root)
            _experiments("ray", RAY_METHODS)
        actors = ray._private.state.actors()  # the GCS table: no dashboard needed
        yield root, {a["ActorClassName"] for a in actors.values()}
    finally:
        ray.shutdown()


@pytest.mark.ray
def test_ray_backend_gives_the_same_bits_as_the_local_backends(runs, ray_run):
    root, actor_classes = ray_run
    assert any("PoolActor" in c for c in actor_classes)  # the trials really ran in Ray workers
    methods = _ids(RAY_METHODS)
    ref = runs["loky"]
    assert len(_records(root, methods)) == 4 * 2  # one trial per share (budget grid of 1) + best.json
    _same_records(_records(root, methods), _records(ref, methods))
    assert _same_models(ref, root, methods) == len(methods) * 4 * 2
    for m in methods:
        name = f"runs/assess/wesad/{m}.json"
        assert (root / name).read_bytes() == (ref / name).read_bytes(), m


# ---------------------------------------------------------------- surviving faults
def _fixture(root: Path, trials: int, **runner_cfg) -> Path:
    make_dataset(root, windows_per_context=30, steps=100)
    params = small_params(**runner_cfg)
    params["budgets"]["default"]["trials"] = trials
    params["budgets"]["default"]["space"]["wesad"]["units"] = [300]  # ~0.5 s per trial
    return write_params(root, params)


@pytest.mark.sigkill
def test_sigkill_mid_select_then_rerun_completes_without_repeating(tmp_path, monkeypatch):
    trials = 8
    params = _fixture(tmp_path, trials, backend="loky", n_jobs=2)
    args = ["select", "--dataset", "wesad", "--algo", "ridge", "--pct", "25", "--params", str(params),
            "--data-dir", str(tmp_path / "data"), "--runs-dir", str(tmp_path / "runs")]
    out = tmp_path / "runs" / "select" / "wesad" / "ridge" / "25"
    # Its own session, so the kill reaches the loky workers too (as a job scheduler's would).
    proc = subprocess.Popen([ESNFED, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            start_new_session=True)
    deadline = time.monotonic() + 120
    while len(list(out.glob("trial-*.json"))) < 2:
        assert proc.poll() is None, proc.stderr.read().decode()
        assert time.monotonic() < deadline
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    done = {p.name: (p.stat().st_ino, p.stat().st_mtime_ns, p.read_bytes()) for p in out.glob("trial-*.json")}
    assert 2 <= len(done) < trials and not (out / "best.json").exists()
    for name, (_, _, data) in done.items():
        assert json.loads(data)["status"] == "ok", name  # complete, never a partial file

    # Rerun in this process (sequential) counting the trials actually executed.
    executed = []
    real_fit = trial_mod.fit

    def counting_fit(method, config, seed, *a, **kw):
        executed.append(seed)
        return real_fit(method, config, seed, *a, **kw)

    monkeypatch.setattr(trial_mod, "fit", counting_fit)
    _ok([*args, "--backend", "sequential", "--n-jobs", "1"])
    files = sorted(out.glob("trial-*.json"))
    assert [p.name for p in files] == [f"trial-{i:04d}.json" for i in range(trials)]
    records = {p.name: json.loads(p.read_text()) for p in files}  # every file parses
    assert all(r["status"] == "ok" for r in records.values())
    assert sorted(executed) == sorted(r["seed"] for n, r in records.items() if n not in done)
    for name, (inode, mtime, data) in done.items():
        p = out / name
        assert (p.stat().st_ino, p.stat().st_mtime_ns, p.read_bytes()) == (inode, mtime, data)
    best = json.loads((out / "best.json").read_text())
    assert best["n_trials"] == trials
    assert not [p.name for p in out.iterdir() if p.name.endswith(".tmp")]


def _flaky(monkeypatch, bad_seeds: set[int]) -> None:
    real_fit = trial_mod.fit

    def fit(method, config, seed, *a, **kw):
        if seed in bad_seeds:
            raise FloatingPointError("reservoir diverged")
        return real_fit(method, config, seed, *a, **kw)

    monkeypatch.setattr(trial_mod, "fit", fit)


def _common(root: Path) -> list[str]:
    return ["--dataset", "wesad", "--algo", "ridge", "--params", str(root / "params.yaml"),
            "--data-dir", str(root / "data"), "--runs-dir", str(root / "runs")]


def test_failed_trials_are_listed_and_the_stage_exits_1(tmp_path, monkeypatch):
    make_dataset(tmp_path)
    params = small_params()
    params["budgets"]["default"]["trials"] = 3
    write_params(tmp_path, params)
    runs = tmp_path / "runs" / "select" / "wesad" / "ridge"
    seeds = {}
    for pct in ("25", "50"):  # learn the seeds of trials 1 (25 %) and 2 (50 %) from a clean run
        _ok(["select", *_common(tmp_path), "--pct", pct])
        seeds[pct] = [json.loads((runs / pct / f"trial-{i:04d}.json").read_text())["seed"] for i in range(3)]
    shutil.rmtree(tmp_path / "runs")
    _flaky(monkeypatch, {seeds["25"][1], seeds["50"][2]})
    result = runner.invoke(app, ["select", *_common(tmp_path), "--pct", "all"])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == [
        "error: 2 trial(s) failed:",
        "  25% #1: FloatingPointError: reservoir diverged",
        "  50% #2: FloatingPointError: reservoir diverged",
    ]
    for pct in ("25", "50", "75", "100"):  # the other trials all finished
        recs = [json.loads((runs / pct / f"trial-{i:04d}.json").read_text()) for i in range(3)]
        failed = [r["index"] for r in recs if r["status"] == "failed"]
        assert failed == {"25": [1], "50": [2]}.get(pct, [])
        assert (runs / pct / "best.json").exists() == (not failed)
    rec = json.loads((runs / "25" / "trial-0001.json").read_text())
    assert rec["error"] == "FloatingPointError: reservoir diverged" and "Traceback" in rec["traceback"]


def test_failed_retrains_are_recorded_listed_and_redone(tmp_path, monkeypatch):
    make_dataset(tmp_path)
    write_params(tmp_path, small_params())
    _ok(["select", *_common(tmp_path), "--pct", "all"])
    models = tmp_path / "runs" / "models" / "wesad" / "ridge"
    _ok(["retrain", *_common(tmp_path), "--pct", "25"])
    bad = json.loads((models / "25" / "seed-1.json").read_text())["seed"]
    shutil.rmtree(tmp_path / "runs" / "models")
    real_fit = trial_mod.fit
    _flaky(monkeypatch, {bad})
    result = runner.invoke(app, ["retrain", *_common(tmp_path)])
    assert result.exit_code == 1
    assert result.stderr.splitlines() == ["error: 1 retrain(s) failed:",
                                          "  25% #1: FloatingPointError: reservoir diverged"]
    failed = json.loads((models / "25" / "seed-1.failed.json").read_text())
    assert failed["seed"] == bad and failed["error"] == "FloatingPointError: reservoir diverged"
    assert not (models / "25" / "seed-1.npz").exists()
    for pct in ("50", "75", "100"):
        assert sorted(p.name for p in (models / pct).iterdir()) == [
            "seed-0.json", "seed-0.npz", "seed-1.json", "seed-1.npz"]
    monkeypatch.setattr(trial_mod, "fit", real_fit)
    _ok(["retrain", *_common(tmp_path)])
    assert sorted(p.name for p in (models / "25").iterdir()) == [
        "seed-0.json", "seed-0.npz", "seed-1.json", "seed-1.npz"]


RAY_PROBE = """
import json, os, psutil, ray
from esnfed_stages.experiment import ray_backend
from esnfed_stages.params.experiment import RunnerConfig
from joblib import Parallel, delayed, parallel_backend
ray_backend.setup(RunnerConfig(backend="ray", n_jobs=1))
with parallel_backend("ray"):
    work = Parallel(n_jobs=2)(delayed(abs)(-i) for i in range(3))  # tasks run on the local node
nodes = [n["NodeManagerAddress"] for n in ray.nodes()]
listening = set()
for p in psutil.Process().children(recursive=True):
    try:
        listening |= {(p.name(), c.laddr.ip) for c in p.net_connections("inet") if c.status == psutil.CONN_LISTEN}
    except psutil.Error:
        pass
ray.shutdown()
env = os.environ.get("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER")
print(json.dumps({"nodes": nodes, "listening": sorted(listening), "env": env, "work": work}))
"""


def test_local_ray_instance_listens_on_the_loopback_only(tmp_path):
    """backend ray without RAY_ADDRESS: the node address and every listening socket of Ray's
    processes (GCS, raylet, workers, agents) are on 127.0.0.1, not on all interfaces."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    proc = subprocess.run([sys.executable, "-c", RAY_PROBE], capture_output=True, text=True, env=env,
                          cwd=tmp_path, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["nodes"] == ["127.0.0.1"] and seen["work"] == [0, 1, 2]
    names = {name for name, _ in seen["listening"]}
    assert {"gcs_server", "raylet"} <= names  # the servers were found, so the check below means something
    assert all(ip in ("127.0.0.1", "::ffff:127.0.0.1") for _, ip in seen["listening"]), seen["listening"]
    assert seen["env"] is None  # the switch was only set while Ray started
