"""`esnfed flower` end to end: the main environment's command (select first, then flower) runs the
app through this environment's interpreter on a tiny processed dataset. Plain IncFed gives the
pipeline's readout and accuracy, and bytes = the ledger's payload + Flower's per-message overhead;
SecAgg+ FedIP stays within quantization of the pipeline, and its bytes follow the formula: the
masked vector costs 8 bytes per entry (int64 after the modulus), key sharing does not depend on
the vector's size. Several apps in one call (one Flower process and Ray session) give what the
separate calls give."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from experiment_data import TEST, make_dataset, small_params, write_params  # noqa: E402

ESNFED = REPO / ".venv" / "bin" / "esnfed"
# The environment the suite started in, read at collection (before any test runs): Flower's
# in-process simulations (test_flower_apps.py and others) let Ray rewrite os.environ's PYTHONPATH to
# this interpreter's sys.path, and the main environment's esnfed would then import this
# environment's typer and rich (older pins) instead of its own.
PIPELINE_ENV = dict(os.environ)
STAGES = ("setup", "share_keys", "collect_masked_vectors", "unmask")


def _esnfed(root: Path, *args: str, env: dict | None = None, params: Path | None = None) -> str:
    """The main environment's `esnfed ARGS` on the test's folders; env: variables to add."""
    proc = subprocess.run([str(ESNFED), *args, "--dataset", "wesad", "--params", str(params or root / "params.yaml"),
                           "--data-dir", str(root / "data"), "--runs-dir", str(root / "runs")],
                          cwd=root, capture_output=True, text=True, timeout=600, env={**PIPELINE_ENV, **(env or {})})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("flower-cmd")
    make_dataset(root)
    params = small_params()
    params["continual"]["joint"]["patience"] = 1  # joint (the only test that runs it): fewer rounds
    write_params(root, params)
    for algo in ("incfed", "fedip"):
        _esnfed(root, "select", "--algo", algo, "--pct", "100")
    return root


def _flower(root: Path, app: str, *extra: str) -> dict:
    _esnfed(root, "flower", "--app", app, "--pct", "100", "--out-dir", str(root / "out"), *extra)
    name = f"wesad-{app}{'-secagg' if extra else ''}-100.json"
    return json.loads((root / "out" / name).read_text())


@pytest.fixture(scope="module")
def separate(root) -> dict:
    """A separate call's document: SecAgg+ FedIP (its own Flower process)."""
    return _flower(root, "fedip", "--secagg")


@pytest.fixture(scope="module")
def many(root) -> dict:
    """The pipeline's call: IncFed and FedIP, plain and SecAgg+, in one Flower process and Ray
    session -> {(app, secagg): document}."""
    out = root / "many"
    # FORCE_COLOR: rich draws the progress display as on a terminal (it is off in a pipe)
    shown = _esnfed(root, "flower", "--app", "incfed", "--app", "fedip", "--plain-and-secagg", "--out-dir", str(out),
                    env={"FORCE_COLOR": "1"})
    names = {("incfed", False): "wesad-incfed-100.json", ("incfed", True): "wesad-incfed-secagg-100.json",
             ("fedip", False): "wesad-fedip-100.json", ("fedip", True): "wesad-fedip-secagg-100.json"}
    return {**{key: json.loads((out / name).read_text()) for key, name in names.items()}, "shown": shown}


def test_progress_shows_the_fits_and_the_simulation_then_the_summary(many):
    """Two fits (plain and SecAgg+ share each app's) and one simulation: 3 steps; the summary after.
    (The display redraws 10 times a second: the fits may pass unseen, the simulation, seconds, not.)"""
    text = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", many["shown"])
    assert "flower wesad" in text and "2/3" in text and "3/3" in text and "/4" not in text
    assert text.rstrip().splitlines()[-1].startswith("wesad fedip + SecAgg+ 100 %: test accuracy")


def _test_steps(root: Path) -> int:
    manifest = json.loads((root / "data" / "processed" / "wesad" / "manifest.json").read_text())
    return sum(manifest["users"][u]["windows"] for u in TEST) * manifest["window"]


