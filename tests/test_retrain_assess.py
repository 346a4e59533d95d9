"""select -> retrain -> assess through the CLI on a tiny dataset: the assess JSON contract, its
invariants, determinism, resumed retraining, and the saved-model format read by numpy alone."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from esnfed_cli.main import app
from esnfed_core.errors import DataError
from esnfed_core.method import Method
from esnfed_core.metrics import gaussian_kl
from esnfed_core.reservoir import MAX_UNITS
from esnfed_stages.experiment import assess as assess_stage
from esnfed_stages.experiment import retrain as retrain_stage
from esnfed_stages.experiment import select as select_stage
from esnfed_core.vocabulary import PCTS
from esnfed_stages.params.experiment import experiment_params
from esnfed_stages.experiment.models import check_best_config, load_model
from esnfed_stages.params.schema import embedded_read
from experiment_data import TEST, TRAIN, cli_ok, make_dataset, run_method_stages, small_params, write_params

# (algo, strategy): stationary and continual, centralised and federated, in dependency order.
METHODS = [("random", None), ("ridge", None), ("incfed", None), ("fedavg", None), ("ip", None),
           ("fedip", None), ("clip", "replay"), ("fedclip", "naive"), ("fedclip", "joint")]
RETRAINS = 2
runner = CliRunner()


_invoke = cli_ok


def _pipeline(root: Path) -> None:
    make_dataset(root)
    params = small_params()
    params["budgets"]["default"]["retrains"] = RETRAINS
    write_params(root, params)
    run_method_stages(root, "wesad", METHODS)


def _method_id(algo: str, strategy: str | None) -> str:
    return Method(algo, strategy).id


@pytest.fixture(scope="module")
def run_a(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("a")
    _pipeline(root)
    return root


def _contract_keys(section: str) -> set[str]:
    """The keys docs/assess-contract.md lists in the table of ``section`` ("1" or "2")."""
    text = (Path(__file__).resolve().parents[1] / "docs" / "assess-contract.md").read_text(encoding="utf-8")
    body = re.split(r"^## \d+\. .*$", text, flags=re.MULTILINE)[int(section)]
    return {k for row in re.findall(r"^\| (`[^|]+)\|", body, re.MULTILINE) for k in re.findall(r"`([^`]+)`", row)}


def _assess(root: Path, method: str) -> dict:
    return json.loads((root / "runs" / "assess" / "wesad" / f"{method}.json").read_text())


@pytest.mark.parametrize("algo, strategy", METHODS)
def test_assess_json_follows_the_contract(run_a, algo, strategy):
    m = Method(algo, strategy)
    doc = _assess(run_a, m.id)
    assert set(doc) == {"dataset", "method", "algo", "strategy", "budget", "budget_digest", "source", "pcts"}
    # the contract documents what assess writes (alpha: align; params: heterogeneous methods)
    assert _contract_keys("1") == set(doc) | {"alpha", "params"}
    assert _contract_keys("2") == set(doc["pcts"]["100"]) | {"client_test_accuracy"}  # (align / heterogeneous)
    assert (doc["dataset"], doc["method"], doc["algo"], doc["strategy"]) == ("wesad", m.id, algo, strategy)
    assert (doc["budget"], doc["source"]) == ("default", "synthetic")
    assert set(doc["pcts"]) == set(PCTS)
    for pct, row in doc["pcts"].items():
        assert set(row) == {"seeds", "test_accuracy", "train_accuracy", "stream_accuracy", "accuracy_matrix",
                            "communication", "config", "lambda", "activation"}
        if algo == "random":
            assert row["lambda"] is None
        else:
            assert len(row["lambda"]) == RETRAINS
        assert len(row["seeds"]) == len(set(row["seeds"])) == RETRAINS
        assert len(row["test_accuracy"]) == RETRAINS and all(0 <= a <= 1 for a in row["test_accuracy"])
        assert (row["train_accuracy"] is not None) == (algo in ("random", "ridge", "incfed", "fedavg"))
        assert (row["communication"] is not None) == m.federated
        if m.federated:
            comm = row["communication"]
            assert set(comm) == {"up_floats", "down_floats", "up_bytes", "down_bytes", "rounds", "clients"} | (
                {"participants", "context_rounds"} if m.continual else set())  # FedCLIP: who sent at each context
            assert comm["clients"] == len(TRAIN[pct]) and comm["up_floats"] > 0 and comm["rounds"] >= 1
        if m.continual:
            t = 3
            assert all(len(s) == t for s in row["stream_accuracy"])
            assert all(np.shape(mat) == (t, t) for mat in row["accuracy_matrix"])
            assert row["test_accuracy"] == [s[-1] for s in row["stream_accuracy"]]
        else:
            assert row["stream_accuracy"] is None and row["accuracy_matrix"] is None
        if m.uses_ip:  # wesad is in assess.activation_datasets
            act = row["activation"]
            dens, users = np.array(act["density"]), np.array(act["user_density"])
            edges = np.array(act["edges"])
            models = 3 if m.continual else 1  # after each context / the final reservoir
            assert act["users"] == TEST and act["models"] == ("after_each_context" if m.continual else "final")
            assert dens.shape == (RETRAINS, models, 3, len(edges) - 1) and edges[0] == -1 and edges[-1] == 1
            assert users.shape == (RETRAINS, models, len(TEST), 3, len(edges) - 1)
            np.testing.assert_allclose(dens @ np.diff(edges), 1.0)
            np.testing.assert_allclose(users @ np.diff(edges), 1.0)
            # Equal windows per user and context in the fixture: pooled = mean over the users.
            np.testing.assert_allclose(dens, users.mean(axis=2), atol=1e-12)
            assert not np.array_equal(dens[0], dens[1])  # every retrain, not the first one only
            # the fit to the IP target: the selected σ, params.yaml's μ; the pooled KL is that of the
            # densities drawn, every context together (equal contexts here: their mean)
            assert act["target"] == {"mu": 0.0, "sigma": row["config"]["sigma"]}
            kl, unit_kl = np.array(act["kl"]), np.array(act["unit_kl"])
            assert kl.shape == unit_kl.shape == (RETRAINS, models)
            want = [[gaussian_kl(d.mean(axis=0) * np.diff(edges), edges, 0.0, act["target"]["sigma"]) for d in r]
                    for r in dens]
            np.testing.assert_allclose(kl, want, rtol=1e-9)
            assert (unit_kl >= kl - 1e-9).all()  # units pooled: their mixture (convexity, DP eq. 6)
            no_ip, no_ip_unit = np.array(act["no_ip_kl"]), np.array(act["no_ip_unit_kl"])
            assert no_ip.shape == no_ip_unit.shape == (RETRAINS,) and np.isfinite(no_ip).all()
            assert (no_ip_unit >= no_ip - 1e-9).all() and not np.allclose(no_ip, kl[:, -1])
        else:
            assert row["activation"] is None


def test_incfed_equals_ridge_and_fedavg_differs_only_by_its_readout(run_a):
    ridge, inc = _assess(run_a, "ridge"), _assess(run_a, "incfed")
    for pct in PCTS:
        a, b = ridge["pcts"][pct], inc["pcts"][pct]
        assert a["seeds"] == b["seeds"] and a["config"] == b["config"]
        np.testing.assert_allclose(b["test_accuracy"], a["test_accuracy"], atol=1e-9)
        np.testing.assert_allclose(b["train_accuracy"], a["train_accuracy"], atol=1e-9)
        n, c, k = a["config"]["units"], 3, len(TRAIN[pct])
        assert b["communication"]["up_floats"] == k * (n * n + n * c)
    # FedAvg on the single client of the 25% share is ridge.
    fedavg = _assess(run_a, "fedavg")["pcts"]["25"]
    if fedavg["config"] == ridge["pcts"]["25"]["config"]:
        np.testing.assert_allclose(fedavg["test_accuracy"], ridge["pcts"]["25"]["test_accuracy"], atol=1e-9)


def test_random_baseline_is_near_one_over_c(run_a):
    doc = _assess(run_a, "random")
    accs = [a for row in doc["pcts"].values() for a in row["test_accuracy"]]
    steps = len(TEST) * 3 * 4 * 12  # users x contexts x windows x steps of the fixture
    assert abs(np.mean(accs) - 1 / 3) < 5 * np.sqrt((1 / 3) * (2 / 3) / steps)


def test_stream_accuracy_is_consistent_with_the_accuracy_matrix(run_a):
    """Equal contexts sizes in the fixture: stream after i = mean of row i over contexts 0..i."""
    for method in ("clip-replay", "fedclip-naive", "fedclip-joint"):
        for row in _assess(run_a, method)["pcts"].values():
            for stream, mat in zip(row["stream_accuracy"], row["accuracy_matrix"]):
                mat = np.array(mat)
                expected = [mat[i, : i + 1].mean() for i in range(len(mat))]
                np.testing.assert_allclose(stream, expected, atol=1e-12)


def _numpy_accuracy(npz: Path, users: list[Path]) -> float:
    """The recipe of docs/reference.md, "Saved models", with numpy only: no esnfed code."""
    m = np.load(npz, allow_pickle=False)
    w_in, w, a = m["w_in"].astype(np.float64), m["w"].astype(np.float64), float(m["leak"])
    g, b, readout = m["gain"].astype(np.float64), m["bias"].astype(np.float64), m["readout"]
    correct = total = 0
    for path in users:
        u = np.load(path, allow_pickle=False)
        x_all, y_all = u["x"].astype(np.float64), u["y"]
        state = np.zeros((len(x_all), w.shape[0]))
        for t in range(x_all.shape[1]):
            h = np.tanh(g * (x_all[:, t] @ w_in.T + state @ w.T) + b)
            state = (1 - a) * state + a * h
            correct += int(((state @ readout.T).argmax(axis=1) == y_all[:, t]).sum())
            total += len(x_all)
    return correct / total


@pytest.mark.parametrize("method", ["ridge", "fedip"])
def test_saved_models_reproduce_the_reported_test_accuracy_with_numpy_alone(run_a, method):
    doc = _assess(run_a, method)
    for pct in ("25", "100"):
        directory = run_a / "runs" / "models" / "wesad" / method / pct
        for k, reported in enumerate(doc["pcts"][pct]["test_accuracy"]):
            meta = json.loads((directory / f"seed-{k}.json").read_text())
            assert meta["seed"] == doc["pcts"][pct]["seeds"][k] and meta["format"] == "esnfed-model"
            with np.load(directory / f"seed-{k}.npz", allow_pickle=False) as z:
                assert {n: [list(z[n].shape), str(z[n].dtype)] for n in z.files} == {
                    n: [v["shape"], v["dtype"]] for n, v in meta["arrays"].items()}
            users = [run_a / "data" / "processed" / "wesad" / f"{u}.npz" for u in TEST]
            # float64 here vs float32 in the pipeline: at most a couple of near-tie steps differ.
            assert _numpy_accuracy(directory / f"seed-{k}.npz", users) == pytest.approx(reported, abs=3 / 288)


def test_two_runs_give_byte_identical_assess_json(run_a, tmp_path):
    _pipeline(tmp_path)
    for algo, strategy in METHODS:
        name = f"{_method_id(algo, strategy)}.json"
        assert ((tmp_path / "runs" / "assess" / "wesad" / name).read_bytes()
                == (run_a / "runs" / "assess" / "wesad" / name).read_bytes()), name


def test_retrain_resumes_and_recomputes_a_corrupt_model(run_a, tmp_path):
    import shutil

    shutil.copytree(run_a, tmp_path / "r")
    root = tmp_path / "r"
    params = small_params()
    params["budgets"]["default"]["retrains"] = RETRAINS
    kw = {"data_dir": root / "data", "runs_dir": root / "runs"}
    directory = root / "runs" / "models" / "wesad" / "incfed" / "50"
    good = (directory / "seed-1.npz").read_bytes()
    (directory / "seed-1.npz").write_bytes(good[:100])  # truncated: hash no longer matches
    # the message names the file at fault: here the .npz, whose bytes no longer match its .json
    with pytest.raises(DataError, match=r"50/seed-1\.npz: contents differ from the npz_sha256 in seed-1\.json"):
        assess_stage.run("wesad", Method("incfed"), experiment_params(params), **kw)
    for name, fragment in (("seed-1.json", r"50/seed-1\.json: not found"),
                           ("seed-0.npz", r"50/seed-0\.npz: not found")):
        keep = (directory / name).read_bytes()
        (directory / name).unlink()
        with pytest.raises(DataError, match=fragment):
            load_model(directory, int(name[5]))
        (directory / name).write_bytes(keep)
    result = retrain_stage.run("wesad", Method("incfed"), list(PCTS), experiment_params(params), **kw)
    assert [(s.resumed, s.ran) for s in result.shares] == [(2, 0), (1, 1), (2, 0), (2, 0)]
    assert (directory / "seed-1.npz").read_bytes() == good
    model, meta = load_model(directory, 1)
    assert model.readout.shape == (3, meta["units"]) and meta["pct"] == "50"


@pytest.mark.parametrize("edit, fragment", [
    (lambda c: c.update(units="big"), "config.units: expected a finite number, got 'big'"),
    (lambda c: c.update(leak=float("nan")), "config.leak: expected a finite number, got nan"),
    (lambda c: c.pop("leak"), "config of incfed: missing hyperparameter(s) leak"),
    # input audit: before, an unknown key was carried into the models and assess JSON (exit 0)
    (lambda c: c.update(leka=0.5), "config.leka: not a hyperparameter of incfed (expected units, "),
    # leftovers of the input audit: a value out of the search space's range was one MemoryError
    # (10^9 units) or ParameterError per retrain seed
    (lambda c: c.update(units=10**9), f"config.units: must be <= {MAX_UNITS}, got 1000000000"),
    (lambda c: c.update(units=40.5), "config.units: expected an integer, got 40.5"),
    (lambda c: c.update(leak=5), "config.leak: must be <= 1.0, got 5"),
    (lambda c: c.update(spectral_radius=-0.9), "config.spectral_radius: must be > 0.0, got -0.9"),
])
def test_a_malformed_best_config_is_one_error_naming_best_json(run_a, tmp_path, edit, fragment):
    """A hand-edited best.json stops retrain (and the continual/deep select reading it) with one
    DataError naming the file and key, before any retrain runs: no failure records, models kept."""
    import shutil

    shutil.copytree(run_a, tmp_path / "r")
    root = tmp_path / "r"
    params = small_params()
    params["budgets"]["default"]["retrains"] = RETRAINS
    best = root / "runs" / "select" / "wesad" / "incfed" / "50" / "best.json"
    doc = json.loads(best.read_text())
    edit(doc["config"])
    best.write_text(json.dumps(doc))
    models = root / "runs" / "models" / "wesad" / "incfed"
    before = {p: p.read_bytes() for p in sorted(models.rglob("*")) if p.is_file()}
    with pytest.raises(DataError, match=re.escape(f"{best}: {fragment}")):
        retrain_stage.run("wesad", Method("incfed"), list(PCTS), experiment_params(params),
                          data_dir=root / "data", runs_dir=root / "runs")
    assert {p: p.read_bytes() for p in sorted(models.rglob("*")) if p.is_file()} == before
    ip_best = root / "runs" / "select" / "wesad" / "ip" / "50" / "best.json"
    doc = json.loads(ip_best.read_text())
    edit(doc["config"])
    ip_best.write_text(json.dumps(doc))
    with pytest.raises(DataError, match=re.escape(f"{ip_best}: {fragment.replace('incfed', 'ip')}")):
        select_stage.run("wesad", Method("clip", "replay"), ["50"], experiment_params(params),
                         data_dir=root / "data", runs_dir=root / "runs")


@pytest.mark.parametrize("edit, fragment", [
    (lambda d: d.pop("seeds"), "missing key 'seeds'"),
    (lambda d: d.update(seed="7"), "seed: expected int, got '7'"),
])
def test_an_edited_model_json_is_one_error_naming_it(run_a, tmp_path, edit, fragment):
    """The .json's fields are read back by assess; the npz hash does not cover them."""
    _assess_with_an_edited_model_json(run_a, tmp_path, edit,
                                      lambda js: f"{js}: {fragment} (delete seed-0.json and run `esnfed retrain`)")


