"""The apps through Flower's own tooling: `esnfed flower-export` writes a share's deployment inputs,
`flwr run esnfed_flower/app` runs them on a SuperLink in simulation mode (the Simulation Engine:
FedIP, FedCLIP replay, and IncFed through SecAgg+) and on a SuperLink with four SuperNode
processes on loopback sockets (IncFed, FedIP), each SuperNode reading only its own client's file
(--node-config). The readout is the pipeline trial's of the same config and seed: equal bits for
the plain apps (one BLAS thread everywhere, as tests_flower/conftest.py's), within SecAgg+'s
quantization through SecAgg+. Every process is started here, on free ports chosen at run time,
and stopped in a finally; every wait is bounded.

What `flwr run` adds to an app is the same for every app: the project's two components hand the
run to the app its run config names, and Flower takes only the run-config keys the project
declares. Both are checked for every app without a run (the hand-over table below; every key of
every export declared); the apps themselves equal the pipeline in test_flower_apps.py and
test_flower_fedclip.py. So three apps run here, one of each kind of output: FedIP ((g, b) beside
the readout), FedCLIP (a model per context) and a SecAgg+ app."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from experiment_data import make_dataset, small_params, write_params  # noqa: E402

BIN = Path(sys.executable).parent  # the Flower environment's flwr, flower-superlink, flower-supernode
PIPELINE_PYTHON = REPO / ".venv" / "bin" / "python"
PCT = "100"  # four training users: four SuperNodes
ONE_THREAD = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _env(home: Path) -> dict:
    return {**os.environ, **ONE_THREAD, "PYTHONPATH": str(REPO), "FLWR_HOME": str(home),
            "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}


def _esnfed(root: Path, *args: str) -> str:
    proc = subprocess.run([str(PIPELINE_PYTHON), "-m", "esnfed_cli", *args, "--dataset", "wesad", "--pct", PCT,
                           "--params", str(root / "params.yaml"), "--data-dir", str(root / "data"),
                           "--runs-dir", str(root / "runs")],
                          cwd=root, capture_output=True, text=True, timeout=600,
                          env={**os.environ, **ONE_THREAD, "PYTHONPATH": str(REPO)})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def exports(tmp_path_factory) -> dict:
    """One dataset, the selected IncFed, FedIP, FedAvg and FedCLIP (naive, replay) configs and their
    exports (IncFed and FedIP also through SecAgg+): {(app, secagg): folder}."""
    root = tmp_path_factory.mktemp("flwr-run")
    make_dataset(root)
    write_params(root, small_params())
    out = {}
    for app in ("incfed", "fedip", "fedavg"):
        _esnfed(root, "select", "--algo", app)
        for secagg in (False, True) if app != "fedavg" else (False,):
            folder = root / f"export-{app}{'-secagg' if secagg else ''}"
            _esnfed(root, "flower-export", "--app", app, *(["--secagg"] if secagg else []), "--out", str(folder))
            out[(app, secagg)] = folder
    for strategy in ("naive", "replay"):  # FedCLIP, plain
        _esnfed(root, "select", "--algo", "fedclip", "--strategy", strategy)
        folder = root / f"export-fedclip-{strategy}"
        _esnfed(root, "flower-export", "--app", f"fedclip-{strategy}", "--out", str(folder))
        out[(f"fedclip-{strategy}", False)] = folder
    return out


@contextmanager
def _processes():
    """Start processes (each in its own session) and stop them all on exit: SIGTERM, then SIGKILL."""
    procs: list[subprocess.Popen] = []
    try:
        yield procs
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(timeout=10)


def _start(procs: list, home: Path, log: Path, *cmd: str) -> subprocess.Popen:
    p = subprocess.Popen([str(BIN / cmd[0]), *cmd[1:]], env=_env(home), stdout=log.open("w"),
                         stderr=subprocess.STDOUT, start_new_session=True)
    procs.append(p)
    return p


def _superlink(procs: list, home: Path, simulation: bool) -> int:
    """A SuperLink on loopback (insecure), the apps imported from this environment (no runtime
    installation), and the CLI's connection ``t`` to it in $FLWR_HOME/config.toml: the port of its HTTP
API, which serves the CLI (Control), the SuperNodes (Fleet) and the app processes (Runtime) in
flwr 1.42."""
    http = _free_port()
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.toml").write_text(f'[superlink]\ndefault = "t"\n\n[superlink.t]\n'
                                      f'address = "127.0.0.1:{http}"\ninsecure = true\n')
    p = _start(procs, home, home / "superlink.log", "flower-superlink", "--insecure", "--isolation", "subprocess",
               "--disable-runtime-dependency-installation", *(["--simulation"] if simulation else []),
               "--host", "127.0.0.1", "--port", str(http))
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:  # ready when its HTTP API accepts connections
        assert p.poll() is None, (home / "superlink.log").read_text()
        try:
            socket.create_connection(("127.0.0.1", http), timeout=1).close()
            return http
        except OSError:
            time.sleep(0.5)
    raise TimeoutError("flower-superlink did not listen within 60 s")


def _flwr_run(home: Path, export: Path, *extra: str) -> np.ndarray:
    """`flwr run esnfed_flower/app t -c <export>/run-config.toml --stream`: the readout it wrote."""
    proc = subprocess.run([str(BIN / "flwr"), "run", str(REPO / "esnfed_flower" / "app"), "t", "-c",
                           str(export / "run-config.toml"), *extra, "--stream"], env=_env(home), cwd=home,
                          capture_output=True, text=True, timeout=300)
    readout = export / "flower-readout.npy"
    assert proc.returncode == 0 and readout.is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return np.load(readout)


def _check(export: Path, got: np.ndarray) -> None:
    """The readout against the pipeline's (expected.json): equal plain, within quantization via SecAgg+."""
    expected = json.loads((export / "expected.json").read_text())
    want = np.load(export / "pipeline-readout.npy")
    assert got.shape == want.shape
    if not expected["secagg"]:
        np.testing.assert_array_equal(got, want)
    else:  # tests_flower/test_flower_apps.py's bound: SecAgg+'s 2^-22 quantization through the solve
        err = np.linalg.norm(got - want) / np.linalg.norm(want)
        assert 0 < err < 1e-3
    if expected["app"] == "fedip":  # FedIP's (g, b) too, which the server wrote beside the readout
        with np.load(str(export / "flower-readout.npy") + ".ip.npz") as f, np.load(export / "pipeline-ip.npz") as p:
            tol = {} if not expected["secagg"] else {"atol": 1e-5}
            for k in ("gain", "bias"):
                if tol:
                    np.testing.assert_allclose(f[k], p[k], **tol)
                else:
                    np.testing.assert_array_equal(f[k], p[k])
    if "pipeline_contexts" in expected:  # FedCLIP: the model after every context, not only the last
        with (np.load(str(export / "flower-readout.npy") + ".contexts.npz") as f,
              np.load(export / "pipeline-contexts.npz") as p):
            assert p["readout"].shape[0] > 1
            for k in ("gain", "bias", "readout"):
                np.testing.assert_array_equal(f[k], p[k])