def test_plain_incfed_is_the_pipeline_and_its_bytes_the_ledger_plus_overhead(many):
    doc = many[("incfed", False)]
    f, p = doc["flower"], doc["pipeline"]
    assert f["readout_relative_difference"] == 0.0 and f["test_accuracy"] == p["test_accuracy"]
    [row] = f["bytes"]["rows"]
    assert (row["phase"], row["stage"], row["rounds"]) == ("stats", "plain", 1)
    payload_up = p["communication"]["up_bytes"] / doc["n_clients"]  # A, B (float64) + 2 counts
    payload_down = p["communication"]["down_bytes"] / doc["n_clients"]  # the readout + 1 count
    # Flower adds per message: a 128-byte .npy header per array, the object headers and the
    # content-addressed object ids of Message -> RecordDict -> records -> arrays (< 2 KB here).
    assert 0 < row["up_per_client_round"] - payload_up < 2000
    assert row["down_per_client_round"] < 2000  # the config only: the readout is not sent back
    assert payload_down > 0


def test_secagg_fedip_is_the_pipeline_to_quantization_and_its_bytes_the_formula(root, separate):
    doc = separate
    f, p = doc["flower"], doc["pipeline"]
    assert f["secagg"] == {"clients": 4, "sampled": 4, "min_clients": 3}
    assert 0 < f["readout_relative_difference"] < 1e-3 and f["ip_max_abs_difference"] < 1e-5
    assert abs(f["test_accuracy"] - p["test_accuracy"]) <= 2 / _test_steps(root)  # two steps at most
    rows = {(r["phase"], r["stage"]): r for r in f["bytes"]["rows"]}
    rounds = doc["config"]["rounds"]
    assert set(rows) == {(ph, st) for ph in ("ip", "stats") for st in STAGES}
    assert rows[("ip", "setup")]["rounds"] == rounds and rows[("stats", "setup")]["rounds"] == 1
    units, classes = doc["config"]["units"], 3
    d_ip, d_stats = 2 * units, classes * units + units * units  # (Δg, Δb) and (Ā, B̄)
    grow = rows[("stats", "collect_masked_vectors")]["up_per_client_round"] - \
        rows[("ip", "collect_masked_vectors")]["up_per_client_round"]
    assert abs(grow - 8 * (d_stats - d_ip)) <= 16  # 8 bytes per masked entry (ids, varints: a few)
    for stage in ("setup", "share_keys", "unmask"):  # key material: independent of the vector
        assert abs(rows[("ip", stage)]["up_per_client_round"] - rows[("stats", stage)]["up_per_client_round"]) <= 4


def test_fedclip_replay_is_the_continual_pipeline_context_by_context(root):
    _esnfed(root, "select", "--algo", "fedclip", "--strategy", "replay", "--pct", "100")
    doc = _flower(root, "fedclip-replay")
    f, p = doc["flower"], doc["pipeline"]
    # Same seeds, order and core functions: every context's (g, b) and readout bit for bit.
    assert f["ip_max_abs_difference"] == 0.0 and f["context_readout_relative_difference"] == [0.0] * 3
    assert f["stream_accuracy"] == p["stream_accuracy"] and len(p["stream_accuracy"]) == doc["n_contexts"] == 3
    budget, units = doc["config"]["budget"], doc["config"]["units"]
    assert p["ip_rounds"] == [budget] * 3
    rows = {r["phase"]: r for r in f["bytes"]["rows"]}
    assert rows["stats"]["rounds"] == 3 and rows["stats"]["stage"] == "plain"
    stats_payload = 8 * (doc["n_classes"] * units + units * units) + 16  # A, B (float64), 2 counts
    assert 0 < rows["stats"]["up_per_client_round"] - stats_payload < 2000
    if budget:
        assert rows["ip"]["rounds"] == 3 * budget
        assert 0 < rows["ip"]["up_per_client_round"] - 8 * 2 * units < 2000  # (g, b) float64 + overhead