@pytest.mark.parametrize("edit, fragment", [
    (lambda d: d.update(communication="lots"), "communication: expected an object of message counts or null, "
                                               "got 'lots'"),
    (lambda d: d.update(communication=None), "communication: missing (a federated method records its messages)"),
    (lambda d: d["communication"].update(up_bytes=-1), "communication.up_bytes: expected an integer >= 0, got -1"),
])
def test_a_malformed_model_communication_is_one_error_naming_it(run_a, tmp_path, edit, fragment):
    """Leftovers of the input audit: assess copied any `communication` of a model's .json into the
    assess file, whose communication table then skipped it."""
    _assess_with_an_edited_model_json(run_a, tmp_path, edit,
                                      lambda js: f"{js}: {fragment} (delete seed-0.json and run `esnfed retrain`)")


def test_an_out_of_range_model_config_is_one_error_naming_it(run_a, tmp_path):
    """A model's .json config is checked against the search space's ranges, as best.json's is."""
    _assess_with_an_edited_model_json(run_a, tmp_path, lambda d: d["config"].update(units=10**9),
                                      lambda js: f"{js}: config.units: must be <= {MAX_UNITS}, got 1000000000")


def test_the_cli_refuses_an_absurd_best_config_in_one_line_writing_nothing(run_a, tmp_path):
    """`esnfed retrain` on a best.json of 10^9 units: exit 1, one line naming the file and key,
    and no model or failure record written (before: one MemoryError per retrain seed)."""
    import shutil

    shutil.copytree(run_a, tmp_path / "r")
    root = tmp_path / "r"
    best = root / "runs" / "select" / "wesad" / "ridge" / "50" / "best.json"
    doc = json.loads(best.read_text())
    doc["config"]["units"] = 10**9
    best.write_text(json.dumps(doc))
    models = root / "runs" / "models" / "wesad" / "ridge"
    shutil.rmtree(models)
    res = runner.invoke(app, ["retrain", "--dataset", "wesad", "--algo", "ridge", "--params",
                              str(root / "params.yaml"), "--data-dir", str(root / "data"),
                              "--runs-dir", str(root / "runs")])
    assert res.exit_code == 1
    assert res.stderr.strip() == f"error: {best}: config.units: must be <= {MAX_UNITS}, got 1000000000"
    assert not [p for p in models.rglob("*") if p.is_file() and not p.name.startswith(".")]