def test_export_writes_one_file_and_node_config_per_client(exports):
    folder = exports[("incfed", False)]
    expected = json.loads((folder / "expected.json").read_text())
    lines = (folder / "node-config.txt").read_text().splitlines()
    assert expected["num-clients"] == len(lines) == 4
    for i, line in enumerate(lines):
        assert line.startswith(f"partition-id={i} num-partitions=4 ")
        data_file = Path(line.split("data-file=")[1].strip('"'))
        assert data_file == folder / "clients" / f"client-{i}.npz" and data_file.is_file()
    rc = (folder / "run-config.toml").read_text()
    assert 'app = "incfed"' in rc and "secagg = false" in rc and f"lambda = {expected['lambda']!r}" in rc
    assert 'secagg = true' in (exports[("incfed", True)] / "run-config.toml").read_text()


def test_every_export_sets_only_keys_the_app_project_declares(exports):
    """Flower refuses a run-config key that [tool.flwr.app.config] does not declare."""
    import tomllib

    declared = tomllib.loads((REPO / "esnfed_flower" / "app" / "pyproject.toml").read_text())
    declared = set(declared["tool"]["flwr"]["app"]["config"])
    for key, folder in exports.items():
        keys = set(tomllib.loads((folder / "run-config.toml").read_text()))
        assert keys and keys <= declared, (key, keys - declared)


# The app module each run config names, written out by hand (esnfed_flower/run.py's APPS is the table).
HANDED_TO = {("incfed", False): "incfed", ("fedip", False): "fedip", ("fedavg", False): "fedavg",
             ("fedclip-naive", False): "fedclip", ("fedclip-replay", False): "fedclip",
             ("fedclip-joint", False): "fedclip_joint", ("incfed", True): "secagg", ("fedip", True): "secagg_fedip",
             ("fedclip-naive", True): "secagg_fedclip", ("fedclip-replay", True): "secagg_fedclip"}


class _Context:
    def __init__(self, run_config: dict):
        self.run_config, self.node_config = run_config, {}


@pytest.mark.parametrize("key", sorted(HANDED_TO))
def test_the_project_hands_each_run_to_the_app_its_run_config_names(key, monkeypatch):
    from esnfed_flower import deploy
    from esnfed_flower.common import CONFIG_ENV

    monkeypatch.delenv(CONFIG_ENV, raising=False)  # the run config comes from flwr run alone
    assert deploy.chosen(_Context({"app": key[0], "secagg": key[1]})).__name__ == f"esnfed_flower.{HANDED_TO[key]}"


def test_a_run_config_naming_no_app_is_refused_naming_the_keys(monkeypatch):
    from esnfed_flower import deploy
    from esnfed_flower.common import CONFIG_ENV

    from esnfed_flower.run import APPS

    assert set(APPS) == set(HANDED_TO)  # every app of esnfed_flower.run's table is checked above
    monkeypatch.delenv(CONFIG_ENV, raising=False)
    with pytest.raises(ValueError, match="app='fedavg' secagg=True: no such Flower app"):
        deploy.chosen(_Context({"app": "fedavg", "secagg": True}))


def test_flwr_run_in_the_simulation_engine_equals_the_pipeline(exports, tmp_path):
    with _processes() as procs:
        _superlink(procs, tmp_path / "home", simulation=True)
        for key in (("fedip", False), ("fedclip-replay", False), ("incfed", True)):
            _check(exports[key], _flwr_run(tmp_path / "home", exports[key], "--federation-config",
                                           "num-supernodes=4"))


def test_flwr_run_on_a_superlink_and_four_supernodes_equals_the_pipeline(exports, tmp_path):
    home = tmp_path / "home"
    with _processes() as procs:
        link = _superlink(procs, home, simulation=False)
        lines = (exports[("incfed", False)] / "node-config.txt").read_text().splitlines()
        for i, line in enumerate(lines):  # each node only its own client's file
            _start(procs, home, home / f"supernode-{i}.log", "flower-supernode", "--insecure",
                   "--superlink", f"127.0.0.1:{link}", "--node-config", line, "--host", "127.0.0.1",
                   "--port", str(_free_port()))
        for key in (("incfed", False), ("fedip", False)):
            # the nodes read the incfed export's files: the same users as every export's
            _check(exports[key], _flwr_run(home, exports[key]))