def test_fedclip_joint_is_the_continual_pipeline_with_its_early_stopping(root):
    """Joint end to end: the validation users run as evaluation nodes; the kept models, their
    rounds and the stream accuracy are the pipeline's; the bytes split into the training nodes'
    IP and statistics groups and the evaluation nodes' groups."""
    _esnfed(root, "select", "--algo", "fedclip", "--strategy", "joint", "--pct", "100")
    doc = _flower(root, "fedclip-joint")
    f, p = doc["flower"], doc["pipeline"]
    assert f["ip_max_abs_difference"] == 0.0 and f["context_readout_relative_difference"] == [0.0] * 3
    assert f["stream_accuracy"] == p["stream_accuracy"] and f["ip_rounds"] == p["ip_rounds"]
    assert [len(tr) for tr in f["joint_trace"]] == f["rounds"] and len(f["rounds"]) == 3
    print("joint rounds run per context:", f["rounds"], "kept:", p["ip_rounds"])
    assert all(u <= n for u, n in zip(p["ip_rounds"], f["rounds"]))
    assert f["joint_capped"] == p["joint_capped"] == [False] * 3  # params.yaml's default: no cap
    rows = {r["phase"]: r for r in f["bytes"]["rows"]}
    assert set(rows) == {"role", "ip", "stats", "eval"}
    assert rows["ip"]["rounds"] == rows["stats"]["rounds"] == rows["eval"]["rounds"] == sum(f["rounds"])
    units = doc["config"]["units"]
    # An evaluation node receives what a training node does ((g, b) and the config) plus the
    # readout (C·N float64 in a record of its own, < 1 KB of headers) and sends back two counts.
    extra = rows["eval"]["down_per_client_round"] - rows["ip"]["down_per_client_round"]
    assert 0 < extra - 8 * doc["n_classes"] * units < 1000
    assert rows["eval"]["up_per_client_round"] < rows["ip"]["up_per_client_round"]
    assert f["bytes"]["clients_measured"] == doc["n_clients"]  # the per-client totals: training users
    md = root / "flower-table.md"
    table = [str(ESNFED), "flower-table", "--runs-dir", str(root / "out"), "--out", str(md)]
    assert subprocess.run(table, capture_output=True, timeout=120, env=PIPELINE_ENV).returncode == 0
    assert "| wesad | fedclip-joint | no | eval |" in md.read_text()


def test_several_apps_in_one_session_give_the_separate_runs(many, separate):
    """Four apps in one session (a stale run config would run another app: other stages, other
    bytes): plain ones the pipeline's bits, SecAgg+ ones within quantization, and the last one,
    SecAgg+ FedIP, the separate call's trial, messages and bytes."""
    for key in (("incfed", False), ("fedip", False)):
        f = many[key]["flower"]
        assert f["readout_relative_difference"] == 0.0 and f["test_accuracy"] == many[key]["pipeline"]["test_accuracy"]
    assert many[("fedip", False)]["flower"]["ip_max_abs_difference"] == 0.0
    for key in (("incfed", True), ("fedip", True)):
        f = many[key]["flower"]
        assert f["secagg"] == {"clients": 4, "sampled": 4, "min_clients": 3} and 0 < f["readout_relative_difference"] < 1e-3
        assert {r["stage"] for r in f["bytes"]["rows"]} >= set(STAGES)
    mine = many[("fedip", True)]
    assert mine["pipeline"] == separate["pipeline"] and mine["lambda"] == separate["lambda"]
    rows, ref = mine["flower"]["bytes"]["rows"], separate["flower"]["bytes"]["rows"]
    assert [(r["phase"], r["stage"], r["rounds"], r["messages"]) for r in rows] == \
        [(r["phase"], r["stage"], r["rounds"], r["messages"]) for r in ref]
    for a, b in zip(rows, ref):  # random run/node/message ids: a few bytes of varint length
        assert abs(a["up_per_client_round"] - b["up_per_client_round"]) <= 16
        assert abs(a["down_per_client_round"] - b["down_per_client_round"]) <= 16