@pytest.mark.parametrize("config, fragment", [
    ({"layers": 0}, "config.layers: must be >= 1, got 0"),
    ({"layers": 2.0}, "config.layers: expected an integer, got 2.0"),
    ({"units": 3, "layers": 4}, "config.layers: 4 layers cannot share 3 units (at least one each)"),
])
def test_a_deep_config_out_of_range_is_one_error(tmp_path, config, fragment):
    good = {"units": 40, "spectral_radius": 0.9, "leak": 0.5, "input_scaling": 1.0, "layers": 2}
    check_best_config(tmp_path / "best.json", Method.parse("deep-incfed"), good)  # in range: accepted
    with pytest.raises(DataError, match=re.escape(f"{tmp_path / 'best.json'}: {fragment}")):
        check_best_config(tmp_path / "best.json", Method.parse("deep-incfed"), {**good, **config})


@pytest.mark.parametrize("kind, problem", [("dir", "is a directory, expected a file"),
                                           ("fifo", "is not a regular file: a named pipe (FIFO)")])
def test_a_best_json_or_model_file_that_is_a_folder_or_a_fifo_is_named_as_such(run_a, tmp_path, kind, problem):
    """Before: "<path>: not found" for a path that exists (a FIFO is never opened: it would block)."""
    import os
    import shutil

    shutil.copytree(run_a, tmp_path / "r")
    root = tmp_path / "r"
    common = ["--dataset", "wesad", "--algo", "ridge", "--params", str(root / "params.yaml"),
              "--data-dir", str(root / "data"), "--runs-dir", str(root / "runs")]
    paths = [root / "runs" / "select" / "wesad" / "ridge" / "50" / "best.json",
             root / "runs" / "models" / "wesad" / "ridge" / "50" / "seed-0.npz"]
    for path, command in zip(paths, ("retrain", "assess")):
        path.unlink()
        path.mkdir() if kind == "dir" else os.mkfifo(path)
        res = runner.invoke(app, [command, *common])
        assert res.exit_code == 1, res.output
        assert res.stderr.strip().startswith(f"error: {path}: {problem}"), res.stderr


