"""Client sampling per round (params.yaml federated.client_fraction, esnfed_core/sampling.py): the
round size rule, deterministic sets that differ across rounds, FedIP and FedCLIP rounds averaging
exactly the sampled clients, message counts equal to the analytic formula with sampling, the
default (1) unchanged, and the one-line refusals of the schema and of the paths without it."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import yaml

from esnfed_core.aggregate import weighted_average
from esnfed_core.continual import ContinualConfig, make_strategy, run_continual
from esnfed_core.errors import ConfigError, EsnfedError
from esnfed_core.federated import fedip
from esnfed_core.ip_rule import IPConfig
from esnfed_core.messages import CommLedger
from esnfed_core.method import Method
from esnfed_core.plasticity import ip_epoch, train_ip
from esnfed_core.reservoir import ReservoirConfig, build_reservoir
from esnfed_core.sampling import sample_clients, sample_size
from esnfed_core.settings import Settings
from esnfed_core.communication import Communication, communication_rows
from esnfed_stages.report.tables import participation_notes
from esnfed_core.trial import fit
from experiment_data import trial_data
from esnfed_stages.params.load import load_params

CFG = {"units": 12, "spectral_radius": 0.9, "leak": 0.5, "input_scaling": 0.8, "sigma": 0.3}
IP = {"mu": 0.0, "eta": 0.01, "batch_size": 4, "normalize_step": True}


def _windows(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 10, 3)).astype(np.float32)


@pytest.fixture(scope="module")
def res():
    return build_reservoir(ReservoirConfig(units=16, n_inputs=3, spectral_radius=0.9, leak=0.6, input_scaling=0.8), 3)


def test_round_size_is_flowers_rule_with_at_least_one_client():
    # max(1, int(C·f)): Flower's FedAvg int(C·fraction_train) with min_train_nodes 1 (floor, not round)
    assert [sample_size(9, f) for f in (0.1, 0.25, 0.5, 0.75, 0.99, 1.0)] == [1, 2, 4, 6, 8, 9]
    assert sample_size(2, 0.1) == 1 and sample_size(1, 0.5) == 1 and sample_size(5, 0.3) == 1


def test_sampled_sets_are_deterministic_and_differ_across_rounds():
    sets = [sample_clients(9, 0.5, seed=7, rnd=r) for r in range(10)]
    assert sets == [sample_clients(9, 0.5, seed=7, rnd=r) for r in range(10)]  # same seed, same sets
    for s in sets:
        assert len(s) == 4 and len(set(s)) == 4 and s == sorted(s) and all(0 <= i < 9 for i in s)
    assert len({tuple(s) for s in sets}) > 1  # rounds draw different sets
    assert sets != [sample_clients(9, 0.5, seed=8, rnd=r) for r in range(10)]  # another trial seed
    assert sample_clients(9, 1.0, seed=7, rnd=3) == list(range(9))


def test_fraction_one_is_the_default_bit_for_bit(res):
    xs = [_windows(n, i) for i, n in enumerate((8, 5, 11))]
    cfg = IPConfig(sigma=0.3, eta=0.02, batch_size=4)
    before = fedip(res, xs, cfg, rounds=3, local_epochs=2, seed=4)
    at_one = fedip(res, xs, cfg, rounds=3, local_epochs=2, seed=4, client_fraction=1.0)
    assert before.gain.tobytes() == at_one.gain.tobytes() and before.bias.tobytes() == at_one.bias.tobytes()
    assert not np.array_equal(before.gain, res.gain)  # it trained


def test_a_sampled_fedip_round_averages_exactly_the_sampled_clients(res):
    sizes = (8, 5, 11, 6)
    xs = [_windows(n, 10 + i) for i, n in enumerate(sizes)]
    cfg = IPConfig(sigma=0.3, eta=0.02, batch_size=4)
    seed, epochs = 4, 2
    ledger = CommLedger()
    got = fedip(res, xs, cfg, rounds=1, local_epochs=epochs, seed=seed, ledger=ledger, client_fraction=0.5)
    picked = sample_clients(4, 0.5, seed, 0)
    assert len(picked) == 2
    fitted = {}
    for i in range(len(sizes)):  # each client's local fit from the broadcast (g, b), its own generator
        rng, local = np.random.default_rng(seed), res
        for _ in range(epochs):
            local = ip_epoch(local, xs[i], cfg, rng)
        fitted[i] = (local.gain.astype(np.float64), local.bias.astype(np.float64))
    w = np.array([sizes[i] for i in picked], np.float64)
    want_g = sum(wi * fitted[i][0] for wi, i in zip(w, picked)) / w.sum()
    want_b = sum(wi * fitted[i][1] for wi, i in zip(w, picked)) / w.sum()
    # float64 means of the same float32 uploads, summed in another order, then one float32 rounding:
    # at most a couple of float32 ulps apart (rtol 1e-6 ≈ 8 ulps)
    np.testing.assert_allclose(got.gain, want_g, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(got.bias, want_b, rtol=1e-6, atol=1e-7)
    # ... and not the mean over every client, which differs far beyond that tolerance
    everyone = weighted_average([fitted[i][0] for i in fitted], list(sizes))
    assert np.abs(everyone - want_g).max() > 1e-4
    ups = [e.client for e in ledger.entries if e.algorithm == "fedip" and e.direction == "up"]
    assert ups == [f"client{i}" for i in picked]


def test_the_sampled_sets_change_the_result_and_are_reproducible(res):
    xs = [_windows(n, 20 + i) for i, n in enumerate((8, 5, 11, 6, 7))]
    cfg = IPConfig(sigma=0.3, eta=0.02, batch_size=4)
    ledger = CommLedger()
    a = fedip(res, xs, cfg, rounds=4, local_epochs=1, seed=2, ledger=ledger, client_fraction=0.4)
    b = fedip(res, xs, cfg, rounds=4, local_epochs=1, seed=2, client_fraction=0.4)
    full = fedip(res, xs, cfg, rounds=4, local_epochs=1, seed=2)
    assert a.gain.tobytes() == b.gain.tobytes()  # the same function twice: the same bits
    assert not np.allclose(a.gain, full.gain, rtol=1e-4)  # fewer clients per round: another model
    per_round = {}
    for e in ledger.entries:
        if e.algorithm == "fedip" and e.direction == "up":
            per_round.setdefault(e.round, []).append(e.client)
    assert per_round == {r: [f"client{i}" for i in sample_clients(5, 0.4, 2, r)] for r in range(4)}


def test_one_client_fedip_with_sampling_is_still_centralised_ip(res):
    x = _windows(9, 5)
    cfg = IPConfig(sigma=0.2, eta=0.02, batch_size=4)
    fed = fedip(res, [x], cfg, rounds=3, local_epochs=2, seed=5, client_fraction=0.3)  # max(1, ⌊0.3⌋) = 1
    central = train_ip(res, x, cfg, epochs=6, seed=5)
    assert fed.gain.tobytes() == central.gain.tobytes() and fed.bias.tobytes() == central.bias.tobytes()


def _comm_item(method: str, comm: dict, n: int, c: int) -> Communication:
    return Communication("mine", "100", method, comm["up_floats"], comm["down_floats"], comm["up_bytes"],
                         comm["down_bytes"], comm["rounds"], comm["clients"], units=n, classes=c,
                         ip_rounds=comm.get("ip_rounds"), readouts=comm.get("readouts"),
                         participants=tuple(comm["participants"]) if "participants" in comm else None,
                         context_rounds=tuple(comm["context_rounds"]) if "context_rounds" in comm else None,
                         client_fraction=comm.get("client_fraction", 1.0))


def test_fedip_trial_messages_count_only_the_sampled_clients():
    data = trial_data(seed=3, pct="100")[0]  # four training clients
    k = len(data.train)
    settings = Settings(ip=IP, client_fraction=0.5)
    cfg = {**CFG, "rounds": 3, "local_epochs": 1, "lambda": 1e-3}
    comm = fit("fedip", cfg, 11, data, settings, score=False).communication
    assert comm["client_fraction"] == 0.5
    n, c, sampled = CFG["units"], data.n_classes, sample_size(k, 0.5)
    # PROTOCOL §5 with sampling: 2N each way per sampled client and round, the IncFed readout to all
    assert comm["up_floats"] == sampled * 3 * 2 * n + k * (n * n + n * c)
    assert comm["down_floats"] == sampled * 3 * 2 * n + k * n * c
    row = communication_rows([_comm_item("fedip", {**comm, "ip_rounds": 3, "readouts": 1}, n, c)])[0]
    assert (row["analytic_up_floats"], row["analytic_down_floats"], row["match"]) == (
        comm["up_floats"], comm["down_floats"], True)
    assert row["participations"] == sampled * 3 + k
    assert "fraction 0.5" in participation_notes([row])[0]
    # the default records no client_fraction and counts every client in every round, as before
    full = fit("fedip", cfg, 11, data, Settings(ip=IP), score=False).communication
    assert "client_fraction" not in full and full["up_floats"] == k * (3 * 2 * n + n * n + n * c)


def test_deep_fedip_samples_its_rounds_too():
    data = trial_data(seed=3, pct="100")[0]
    cfg = {**CFG, "rounds": 2, "local_epochs": 1, "layers": 2, "lambda": 1e-3}
    sampled = fit("deep-fedip", cfg, 11, data, Settings(ip=IP, client_fraction=0.25), score=False)
    full = fit("deep-fedip", cfg, 11, data, Settings(ip=IP), score=False)
    assert sampled.communication["client_fraction"] == 0.25 and "client_fraction" not in full.communication
    # one of four clients per IP round: the IP traffic shrinks by 4, the IncFed readout does not
    ip_full = full.communication["up_floats"] - sampled.communication["up_floats"]
    assert ip_full > 0 and ip_full % 3 == 0


@pytest.mark.parametrize("method", ["fedclip-naive", "fedclip-replay", "fedclip-joint"])
def test_fedclip_trial_messages_count_only_the_sampled_clients(method):
    data = trial_data(seed=2, pct="100")[0]
    cfg = {**CFG, "budget": 2, "local_epochs": 1}
    model = fit(method, cfg, 5, data, Settings(ip=IP, client_fraction=0.5))
    comm = model.communication
    assert comm["client_fraction"] == 0.5
    row = communication_rows([_comm_item(method, comm, CFG["units"], data.n_classes)])[0]
    assert (row["analytic_up_floats"], row["analytic_down_floats"]) == (comm["up_floats"], comm["down_floats"])
    assert row["match"] is True
    readouts = [r if method == "fedclip-joint" else 1 for r in comm["context_rounds"]]
    assert row["participations"] == sum(sample_size(p, 0.5) * r + p * s for p, r, s in
                                        zip(comm["participants"], comm["context_rounds"], readouts))
    assert row["participations"] < comm["clients"] * comm["rounds"]


def test_fedclip_rounds_average_the_sampled_clients_and_default_is_unchanged():
    data = trial_data(seed=4, pct="100")[0]
    users = list(data.train.values())
    train = [[(u.of_context(t).x, u.of_context(t).y) for t in range(data.n_contexts)] for u in users]
    res = build_reservoir(ReservoirConfig(units=10, n_inputs=3, spectral_radius=0.9, leak=0.6, input_scaling=0.8), 1)
    ip = IPConfig(sigma=0.3, eta=0.02, batch_size=4)

    def run(**kw):
        ledger = CommLedger()
        out = run_continual(res, train, make_strategy("naive", budget=2),
                            ContinualConfig(True, ip, data.n_classes, seed=6, **kw), ledger=ledger)
        return out, ledger

    (default, _), (one, _) = run(), run(client_fraction=1.0)
    for a, b in zip(default.reservoirs, one.reservoirs):  # the same function twice: the same bits
        assert a.gain.tobytes() == b.gain.tobytes() and a.bias.tobytes() == b.bias.tobytes()
    assert all(np.asarray(a).tobytes() == np.asarray(b).tobytes() for a, b in zip(default.readouts, one.readouts))
    sampled, ledger = run(client_fraction=0.5)
    ups: dict[int, list[str]] = {}
    for e in ledger.entries:
        if e.algorithm == "fedclip" and e.direction == "up":
            ups.setdefault(e.round, []).append(e.client)
    # the run's IP rounds are numbered across contexts; every client has windows at every context
    assert ups == {r: [f"client{i}" for i in sample_clients(len(users), 0.5, 6, r)] for r in range(6)}
    assert not np.allclose(sampled.reservoirs[-1].gain, default.reservoirs[-1].gain, rtol=1e-4)


def test_settings_refuse_the_paths_without_sampling():
    assert Settings(device="torch-cpu", client_fraction=0.5).samples(Method.parse("fedip"))  # torch samples too
    s = Settings(ip=IP, client_fraction=0.5)
    # DP-FedIP samples (tests/test_privacy_sampling.py); DP-FedCLIP refuses the context pool (the
    # roster pool samples: tests/test_privacy_fedclip_sampling.py)
    with pytest.raises(ConfigError, match=r"^federated\.client_fraction: DP-fedclip-naive needs federated\.sampling_pool"):
        from esnfed_core.privacy import DPSpec  # noqa: PLC0415
        from esnfed_core.private_trial import fit_private  # noqa: PLC0415

        fit_private("fedclip-naive", {**CFG, "budget": 1, "local_epochs": 1}, 0, trial_data()[0], s,
                    DPSpec(epsilon=1.0, delta=1e-3))
    from esnfed_stages.studies.flower import run_config  # noqa: PLC0415

    # The Flower apps sample (their run config carries the fraction, only below 1 and only for the
    # methods whose trial samples); SecAgg+ needs 3 clients a round: 0.5 of 4 (2) is refused.
    args = ({**CFG, "rounds": 1, "local_epochs": 1}, {"reservoir": 0, "ip": 0}, trial_data(pct="100")[0])
    assert len(args[2].train) == 4
    assert run_config(*args, s, 1e-3, "fedip", False)["client-fraction"] == 0.5
    assert "client-fraction" not in run_config(*args, s, 1e-3, "incfed", False)
    assert "client-fraction" not in run_config(*args, Settings(ip=IP), 1e-3, "fedip", False)
    assert run_config(*args, Settings(ip=IP, client_fraction=0.75), 1e-3, "fedip", True)["client-fraction"] == 0.75
    with pytest.raises(ConfigError, match=r"^federated\.client_fraction: 0\.5 of 4 clients samples 2 per round; "
                                          r"SecAgg\+ needs at least 3$"):
        run_config(*args, s, 1e-3, "fedip", True)
    for bad in (0, 1.5, "half", float("nan")):
        with pytest.raises(EsnfedError, match=r"^federated\.client_fraction: "):
            Settings(client_fraction=bad)
    # the trial keys of a default run (and of methods without rounds) do not mention it
    assert "client_fraction" not in Settings().used_by(Method.parse("fedip"), True)
    assert "client_fraction" not in s.used_by(Method.parse("incfed"), True)
    assert s.used_by(Method.parse("fedclip-joint"), True)["client_fraction"] == 0.5


@pytest.mark.parametrize("bad, why", [(0, "must be > 0.0"), (1.5, "must be <= 1.0"), ("half", "expected a number"),
                                      (None, "expected a number")])
def test_the_schema_refuses_bad_fractions_in_one_line(bad, why):
    from pathlib import Path  # noqa: PLC0415

    from esnfed_stages.params.schema import validate  # noqa: PLC0415

    params = load_params(Path(__file__).resolve().parents[1] / "params.yaml")
    assert params["federated"] == {"client_fraction": 1.0, "sampling_pool": "context"}  # the default: every client
    params = copy.deepcopy(params)
    params["federated"]["client_fraction"] = bad
    with pytest.raises(ConfigError) as exc:
        validate(params)
    assert str(exc.value).startswith("params.yaml: federated.client_fraction: ") and why in str(exc.value)
    assert "\n" not in str(exc.value)


def test_check_params_takes_a_fraction_and_refuses_a_bad_one_in_one_line(tmp_path):
    from pathlib import Path  # noqa: PLC0415

    from typer.testing import CliRunner  # noqa: PLC0415

    from esnfed_cli.main import app  # noqa: PLC0415

    params = load_params(Path(__file__).resolve().parents[1] / "params.yaml")
    path = tmp_path / "params.yaml"
    for device in ("cpu", "torch-cpu"):  # the numpy and the torch paths both sample
        params["federated"]["client_fraction"] = 0.5
        params["runner"]["device"] = device
        path.write_text(yaml.safe_dump(params))
        ok = CliRunner().invoke(app, ["check-params", "--params", str(path)])
        assert ok.exit_code == 0, ok.output
    params["federated"]["client_fraction"] = "all"
    path.write_text(yaml.safe_dump(params))
    out = CliRunner().invoke(app, ["check-params", "--params", str(path)])
    lines = [ln for ln in out.output.splitlines() if ln.strip()]
    assert out.exit_code != 0 and len(lines) == 1, out.output
    assert "federated.client_fraction: expected a number, got 'all'" in lines[0]


def test_select_retrain_assess_with_sampling_and_the_communication_table(tmp_path):
    """The stages end to end with federated.client_fraction 0.5: the assess files record the
    fraction and their counts equal the analytic formula with sampling (the default's: the fedip
    trial test above)."""
    import json  # noqa: PLC0415

    from esnfed_core.communication import split_rounds  # noqa: PLC0415
    from experiment_data import make_dataset, run_method_stages, small_params, write_params  # noqa: PLC0415

    make_dataset(tmp_path)
    params = small_params()
    params["federated"] = {"client_fraction": 0.5}
    write_params(tmp_path, params)
    run_method_stages(tmp_path, "wesad", [("fedip", None), ("fedclip", "naive")])
    checked = set()
    for method in ("fedip", "fedclip-naive"):
        doc = json.loads((tmp_path / "runs" / "assess" / "wesad" / f"{method}.json").read_text())
        for pct, share in doc["pcts"].items():
            comm = share["communication"]
            assert comm["client_fraction"] == 0.5
            contexts = len(share["stream_accuracy"][0]) if share.get("stream_accuracy") else None
            ip_rounds, readouts = split_rounds(method, comm["rounds"], contexts)
            row = communication_rows([_comm_item(method, {**comm, "ip_rounds": ip_rounds, "readouts": readouts},
                                                 share["config"]["units"], 3)])[0]
            assert row["match"] is True, (method, pct, row)
            full = comm["clients"] * comm["rounds"]
            # fewer clients sent, except with one client (max(1, ⌊0.5⌋) = 1)
            assert row["participations"] < full if comm["clients"] > 1 else row["participations"] == full
            checked.add(comm["clients"] > 1)
    assert checked == {True, False}


def test_esnfed_flower_refuses_sampling_under_secaggplus_and_dp_in_one_line_before_fitting(tmp_path):
    """The Flower apps sample (tests_flower); a fraction too small for SecAgg+ (0.5 of the share's
    clients: under 3 a round, DP or not) and privacy.amplification: sampling under distributed DP
    (SecAgg+: the server knows whom it sampled) are refused with one line naming the key, before any
    fit, writing nothing (DP-FedIP samples, central and distributed: tests_flower)."""
    import sys  # noqa: PLC0415

    from typer.testing import CliRunner  # noqa: PLC0415

    from esnfed_cli.main import app  # noqa: PLC0415
    from experiment_data import make_dataset, small_params, write_params  # noqa: PLC0415

    make_dataset(tmp_path)
    params = small_params()
    params["federated"] = {"client_fraction": 0.5}
    write_params(tmp_path, params)
    amplified = {**params, "privacy": {**params["privacy"], "amplification": "sampling"}}
    (tmp_path / "amp").mkdir()
    write_params(tmp_path / "amp", amplified)
    key = "federated.client_fraction: "
    for extra, file, why in ((["--app", "fedip", "--secagg"], "params.yaml", key + "0.5 of "),
                             (["--app", "fedclip-naive", "--secagg"], "params.yaml", key + "0.5 of "),
                             (["--app", "fedip", "--secagg", "--epsilon", "1"], "params.yaml", key + "0.5 of "),
                             (["--app", "fedip", "--secagg", "--epsilon", "1"], "amp/params.yaml",
                              "privacy.amplification: sampling is not available under SecAgg+")):
        out = CliRunner().invoke(app, ["flower", "--dataset", "wesad", "--params", str(tmp_path / file),
                                       "--data-dir", str(tmp_path / "data"), "--runs-dir", str(tmp_path / "runs"),
                                       "--out-dir", str(tmp_path / "out"), "--flower-python", sys.executable,
                                       "--pct", "50", *extra])
        lines = out.output.strip().splitlines()
        assert out.exit_code != 0 and len(lines) == 1, out.output
        assert why in lines[0], lines[0]
        assert "SecAgg+" in lines[0] and ("needs at least 3" in lines[0] or "amplification" in why), lines[0]
        assert not (tmp_path / "out").exists()


def test_esnfed_privacy_extra_fedclip_refuses_sampling_in_one_line_and_writes_nothing(tmp_path):
    """The privacy stage takes a fraction below 1 (DP-FedIP samples: tests/test_privacy_sampling.py);
    DP-FedCLIP refuses it with the context pool, naming the pool's key, before it writes anything
    (the roster pool: tests/test_privacy_fedclip_sampling.py)."""
    from typer.testing import CliRunner  # noqa: PLC0415

    from esnfed_cli.main import app  # noqa: PLC0415
    from experiment_data import cli_ok, make_dataset, small_params, stage_options, write_params  # noqa: PLC0415

    make_dataset(tmp_path)
    params = small_params()
    params["federated"] = {"client_fraction": 0.5}
    params["privacy"]["extra_methods"] = ["fedclip-naive"]
    params["privacy"]["config"] = "select"  # the opt-in methods retrain the select stage's configs
    write_params(tmp_path, params)
    common = stage_options(tmp_path)
    for algo in (["fedip"], ["fedclip", "--strategy", "naive"]):  # fedclip's grid starts from fedip's best
        cli_ok("select", "--algo", *algo, "--pct", str(params["privacy"]["pct"]), *common)
    out = CliRunner().invoke(app, ["privacy", *common, "--extra", "fedclip-naive",
                                   "--out-dir", str(tmp_path / "privacy")])
    lines = out.output.strip().splitlines()
    assert out.exit_code != 0 and len(lines) == 1, out.output
    assert "federated.client_fraction: DP-fedclip-naive needs federated.sampling_pool: roster" in lines[0]
    assert not (tmp_path / "privacy").exists()


def test_trials_at_fraction_one_are_the_default_trials_bit_for_bit():
    data = trial_data(seed=3, pct="100")[0]
    for method, extra in (("fedip", {"rounds": 2, "local_epochs": 1}), ("fedclip-joint", {"local_epochs": 1}),
                          ("fedclip-replay", {"budget": 2, "local_epochs": 1})):
        a = fit(method, {**CFG, **extra}, 7, data, Settings(ip=IP))
        b = fit(method, {**CFG, **extra}, 7, data, Settings(ip=IP, client_fraction=1.0))
        assert a.reservoir.gain.tobytes() == b.reservoir.gain.tobytes()
        assert a.readout.tobytes() == b.readout.tobytes() and a.communication == b.communication
        assert a.validation == b.validation and "client_fraction" not in a.communication


def test_the_privacy_and_flower_help_name_the_key():
    from typer.testing import CliRunner  # noqa: PLC0415

    from esnfed_cli.main import app  # noqa: PLC0415

    out = CliRunner().invoke(app, ["flower", "--help"], env={"COLUMNS": "200"})
    text = " ".join(w for w in out.output.split() if w.strip("│╭╮╰╯─"))  # without the box's borders
    assert out.exit_code == 0 and ("federated.client_fraction: the share of clients each FedIP/FedCLIP round "
                                   "samples, at least 3 a round with --secagg; with --secagg --epsilon "
                                   "privacy.amplification must be none") in text
    out = CliRunner().invoke(app, ["privacy", "--help"], env={"COLUMNS": "200"})
    text = " ".join(w for w in out.output.split() if w.strip("│╭╮╰╯─"))  # without the box's borders
    assert out.exit_code == 0 and ("federated.client_fraction: FedIP's rounds sample, no amplification claimed; "
                                   "DP-FedCLIP needs 1") in text