def test_plain_fedip_at_a_client_fraction_is_the_sampled_pipeline_end_to_end(root, many):
    """federated.client_fraction 0.5 (2 of the 4 clients a round) through the command, on the
    config selected at 1: the result records the fraction, the plain app's (g, b), readout and test
    accuracy are the pipeline's trial of the same seed and fraction bit for bit, its IP rounds went
    to 2 clients each where the f = 1 run's (`many`) went to 4, its model is not that run's, and
    the summary and flower-table show the fraction. Written beside the f = 1 run (`many`'s folder):
    its name carries the fraction (wesad-fedip-f0.5-100.json), the f = 1 file stays as it was, and
    flower-table reads both."""
    import yaml

    params = yaml.safe_load((root / "params.yaml").read_text())
    params["federated"] = {"client_fraction": 0.5}
    folder, out = root / "sampled", root / "many"
    folder.mkdir()
    before = {p.name: p.read_bytes() for p in out.glob("*.json")}
    shown = _esnfed(root, "flower", "--app", "fedip", "--out-dir", str(out),
                    params=write_params(folder, params))
    doc = json.loads((out / "wesad-fedip-f0.5-100.json").read_text())
    assert {p.name: p.read_bytes() for p in out.glob("*.json") if p.name in before} == before
    assert sorted(set(p.name for p in out.glob("*.json")) - set(before)) == ["wesad-fedip-f0.5-100.json"]
    full = many[("fedip", False)]
    f, p = doc["flower"], doc["pipeline"]
    assert doc["client_fraction"] == p["communication"]["client_fraction"] == 0.5 and "client_fraction" not in full
    assert f["readout_relative_difference"] == 0.0 and f["ip_max_abs_difference"] == 0.0
    assert f["test_accuracy"] == p["test_accuracy"]
    assert doc["seed"] == full["seed"] and doc["config"] == full["config"]  # λ: chosen after each run's FedIP
    rounds = doc["config"]["rounds"]
    assert rounds >= 1  # FedIP ran IP rounds: the fraction had rounds to sample
    ip = {r["phase"]: r for r in f["bytes"]["rows"]}["ip"]
    ip_full = {r["phase"]: r for r in full["flower"]["bytes"]["rows"]}["ip"]
    assert (ip["rounds"], ip["messages"]) == (rounds, 2 * rounds) and ip_full["messages"] == 4 * rounds
    assert p["communication"]["up_bytes"] < full["pipeline"]["communication"]["up_bytes"]  # the ledger's too
    # the sampled FedIP gave another model (measured: λ 0.01 against 1, accuracy 58.33 against 56.60 %)
    assert (doc["lambda"], f["test_accuracy"]) != (full["lambda"], full["flower"]["test_accuracy"])
    assert shown.rstrip().splitlines()[-1].startswith("wesad fedip f = 0.5 100 %: test accuracy")
    md = folder / "flower-table.md"
    table = [str(ESNFED), "flower-table", "--flower-dir", str(out), "--out", str(md)]
    assert subprocess.run(table, capture_output=True, timeout=120, env=PIPELINE_ENV).returncode == 0
    assert "| wesad | fedip (f = 0.5) | no | 4 |" in md.read_text() and "| wesad | fedip | no | 4 |" in md.read_text()


def test_central_dp_fedip_at_a_client_fraction_is_the_sampled_private_trial_end_to_end(root):
    """`esnfed flower --app fedip --epsilon 4` under federated.client_fraction 0.5 and
    privacy.amplification: sampling: the plain app's (g, b), readout, λ and test accuracy are the
    sampled private trial's bit for bit, and the result records the fraction, the amplification and
    the amplified z of (R, m = 2, K = 4) (not the unsampled PLD z), its σs with it."""
    import yaml

    from esnfed_core.privacy import noise_multiplier, sampled_noise_multiplier

    params = yaml.safe_load((root / "params.yaml").read_text())
    params["federated"] = {"client_fraction": 0.5}
    params["privacy"]["amplification"] = "sampling"
    folder = root / "dp-sampled"
    folder.mkdir()
    _esnfed(root, "flower", "--app", "fedip", "--epsilon", "4", "--out-dir", str(folder),
            params=write_params(folder, params))
    doc = json.loads((folder / "wesad-fedip-f0.5-eps4-100.json").read_text())
    f, p, d = doc["flower"], doc["pipeline"], doc["dp"]
    assert doc["client_fraction"] == 0.5 and d["amplification"] == "sampling" and "RDP" in d["sampled_accountant"]
    assert f["readout_relative_difference"] == 0.0 and f["ip_max_abs_difference"] == 0.0
    assert f["test_accuracy"] == p["test_accuracy"] and doc["lambda"] == p["lambda"]
    rounds = doc["config"]["rounds"]
    assert d["releases"] == rounds + 1 and d["delta"] == 1e-5
    z = sampled_noise_multiplier(4.0, 1e-5, rounds, 2, 4)
    # the stage's z is the same calibration in another process: equal to float rounding
    assert d["noise_multiplier"] == pytest.approx(z, rel=1e-9)
    assert abs(z - noise_multiplier(4.0, 1e-5, rounds + 1)) > 1e-3 * z  # not the unsampled z
    assert d["sigma_ip"] == pytest.approx(z * d["ip_clip"], rel=1e-9)
    ip = {r["phase"]: r for r in f["bytes"]["rows"]}["ip"]
    assert (ip["rounds"], ip["messages"]) == (rounds, 2 * rounds)  # 2 of the 4 clients a round