def _assess_with_an_edited_model_json(run_a, tmp_path, edit, message) -> None:
    """Copy run A, apply ``edit`` to one model's .json, and assert that assess refuses it with
    ``message(path of the .json)``."""
    import shutil

    shutil.copytree(run_a, tmp_path / "r")
    root = tmp_path / "r"
    js = root / "runs" / "models" / "wesad" / "incfed" / "50" / "seed-0.json"
    doc = json.loads(js.read_text())
    edit(doc)
    js.write_text(json.dumps(doc))
    params = small_params()
    params["budgets"]["default"]["retrains"] = RETRAINS
    with pytest.raises(DataError, match=re.escape(message(js))):
        assess_stage.run("wesad", Method("incfed"), experiment_params(params), data_dir=root / "data",
                         runs_dir=root / "runs")


def test_repeated_strategies_run_each_continual_algo_under_each_in_the_order_given():
    """`--algo clip --algo fedclip --strategy naive --strategy joint` (dvc.yaml's continual stages
    give all three): every continual algo under every strategy, algo by algo, repeats dropped; a
    stationary algo given a strategy, or a continual one none, is a usage error."""
    import typer

    from esnfed_cli.experiment_cmds import _runs
    from esnfed_core.vocabulary import Algo, Strategy

    params = small_params()
    runs = _runs(params, ["wesad"], [Algo.clip, Algo.fedclip],
                 [Strategy.naive, Strategy.joint, Strategy.naive], None)
    assert [(ds, m.id) for ds, m in runs] == [("wesad", "clip-naive"), ("wesad", "clip-joint"),
                                            ("wesad", "fedclip-naive"), ("wesad", "fedclip-joint")]
    with pytest.raises(typer.BadParameter, match="ip is not a continual method and takes no strategy"):
        _runs(params, ["wesad"], [Algo.ip], [Strategy.naive, Strategy.replay], None)
    with pytest.raises(typer.BadParameter, match="clip needs --strategy"):
        _runs(params, ["wesad"], [Algo.clip], None, None)


def test_cli_usage_and_input_errors(run_a):
    res = runner.invoke(app, ["select", "--dataset", "wesad", "--algo", "clip", "--runs-dir", str(run_a / "runs")])
    assert res.exit_code == 2 and "--strategy" in res.output  # usage errors (Typer's exit 2)
    res = runner.invoke(app, ["select", "--dataset", "mnist", "--algo", "ridge"])
    assert res.exit_code == 2 and "--dataset" in res.output
    res = runner.invoke(app, ["retrain", "--dataset", "wesad", "--algo", "lasso"])
    assert res.exit_code == 2  # Typer's usage error
    res = runner.invoke(app, ["assess", "--dataset", "wesad", "--algo", "ridge", "--params",
                              str(run_a / "params.yaml"), "--data-dir", str(run_a / "nowhere")])
    assert res.exit_code == 1 and "manifest" in res.output


# ------------------------------------------- issue: input audit (a consistent but hostile model pair)
def _rehash(js: Path, npz: Path) -> None:
    """Rewrite the .json's npz_sha256 for an edited .npz: the pair is consistent, the values are not."""
    import hashlib

    doc = json.loads(js.read_text())
    doc["npz_sha256"] = hashlib.sha256(npz.read_bytes()).hexdigest()
    js.write_text(json.dumps(doc))


def _edit_npz(npz: Path, edit) -> None:
    with np.load(npz) as z:
        arrays = {k: z[k] for k in z.files}
    edit(arrays)
    with open(npz, "wb") as f:
        np.savez(f, **arrays)


@pytest.mark.parametrize("edit, fragment", [
    (lambda a: a["readout"].__setitem__((0, 0), np.nan), "readout holds NaN or infinity"),
    (lambda a: a.update(readout=a["readout"][:1]), "readout has shape (1, "),
    (lambda a: a.update(w=a["w"].astype(np.int64)), "w has dtype int64, expected a float array"),
    (lambda a: a.update(leak=np.ones((2, 2))), "leak must hold one number, got shape (2, 2)"),
    (lambda a: a.update(**{"lambda": np.array("x")}), "lambda has dtype <U1, expected a float array"),
    (lambda a: a.update(gain=a["gain"][:3]), "gain: shape (3,), expected ("),
    (lambda a: a.update(context_readout=a["context_readout"][:, :, :2]), "context_readout has shape"),
])
def test_a_rehashed_model_npz_with_bad_arrays_is_one_error_naming_it(run_a, tmp_path, edit, fragment):
    """Before: NaN readouts and int matrices were assessed (exit 0), a 2-D leak was a traceback,
    a short readout or gain an error naming neither the file nor the array."""
    import shutil

    shutil.copytree(run_a, tmp_path / "r")
    root = tmp_path / "r"
    method = Method("fedclip", "naive") if "context" in fragment else Method("incfed")
    folder = root / "runs" / "models" / "wesad" / method.id / "50"
    npz, js = folder / "seed-0.npz", folder / "seed-0.json"
    _edit_npz(npz, edit)
    _rehash(js, npz)
    params = small_params()
    params["budgets"]["default"]["retrains"] = RETRAINS
    with pytest.raises(DataError, match=re.escape(f"{npz}: {fragment}")):
        assess_stage.run("wesad", method, experiment_params(params), data_dir=root / "data", runs_dir=root / "runs")


@pytest.mark.parametrize("edit, fragment", [
    (lambda d: d.update(n_classes=0), "n_classes: expected 2..128, got 0"),
    (lambda d: d["seeds"].update(train="x"), "seeds.train: expected an integer >= 0, got 'x'"),
    (lambda d: d.update(config={"units": "x"}), "config of incfed: missing hyperparameter(s)"),
    (lambda d: d["config"].update(leak=float("nan")), "config.leak: expected a finite number, got nan"),
])
def test_a_model_json_with_bad_values_is_one_error_naming_it(run_a, tmp_path, edit, fragment):
    """Before: n_classes 0 and a config of strings were assessed (exit 0, the config copied into
    the assess JSON); a seed string was "invalid literal for int()" naming no file."""
    _assess_with_an_edited_model_json(run_a, tmp_path, edit, lambda js: f"{js}: {fragment}")


# ------------------------------------------- stages run out of order: one line, the command to run first
def _copy(run_a: Path, tmp_path: Path) -> Path:
    import shutil

    shutil.copytree(run_a, tmp_path / "r")
    return tmp_path / "r"


def _files(folder: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _cli(root: Path, *args: str):
    return runner.invoke(app, [*args, "--dataset", "wesad", "--params", str(root / "params.yaml"),
                               "--data-dir", str(root / "data"), "--runs-dir", str(root / "runs")])


def test_retrain_before_select_names_the_select_command_and_touches_no_share(run_a, tmp_path):
    """A share without best.json stops retrain before any share's folder is cleaned: a later share
    missing its selection keeps the earlier shares' models (even a seed past the count)."""
    root = _copy(run_a, tmp_path)
    best = root / "runs" / "select" / "wesad" / "ridge" / "75" / "best.json"
    for p in best.parent.iterdir():
        p.unlink()
    extra = root / "runs" / "models" / "wesad" / "ridge" / "25" / f"seed-{RETRAINS}.json"
    extra.write_text("{}")  # past the count: cleaned by a retrain that runs, kept by one that stops
    models = _files(root / "runs" / "models")
    res = _cli(root, "retrain", "--algo", "ridge")
    assert res.exit_code == 1
    assert res.output.strip().splitlines() == [
        f"error: {best}: not found: run `esnfed select --dataset wesad --algo ridge --pct 75` first"]
    assert _files(root / "runs" / "models") == models


def test_retrain_after_a_failed_select_trial_says_the_trial_failed(run_a, tmp_path):
    root = _copy(run_a, tmp_path)
    share = root / "runs" / "select" / "wesad" / "clip-replay" / "50"
    (share / "best.json").unlink()
    trial = share / "trial-0001.json"
    trial.write_text(json.dumps({**json.loads(trial.read_text()), "status": "failed", "error": "boom"}))
    res = _cli(root, "retrain", "--algo", "clip", "--strategy", "replay", "--pct", "50")
    assert res.exit_code == 1
    assert res.output.strip().splitlines() == [
        f"error: {share / 'best.json'}: not found: select failed for 1 trial(s) (trial-0001.json: the error "
        "is in the file); rerun `esnfed select --dataset wesad --algo clip --strategy replay --pct 50`"]


def _copy_under_budget_small(run_a: Path, tmp_path: Path) -> Path:
    """A copy of run A whose params.yaml switches to budget `small`, the same settings as `default`."""
    root = _copy(run_a, tmp_path)
    params = small_params()
    params["budgets"]["default"]["retrains"] = RETRAINS
    params["budgets"]["small"] = params["budgets"]["default"]
    params["budget"] = "small"
    write_params(root, params)
    return root


# Hand edits of budgets.default (b) or params.yaml (p) that keep the budget's name.
_EDITS = {"space.fedip": lambda b, p: b["space"]["fedip"].update(rounds=[1, 3]),
          "space.wesad": lambda b, p: b["space"]["wesad"].update(units=[8, 16]),
          "space.hhar": lambda b, p: b["space"]["hhar"].update(units=[4]),
          "trials": lambda b, p: b.update(trials=3),
          "seed": lambda b, p: p.update(seed=p["seed"] + 1)}


def _edit_budget(root: Path, *edits: str) -> None:
    """Write ``root``'s params.yaml: run A's with ``edits`` (names of _EDITS) made by hand."""
    params = small_params()
    params["budgets"]["default"]["retrains"] = RETRAINS
    for edit in edits:
        _EDITS[edit](params["budgets"]["default"], params)
    write_params(root, params)


def _budget(root: Path):
    import yaml

    return experiment_params(yaml.safe_load((root / "params.yaml").read_text())).budget_spec


@pytest.mark.parametrize("edit", ["budget", "space.fedip", "space.wesad", "trials", "seed"])
def test_a_best_json_of_another_or_an_edited_budget_is_refused_not_reused(run_a, tmp_path, edit):
    """select under `default`, then params.yaml's budget switched, or budgets.default edited by
    hand (the name unchanged): retrain, the methods built on a selection (continual, deep) refuse
    the stale best.json and name the select to rerun; nothing is written."""
    if edit == "budget":
        root = _copy_under_budget_small(run_a, tmp_path)
        why = f"but {root / 'params.yaml'}'s budget is 'small'"
    else:
        root = _copy(run_a, tmp_path)
        _edit_budget(root, edit)
        why = f"with another search space, trials or seed than {root / 'params.yaml'}'s now"
    runs = _files(root / "runs")
    best = root / "runs" / "select" / "wesad" / "fedip" / "25" / "best.json"
    assert json.loads(best.read_text())["params_budget"] == "default"
    stale = (f"error: {best}: selected under budget 'default' {why}: "
             "rerun `esnfed select --dataset wesad --algo fedip --pct 25`")
    for args in (["retrain", "--algo", "fedip"], ["select", "--algo", "fedclip", "--strategy", "naive"],
                 ["select", "--algo", "deep-fedip"]):
        res = _cli(root, *args, "--pct", "25")
        assert res.exit_code == 1 and res.output.strip().splitlines() == [stale], res.output
    assert _files(root / "runs") == runs


def test_assess_with_some_models_missing_names_them_and_the_retrain_to_run(run_a, tmp_path):
    """Checked before any share is scored; the previous assess file is kept."""
    root = _copy(run_a, tmp_path)
    share = root / "runs" / "models" / "wesad" / "fedclip-naive" / "50"
    (share / "seed-1.npz").unlink()
    assessed = _files(root / "runs" / "assess")
    res = _cli(root, "assess", "--algo", "fedclip", "--strategy", "naive")
    assert res.exit_code == 1
    assert res.output.strip().splitlines() == [
        f"error: {share}: 1 of {RETRAINS} models not found (seed-1): "
        "run `esnfed retrain --dataset wesad --algo fedclip --strategy naive --pct 50` first"]
    (share / "seed-1.failed.json").write_text("{}")
    for p in (root / "runs" / "models" / "wesad" / "fedclip-naive" / "100").iterdir():
        p.unlink()
    res = _cli(root, "assess", "--algo", "fedclip", "--strategy", "naive")
    assert res.exit_code == 1
    assert res.output.strip().splitlines() == [
        f"error: {share}: 1 of {RETRAINS} models not found (seed-1) (also shares 100): retrain failed "
        "(seed-1.failed.json: the error is in the file); rerun `esnfed retrain --dataset wesad --algo fedclip "
        "--strategy naive`"]
    assert _files(root / "runs" / "assess") == assessed


@pytest.mark.parametrize("key, value, fragment", [
    ("params_budget", "paper", "retrained under budget 'paper' but {params}'s budget is 'default'"),
    ("params_budget_digest", "0" * 16, "retrained under budget 'default' with another search space, trials or "
                                       "seed than {params}'s now"),
    ("train_users", ["S99"], "trained on users ['S99'] but share 50 of the partition now has "),
    ("dataset", "hhar", "dataset is 'hhar', expected 'wesad': a file of another run"),
    ("pct", "100", "pct is '100', expected '50': a file of another run"),
])
def test_assess_refuses_a_model_retrained_for_something_else(run_a, tmp_path, key, value, fragment):
    """A model of another budget, partition, dataset or share would be scored under a wrong label:
    one line naming its .json and the retrain to rerun, checked before any share is scored."""
    root = _copy(run_a, tmp_path)
    js = root / "runs" / "models" / "wesad" / "ridge" / "50" / "seed-1.json"
    meta = json.loads(js.read_text())
    assert key in meta and meta[key] != value
    js.write_text(json.dumps({**meta, key: value}))
    assessed = _files(root / "runs" / "assess")
    res = _cli(root, "assess", "--algo", "ridge")
    assert res.exit_code == 1
    lines = res.output.strip().splitlines()
    fragment = fragment.format(params=root / "params.yaml")  # the params file read (--params) named
    assert len(lines) == 1 and lines[0].startswith(f"error: {js}: {fragment}"), res.output
    assert lines[0].endswith(": rerun `esnfed retrain --dataset wesad --algo ridge --pct 50`")
    assert _files(root / "runs" / "assess") == assessed


def test_a_budget_switch_relabels_the_models_a_retrain_resumes(run_a, tmp_path):
    """A budget with the same settings selects the same configs, so retrain resumes every model
    (bytes unchanged) and records the new budget in its .json; assess then scores them."""
    root = _copy_under_budget_small(run_a, tmp_path)
    share = root / "runs" / "models" / "wesad" / "ridge"
    npz = {p: p.read_bytes() for p in sorted(share.rglob("*.npz"))}
    assert _cli(root, "assess", "--algo", "ridge").exit_code == 1  # models of budget 'default'
    for command in ("select", "retrain", "assess"):
        res = _cli(root, command, "--algo", "ridge")
        assert res.exit_code == 0, res.output
    assert {p: p.read_bytes() for p in sorted(share.rglob("*.npz"))} == npz
    metas = [json.loads(p.read_text()) for p in sorted(share.rglob("seed-*.json"))]
    assert len(metas) == len(PCTS) * RETRAINS and {m["params_budget"] for m in metas} == {"small"}
    digest = _budget(root).digest("wesad", Method("ridge"))
    assert {m["params_budget_digest"] for m in metas} == {digest}  # the same settings: the same digest
    assert _assess(root, "ridge")["budget"] == "small"


def test_assess_refuses_models_of_an_edited_budget(run_a, tmp_path):
    """Models retrained before budgets.default.space.wesad was edited (select and retrain not
    rerun): assess names the first model's .json and the retrain to rerun, before any scoring."""
    root = _copy(run_a, tmp_path)
    _edit_budget(root, "space.wesad")
    assessed = _files(root / "runs" / "assess")
    res = _cli(root, "assess", "--algo", "ridge")
    js = root / "runs" / "models" / "wesad" / "ridge" / "25" / "seed-0.json"
    assert res.exit_code == 1 and res.output.strip().splitlines() == [
        f"error: {js}: retrained under budget 'default' with another search space, trials or seed than "
        f"{root / 'params.yaml'}'s now: rerun `esnfed retrain --dataset wesad --algo ridge --pct 25`"], res.output
    assert _files(root / "runs" / "assess") == assessed


def test_a_budget_edit_the_selection_does_not_draw_from_is_accepted(run_a, tmp_path):
    """Another dataset's or method's space leaves ridge's selection and models valid: retrain
    resumes every model untouched and assess records the new assess digest. The trial count
    leaves random's (one trial) valid, not ridge's."""
    root = _copy(run_a, tmp_path)
    _edit_budget(root, "space.hhar", "space.fedip")
    models = _files(root / "runs" / "models" / "wesad" / "ridge")
    for command in ("retrain", "assess"):
        res = _cli(root, command, "--algo", "ridge")
        assert res.exit_code == 0, res.output
    assert _files(root / "runs" / "models" / "wesad" / "ridge") == models
    assert _assess(root, "ridge")["budget_digest"] == _budget(root).digest("wesad", Method("ridge"), assessed=True)
    _edit_budget(root, "space.hhar", "space.fedip", "trials")
    for command in ("retrain", "assess"):
        res = _cli(root, command, "--algo", "random")
        assert res.exit_code == 0, res.output
    assert _cli(root, "assess", "--algo", "ridge").exit_code == 1


def test_artefacts_without_the_budget_digest_are_trusted_and_a_resumed_model_records_it(run_a, tmp_path):
    """best.json and models written before the digest was recorded stay trusted, as those without
    the name are; a retrain that resumes such a model (the same key: the same model) records
    params.yaml's digest in its .json, the .npz untouched."""
    root = _copy(run_a, tmp_path)
    for js in [*(root / "runs" / "select" / "wesad" / "ridge").rglob("best.json"),
               *(root / "runs" / "models" / "wesad" / "ridge").rglob("seed-*.json")]:
        meta = json.loads(js.read_text())
        js.write_text(json.dumps({k: v for k, v in meta.items() if k != "params_budget_digest"}))
    _edit_budget(root, "space.wesad")
    res = _cli(root, "assess", "--algo", "ridge")
    assert res.exit_code == 0, res.output
    share = root / "runs" / "models" / "wesad" / "ridge"
    npz = {p: p.read_bytes() for p in sorted(share.rglob("*.npz"))}
    res = _cli(root, "retrain", "--algo", "ridge")
    assert res.exit_code == 0, res.output
    assert {p: p.read_bytes() for p in sorted(share.rglob("*.npz"))} == npz
    metas = [json.loads(p.read_text()) for p in sorted(share.rglob("seed-*.json"))]
    assert {m["params_budget_digest"] for m in metas} == {_budget(root).digest("wesad", Method("ridge"))}


def test_assess_without_dataset_runs_every_dataset_the_pipeline_runs_the_method_on(run_a, tmp_path):
    """`esnfed assess --algo ridge` (no --dataset): every declared dataset in turn; the same bytes
    as with --dataset; a dataset not declared is a usage error naming the declared ones."""
    root = _copy(run_a, tmp_path)
    path = root / "runs" / "assess" / "wesad" / "ridge.json"
    before = path.read_bytes()
    path.unlink()
    params = small_params()
    params["budgets"]["default"]["retrains"] = RETRAINS
    params["datasets"], params["continual_datasets"], params["study_datasets"] = ["wesad"], ["wesad"], ["wesad"]
    params["imported"] = {}  # the example not declared: not imported
    params["embedded"] = embedded_read(params)  # nor embedded data that no stage reads
    write_params(root, params)
    common = ["--params", str(root / "params.yaml"), "--data-dir", str(root / "data"),
              "--runs-dir", str(root / "runs")]
    res = runner.invoke(app, ["assess", "--algo", "ridge", *common])
    assert res.exit_code == 0, res.output
    assert "assess wesad/ridge" in res.output and path.read_bytes() == before
    res = runner.invoke(app, ["retrain", "--algo", "ridge", "--algo", "fedip", *common])
    assert res.exit_code == 0 and "retrain wesad/ridge" in res.output and "retrain wesad/fedip" in res.output
    res = runner.invoke(app, ["assess", "--algo", "ridge", "--dataset", "wesad", "--dataset", "hhar", *common])
    text = " ".join(w for w in res.output.split() if w not in "│╭╮╰╯─")
    assert res.exit_code == 2 and "'hhar' is not declared in params.yaml datasets (declared: wesad)" in text
    assert not (root / "runs" / "assess" / "hhar").exists()
    # Declared but never preprocessed: wesad's file is written, then hhar's missing data is the error.
    params["datasets"] = ["wesad", "hhar"]
    params["embedded"] = embedded_read(params)
    write_params(root, params)
    res = runner.invoke(app, ["assess", "--algo", "ridge", *common])
    assert res.exit_code == 1 and path.read_bytes() == before
    assert res.output.strip().splitlines()[-1].startswith(f"error: {root / 'data' / 'processed' / 'hhar'}"), \
        res.output


def test_a_failure_listing_names_the_dataset_and_method_only_when_a_command_ran_several():
    from esnfed_cli.experiment_cmds import _run_label

    ridge, fedip = Method("ridge"), Method("fedip")
    assert _run_label([("wesad", ridge)], "wesad", ridge) == ""
    assert _run_label([("wesad", ridge), ("wesad", fedip)], "wesad", fedip) == "fedip "
    assert _run_label([("wesad", ridge), ("hhar", ridge)], "hhar", ridge) == "hhar/ridge "


def test_assess_on_torch_cpu_scores_every_retrain_batched_as_numpy_does(run_a, tmp_path, monkeypatch):
    """assess --device torch-cpu scores a share's retrains batched (accel.scores; continual: every
    retrain's model after each context in one bank), not context_matrix and activation_densities
    model by model: the same seeds and λ, test accuracies (stationary FedIP) and each accuracy-matrix and stream entry within 2 steps of the
    smallest test context of the numpy scores (float32 rounding in torch's kernels may flip a
    near-tie step), and the same activation densities (``_same_densities``)."""
    root = _copy(run_a, tmp_path)

    def numpy_path(*a, **k):
        raise AssertionError("continual retrains scored model by model on the numpy path")

    monkeypatch.setattr(assess_stage, "context_matrix", numpy_path)
    monkeypatch.setattr(assess_stage, "activation_densities", numpy_path)
    steps = min(int(np.bincount(np.load(root / "data" / "processed" / "wesad" / f"{u}.npz")["context"]).min())
                for u in TEST) * 12 * len(TEST)
    for method in ("clip-replay", "fedclip-naive", "fedclip-joint", "fedip"):
        algo, _, strategy = method.partition("-")
        res = _cli(root, "assess", "--algo", algo, *(["--strategy", strategy] if strategy else []),
                   "--device", "torch-cpu")
        assert res.exit_code == 0, res.output
        got, want = _assess(root, method), _assess(run_a, method)
        assert got["pcts"].keys() == want["pcts"].keys()
        for pct, w in want["pcts"].items():
            g = got["pcts"][pct]
            assert g["seeds"] == w["seeds"] and g["lambda"] == w["lambda"] and g["train_accuracy"] is None
            _same_densities(g["activation"], w["activation"])
            if not strategy:  # stationary: one test set of 2 users × 3 contexts × 12 steps per window
                np.testing.assert_allclose(g["test_accuracy"], w["test_accuracy"], rtol=0, atol=2 / steps)
                continue
            np.testing.assert_allclose(g["accuracy_matrix"], w["accuracy_matrix"], rtol=0, atol=2 / steps)
            np.testing.assert_allclose(g["stream_accuracy"], w["stream_accuracy"], rtol=0, atol=2 / steps)
            assert g["test_accuracy"] == [s[-1] for s in g["stream_accuracy"]]


def _same_densities(got: dict, want: dict) -> None:
    """Two assess ``activation`` entries alike: the same edges, users and models, and every density
    (pooled and per user) the same distribution within an L1 distance of 0.01: a float32 state
    within rounding of a bin edge may fall in the next bin (a value per ~1e5 at 40 bins), while a
    wrong bin or model would move whole distributions (L1 up to 2)."""
    keys = ("edges", "users", "models", "target")
    assert {k: got[k] for k in keys} == {k: want[k] for k in keys}
    width = np.diff(np.asarray(want["edges"]))
    for key in ("density", "user_density"):
        g, w = np.asarray(got[key], np.float64), np.asarray(want[key], np.float64)
        assert g.shape == w.shape and np.array_equal(np.isnan(g), np.isnan(w))
        assert np.nanmax(np.abs(g - w) @ width) <= 0.01
    for key in ("kl", "unit_kl", "no_ip_kl", "no_ip_unit_kl"):
        np.testing.assert_allclose(got[key], want[key], rtol=KL_RTOL, err_msg=key)


# The KL divergences of the torch path against numpy's: a state within float32 rounding of a bin
# edge moves one value to the next bin (~1e-5 of the values at 40 bins), which moves a KL of order
# 0.1-10 nats by ~1e-5 relative; a wrong model, target or pooling changes it by far more.
KL_RTOL = 1e-3


# ------------------------------------------- predict: saved models applied to a processed folder
def _predict(root: Path, method: str, pct: str, k: int, out: Path, **kw):
    from esnfed_stages.experiment import predict as predict_stage

    return predict_stage.run(root / "runs" / "models" / "wesad" / method / pct / f"seed-{k}.json",
                             root / "data" / "processed" / "wesad", out, data_dir=root / "data", **kw)


def _rows(csv_path: Path) -> list[dict]:
    import csv

    with open(csv_path, newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def _csv_accuracy(rows: list[dict]) -> float:
    return sum(int(r["correct_steps"]) for r in rows) / sum(int(r["steps"]) for r in rows)


@pytest.mark.parametrize("algo, strategy", [m for m in METHODS if m[0] != "random"])
def test_predictions_on_the_test_users_score_what_assess_reported(run_a, tmp_path, algo, strategy):
    """The accuracy counted from the predictions CSV is assess's test accuracy, exactly: the same
    float32 states and readout products (scoring.step_predictions is count_correct's argmax), and
    both divide the same two integers in float64. Continual models: the model after the last
    context, whose accuracy on every context pooled is the stream accuracy assess reports."""
    method = Method(algo, strategy).id
    doc = _assess(run_a, method)
    for pct in ("25", "100"):
        for k, reported in enumerate(doc["pcts"][pct]["test_accuracy"]):
            out = tmp_path / f"{pct}-{k}.csv"
            s = _predict(run_a, method, pct, k, out, users=TEST)
            rows = _rows(out)
            assert [r["user"] for r in rows] == [u for u in TEST for _ in range(12)]  # 3 contexts × 4 windows
            assert _csv_accuracy(rows) == reported == s.accuracy
            assert {r["label"] for r in rows} <= {"c0", "c1", "c2"} and {r["context"] for r in rows} == {
                "run0", "run1", "run2"}


def test_a_continual_model_after_each_context_scores_its_accuracy_matrix_row(run_a, tmp_path):
    method = Method("fedclip", "naive").id
    matrix = _assess(run_a, method)["pcts"]["50"]["accuracy_matrix"][1]
    for i in range(3):
        out = tmp_path / f"{i}.csv"
        assert _predict(run_a, method, "50", 1, out, users=TEST, context=i).context == i
        rows = _rows(out)
        for j in range(3):
            assert _csv_accuracy([r for r in rows if r["context"] == f"run{j}"]) == matrix[i][j]


def test_per_step_predictions_agree_with_the_per_window_file(run_a, tmp_path):
    out, steps = tmp_path / "w.csv", tmp_path / "s.csv"
    _predict(run_a, "fedip", "100", 0, out, steps_out=steps)  # every user of the folder
    windows, per_step = _rows(out), _rows(steps)
    assert len(windows) == 8 * 12 and len(per_step) == 8 * 12 * 12  # users × windows, × steps
    with np.load(run_a / "data" / "processed" / "wesad" / "u0.npz") as z:
        y = z["y"]
    labels = np.array([[int(r["label"][1:]) for r in per_step[w * 12:(w + 1) * 12]] for w in range(12)])
    np.testing.assert_array_equal(labels, y)  # u0 comes first, its windows and steps in order
    for w, row in enumerate(windows):
        mine = per_step[w * 12:(w + 1) * 12]
        assert {(r["user"], r["window"]) for r in mine} == {(row["user"], row["window"])}
        assert int(row["correct_steps"]) == sum(r["label"] == r["predicted"] for r in mine)
        votes = [sum(r["predicted"] == c for r in mine) for c in ("c0", "c1", "c2")]
        assert row["predicted"] == f"c{int(np.argmax(votes))}"


def _unlabelled_copy(run_a: Path, folder: Path) -> Path:
    """The processed folder as `esnfed import --unlabelled` writes one: y all 0, no classes,
    ``labelled: false`` (tests/test_import.py checks the import writes this form)."""
    from esnfed_core.data.processed import UserData, load_user, save_user
    from esnfed_stages._io import file_sha256

    src = run_a / "data" / "processed" / "wesad"
    manifest = json.loads((src / "manifest.json").read_text())
    folder.mkdir()
    for user, entry in manifest["users"].items():
        u = load_user(src, user)
        save_user(folder / f"{user}.npz", UserData(u.x, np.zeros_like(u.y), u.context))
        entry.update(sha256=file_sha256(folder / f"{user}.npz"), class_counts=[])
    manifest.update(classes=[], n_classes=0, label_map={}, labelled=False)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


def test_predictions_of_unlabelled_recordings_are_those_of_the_labelled_ones_without_labels(run_a, tmp_path):
    """New recordings without labels: the same classes predicted, window by window and step by step,
    as for the same recordings with labels; label and correct_steps empty, no accuracy."""
    from esnfed_stages.data.check_data import check_folder
    from esnfed_stages.experiment import predict as predict_stage

    folder = _unlabelled_copy(run_a, tmp_path / "new")
    assert check_folder(folder) == []
    model = run_a / "runs" / "models" / "wesad" / "fedclip-joint" / "100" / "seed-0.json"
    labelled = _predict(run_a, "fedclip-joint", "100", 0, tmp_path / "l.csv", steps_out=tmp_path / "ls.csv")
    s = predict_stage.run(model, folder, tmp_path / "u.csv", steps_out=tmp_path / "us.csv", data_dir=run_a / "data")
    assert s.accuracy is None and labelled.accuracy is not None and (s.windows, s.steps) == (labelled.windows,
                                                                                              labelled.steps)
    for mine, ref in (("u.csv", "l.csv"), ("us.csv", "ls.csv")):
        got, want = _rows(tmp_path / mine), _rows(tmp_path / ref)
        assert [r["predicted"] for r in got] == [r["predicted"] for r in want] and len(got) == len(want)
        assert {r["label"] for r in got} == {""} and {r["label"] for r in want} <= {"c0", "c1", "c2"}
    assert {r["correct_steps"] for r in _rows(tmp_path / "u.csv")} == {""}
    res = runner.invoke(app, ["predict", str(model), str(folder), "--out", str(tmp_path / "c.csv"),
                              "--data-dir", str(run_a / "data")])
    assert res.exit_code == 0 and f"{s.steps} steps, unlabelled" in " ".join(res.output.split()), res.output


def _folder_like_wesad(run_a: Path, tmp_path: Path, edit) -> Path:
    """A copy of the processed folder with its manifest edited."""
    import shutil

    folder = tmp_path / "new"
    shutil.copytree(run_a / "data" / "processed" / "wesad", folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    edit(manifest)
    (folder / "manifest.json").write_text(json.dumps(manifest))
    return folder


@pytest.mark.parametrize("edit, fragment", [
    (lambda m: m.update(feature_names=["acc", "eda", "temp"]), "feature_names is ['acc', 'eda', 'temp'] but"),
    (lambda m: m.update(window=10), "window is 10 but"),
    (lambda m: m.update(classes=["walk", "c1", "c2"]), "classes is ['walk', 'c1', 'c2'] but"),
])
def test_predict_refuses_a_folder_unlike_the_training_data_in_one_line(run_a, tmp_path, edit, fragment):
    folder = _folder_like_wesad(run_a, tmp_path, edit)
    model = run_a / "runs" / "models" / "wesad" / "incfed" / "50" / "seed-0.json"
    out = tmp_path / "p.csv"
    res = runner.invoke(app, ["predict", str(model), str(folder), "--out", str(out), "--steps",
                              str(tmp_path / "s.csv"), "--data-dir", str(run_a / "data")])
    assert res.exit_code == 1
    line = " ".join(res.output.split())
    assert line == f"error: {folder / 'manifest.json'}: {fragment} the data model {model} was trained on " \
                   f"({run_a / 'data' / 'processed' / 'wesad' / 'manifest.json'}) has " + line.split(" has ", 1)[1]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new"]  # no output, no temporary left


def test_predict_refuses_other_features_and_models_without_one_readout(run_a, tmp_path):
    make_dataset(tmp_path, features=4)
    folder = tmp_path / "data" / "processed" / "wesad"
    models = run_a / "runs" / "models" / "wesad"
    out = tmp_path / "p.csv"

    def fails(*args: str) -> str:
        res = runner.invoke(app, ["predict", *args, "--out", str(out), "--data-dir", str(run_a / "data")])
        assert res.exit_code == 1 and not out.exists()
        return " ".join(res.output.split())

    model = models / "ridge" / "25" / "seed-1.npz"
    assert fails(str(model), str(folder)) == (f"error: {folder / 'manifest.json'}: n_features is 4 but model "
                                              f"{model.with_suffix('.json')} takes 3 input channels")
    wesad = str(run_a / "data" / "processed" / "wesad")
    assert fails(str(models / "random" / "25" / "seed-0.json"), wesad).startswith(
        f"error: {models / 'random' / '25' / 'seed-0.json'}: random: the random baseline has no model to apply")
    assert "not a continual model" in fails(str(model), wesad, "--context", "0")
    assert "context: expected 0..2" in fails(str(models / "clip-replay" / "25" / "seed-0.json"), wesad,
                                             "--context", "3")
    assert "not a saved model" in fails(str(models / "ridge" / "25" / "best.json"), wesad)
    assert "users: no user 'S2'" in fails(str(model), wesad, "--user", "S2")