def test_distributed_dp_fedip_at_a_client_fraction_records_each_rounds_threshold_end_to_end(root):
    """`esnfed flower --app fedip --secagg --epsilon 4` under federated.client_fraction 0.75 (3 of the
    4 clients a round, SecAgg+ threshold 2): the result records the fraction, the unamplified z of the
    R + 1 releases (privacy.amplification none, the private trial's), each IP round's m = 3, K_min(m) = 2,
    σ_ip/√2 per client and its 3 survivors, and an ε spent below 4 (every sum held more than its
    K_min); the IP rounds' SecAgg+ messages went to 3 clients a round."""
    import math

    import yaml

    from esnfed_core.privacy import noise_multiplier

    params = yaml.safe_load((root / "params.yaml").read_text())
    params["federated"] = {"client_fraction": 0.75}
    folder = root / "dp-secagg-sampled"
    folder.mkdir()
    _esnfed(root, "flower", "--app", "fedip", "--secagg", "--epsilon", "4", "--out-dir", str(folder),
            params=write_params(folder, params))
    doc = json.loads((folder / "wesad-fedip-secagg-f0.75-eps4-100.json").read_text())
    d, rounds = doc["dp"], doc["config"]["rounds"]
    assert doc["client_fraction"] == 0.75 and d["noise"] == "distributed" and "amplification" not in d
    # the stage's z is the same calibration in another process: equal to float rounding
    assert d["noise_multiplier"] == pytest.approx(noise_multiplier(4.0, 1e-5, rounds + 1), rel=1e-9)
    assert (d["ip_sampled"], d["ip_min_clients"], d["ip_clients_in_sum"]) == (3, 2, [3] * rounds)
    assert d["ip_client_sigma"] == pytest.approx(d["sigma_ip"] / math.sqrt(2), rel=1e-12)
    assert (d["min_clients"], d["clients_in_sum"]) == (3, 4) and d["epsilon_spent"] < 4
    ip = {(r["phase"], r["stage"]): r for r in doc["flower"]["bytes"]["rows"]}[("ip", "collect_masked_vectors")]
    assert (ip["rounds"], ip["messages"]) == (rounds, 3 * rounds)


@pytest.fixture(scope="module")
def private(root) -> dict:
    """`esnfed flower --epsilon 4`: IncFed plain (central noise) and SecAgg+ (distributed noise) in
    one call -> {secagg: document, "shown": the command's output}."""
    out = root / "dp"
    shown = _esnfed(root, "flower", "--app", "incfed", "--plain-and-secagg", "--epsilon", "4", "--out-dir", str(out))
    docs = {s: json.loads((out / f"wesad-incfed{'-secagg' if s else ''}-eps4-100.json").read_text())
            for s in (False, True)}
    return {**docs, "shown": shown, "out": out}


def test_dp_central_is_the_private_trial_and_the_results_record_the_mechanism(root, private):
    """Central noise: the Flower readout, λ (chosen on the validation users) and test accuracy are
    the in-process private trial's; each result records mechanism, ε, δ, σ, clip and accountant;
    the SecAgg+ one what its distributed sum carried; flower-table labels the DP runs."""
    import math

    import yaml

    clip = yaml.safe_load((root / "params.yaml").read_text())["privacy"]["clip"]
    central, dist = private[False], private[True]
    f, p, d = central["flower"], central["pipeline"], central["dp"]
    assert f["readout_relative_difference"] == 0.0 and f["test_accuracy"] == p["test_accuracy"]
    assert central["lambda"] == p["lambda"] and "nonprivate_test_accuracy" in p
    assert (d["noise"], d["epsilon"], d["relation"], d["releases"], d["clip"]) == ("central", "4", "user", 1, clip)
    assert d["delta"] == 1e-5  # privacy.delta auto: min(1e-5, 1/(10·n)), 4 training users
    units = central["config"]["units"]
    assert d["clip_norm"] == clip * math.sqrt(units + units**2) and d["sigma"] == d["noise_multiplier"] * d["clip_norm"]
    assert "Gaussian" in d["mechanism"] and "PLD" in d["accountant"]
    dd = dist["dp"]
    assert dd["noise"] == "distributed" and dd["sigma"] == d["sigma"]
    assert (dd["min_clients"], dd["clients_in_sum"]) == (3, 4) and dist["flower"]["secagg"]["clients"] == 4
    assert dd["sum_sigma"] > dd["sigma"] and dd["epsilon_spent"] < 4  # all 4 stayed: more noise than needed
    assert dist["flower"]["readout_relative_difference"] > 0  # the clients' noise, not the trial's
    assert f"ε = 4 (central, σ = {d['sigma']:.3g})" in private["shown"]
    md = private["out"] / "flower-table.md"
    assert subprocess.run([str(ESNFED), "flower-table", "--runs-dir", str(private["out"]), "--out", str(md)],
                          capture_output=True, timeout=120, env=PIPELINE_ENV).returncode == 0
    text = md.read_text()
    assert "| wesad | incfed (ε = 4, central) | no |" in text and "| wesad | incfed (ε = 4, distributed) | yes |" in text


def test_dp_fedavg_is_the_private_trial_at_best_json_lambda(root):
    """`esnfed flower --app fedavg --epsilon 4`: DP-FedAvg on the plain app (central noise) is the
    in-process private FedAvg trial (the privacy-extra stage's) at best.json's λ, one release: readout
    difference 0, its test accuracy; the dp record carries fedavg_clip and σ = z·fedavg_clip."""
    import yaml

    from esnfed_stages.layout import best_path

    _esnfed(root, "select", "--algo", "fedavg", "--pct", "100")
    out = root / "dp-fedavg"
    # One BLAS thread in the CLI process too, as in Ray's workers: FedAvg's local solves then have
    # equal bits (the Accuracy paragraph of docs/flower.md), so the release is the private trial's exactly.
    shown = _esnfed(root, "flower", "--app", "fedavg", "--epsilon", "4", "--out-dir", str(out),
                    env={"OPENBLAS_NUM_THREADS": "1"})
    doc = json.loads((out / "wesad-fedavg-eps4-100.json").read_text())
    best = json.loads(best_path(root / "runs", "wesad", "fedavg", "100").read_text())
    clip = yaml.safe_load((root / "params.yaml").read_text())["privacy"].get("fedavg_clip", 1.0)
    f, p, d = doc["flower"], doc["pipeline"], doc["dp"]
    assert f["readout_relative_difference"] == 0.0 and f["test_accuracy"] == p["test_accuracy"]
    assert doc["lambda"] == p["lambda"] == best["config"]["lambda"] and "nonprivate_test_accuracy" in p
    assert (d["noise"], d["epsilon"], d["relation"], d["releases"]) == ("central", "4", "user", 1)
    assert d["fedavg_clip"] == d["clip_norm"] == clip and d["sigma"] == d["noise_multiplier"] * clip
    assert "clip" not in d and "fedavg_clip" in d["mechanism"]
    assert f"wesad fedavg ε = 4 (central, σ = {d['sigma']:.3g})" in shown
