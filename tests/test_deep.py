"""Deep reservoirs (esnfed_core.deep): the stacked recurrence, one layer = the shallow
reservoir byte for byte, IncFed exact, IP per layer, FedIP on one client = centralised IP, seeds,
the saved-model format, the numpy fallback of accelerated devices, the search at the shallow
selection's units, and the pipeline select -> retrain -> assess -> ttest -> report with the deep
methods on tiny data."""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from esnfed_cli.main import app
from esnfed_core.errors import DataError
from esnfed_core.deep import DeepConfig, DeepReservoir, build_deep_reservoir, split_units
from esnfed_core.federated import Client, fedip, incfed
from esnfed_core.messages import CommLedger
from esnfed_core.method import Method
from esnfed_core.metrics import activation_histogram
from esnfed_core.plasticity import IPConfig, ip_gradients, ip_step, train_ip
from esnfed_core.readout import ridge_stats, solve
from esnfed_core.reservoir import Reservoir, ReservoirConfig, build_reservoir, iter_states, run_batch
from esnfed_core.settings import Settings
from esnfed_core.trial import fit
from esnfed_core.validation import ParameterError
from esnfed_stages.experiment import select as select_stage
from esnfed_stages.params.experiment import experiment_params
from esnfed_stages.experiment.models import load_model, save_model
from esnfed_stages.experiment.trial_data import open_dataset
from experiment_data import cli_ok, make_dataset, run_method_stages, small_params, trial_data, write_params

U, T = 4, 40


def _x(windows: int = 24, steps: int = T, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((windows, steps, U)).astype(np.float32)


def _labels(windows: int = 24, steps: int = T, seed: int = 1) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 3, (windows, steps))


def _deep(units: int = 30, layers: int = 3, seed: int = 7, leak: float = 0.4) -> DeepReservoir:
    return build_deep_reservoir(DeepConfig.shared(U, units, layers, 0.9, leak, 0.8), seed)


# ----------------------------------------------------------------- the model

def test_units_split_evenly_and_total_is_kept():
    assert split_units(30, 3) == (10, 10, 10) and split_units(40, 3) == (14, 13, 13)
    assert split_units(20, 1) == (20,)
    with pytest.raises(ParameterError, match="layers: 5 layers cannot share 4 units"):
        split_units(4, 5)
    res = _deep(40, 3)
    assert res.units == 40 and res.segments == ((0, 14), (14, 27), (27, 40))
    assert [r.n_inputs for r in res.layers] == [U, 14, 13]


def test_layer_l_is_driven_by_layer_l_minus_1_states():
    """The fused stacked pass equals running each layer on the previous layer's states."""
    res, x = _deep(), _x()
    states = run_batch(res, x)
    inp = x
    for layer, (a, b) in zip(res.layers, res.segments):
        alone = run_batch(layer, inp)
        np.testing.assert_array_equal(states[:, :, a:b], alone)  # same products, same shapes
        inp = np.ascontiguousarray(alone.transpose(1, 0, 2))


def test_layers_have_their_own_leak_radius_and_scaling():
    cfgs = (ReservoirConfig(U, 8, 0.5, 0.2, 1.0), ReservoirConfig(8, 6, 0.95, 0.7, 0.3))
    res = build_deep_reservoir(DeepConfig(cfgs), 3)
    assert [r.leak for r in res.layers] == [0.2, 0.7]
    np.testing.assert_array_equal(res.leak, [0.2] * 8 + [0.7] * 6)
    assert np.abs(res.layers[1].w_in).max() <= 0.3
    with pytest.raises(ParameterError, match=r"layers\[1\].n_inputs: 5, expected the 8 units"):
        DeepConfig((cfgs[0], ReservoirConfig(5, 6, 0.9, 0.5, 1.0)))


def test_one_layer_deep_is_the_shallow_reservoir_byte_for_byte():
    """Same draws, same recurrence, same statistics, same IP step: the same bytes."""
    cfg = ReservoirConfig(U, 30, 0.9, 0.3, 0.8)
    shallow, deep = build_reservoir(cfg, 5), build_deep_reservoir(DeepConfig((cfg,)), 5)
    assert deep.layers[0].w.tobytes() == shallow.w.tobytes()
    assert deep.layers[0].w_in.tobytes() == shallow.w_in.tobytes()
    x, y = _x(), _labels()
    assert run_batch(deep, x).tobytes() == run_batch(shallow, x).tobytes()
    a, b = ridge_stats(deep, x, y, 3, 16), ridge_stats(shallow, x, y, 3, 16)
    assert a.a.tobytes() == b.a.tobytes() and a.b.tobytes() == b.b.tobytes()
    ip = IPConfig(sigma=0.3, batch_size=8)
    s1, s2 = train_ip(shallow, x, ip, 2, 0), train_ip(deep, x, ip, 2, 0)
    assert s2.gain.tobytes() == s1.gain.tobytes() and s2.bias.tobytes() == s1.bias.tobytes()


def test_one_layer_deep_method_equals_the_shallow_method_byte_for_byte():
    data, _ = trial_data(pct="75")
    cfg = {"units": 12, "spectral_radius": 0.9, "leak": 0.4, "input_scaling": 0.7, "sigma": 0.4,
           "rounds": 2, "local_epochs": 1}
    settings = Settings(ip={"batch_size": 4})
    for shallow, deep in (("incfed", "deep-incfed"), ("fedip", "deep-fedip")):
        a = fit(shallow, cfg, 11, data, settings)
        b = fit(deep, {**cfg, "layers": 1}, 11, data, settings)
        assert isinstance(b.reservoir, DeepReservoir)
        assert a.readout.tobytes() == b.readout.tobytes() and a.lam == b.lam
        assert a.validation["per_lambda"] == b.validation["per_lambda"]
        assert a.communication == b.communication


def test_deep_draws_are_deterministic_and_seed_dependent():
    a, b, c = _deep(seed=1), _deep(seed=1), _deep(seed=2)
    for ra, rb, rc in zip(a.layers, b.layers, c.layers):
        assert ra.w.tobytes() == rb.w.tobytes() and ra.w_in.tobytes() == rb.w_in.tobytes()
        assert ra.w.tobytes() != rc.w.tobytes()
    data, _ = trial_data()
    cfg = {"units": 12, "spectral_radius": 0.8, "leak": 0.5, "input_scaling": 1.0, "layers": 2}
    m1, m2 = fit("deep-incfed", cfg, 4, data, Settings()), fit("deep-incfed", cfg, 4, data, Settings())
    assert m1.readout.tobytes() == m2.readout.tobytes()


# ----------------------------------------------------------------- IncFed and IP

def test_deep_incfed_equals_deep_centralised_ridge():
    res = _deep(24, 2)
    xs = [_x(12, seed=s) for s in range(3)]
    ys = [_labels(12, seed=10 + s) for s in range(3)]
    clients = [Client(f"c{i}", x, y, 3, batch_size=4) for i, (x, y) in enumerate(zip(xs, ys))]
    ledger = CommLedger()
    fed = incfed(res, clients, [1e-3, 0.1], ledger=ledger)
    pooled = ridge_stats(res, np.concatenate(xs), np.concatenate(ys), 3, 4)
    # The same batches (4 windows, no batch crosses a client), summed in another order: float64.
    np.testing.assert_allclose(fed.stats.b, pooled.b, rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(fed.readouts, solve(pooled, [1e-3, 0.1]), rtol=1e-9, atol=1e-12)
    n = res.units
    assert ledger.totals("incfed")["up_floats"] == 3 * (n * n + 3 * n)


def _kl_to_target(res, x, sigma: float) -> list[float]:
    """Per layer: KL of the histogram of h = tanh(g·x_net + b) to N(0, σ²) (binned)."""
    hist = activation_histogram(res, x, kind="activation", bins=60, batch_size=32)
    centres = (hist.edges[:-1] + hist.edges[1:]) / 2
    target = np.exp(-centres**2 / (2 * sigma**2))
    target /= target.sum()
    out = []
    for a, b in res.segments:
        p = hist.counts[a:b].sum(axis=0).astype(np.float64)
        p /= p.sum()
        keep = p > 0
        out.append(float(np.sum(p[keep] * np.log(p[keep] / np.maximum(target[keep], 1e-300)))))
    return out


def test_ip_moves_every_layer_toward_the_target():
    res, x = _deep(30, 3, leak=0.5), _x(48)
    ip = IPConfig(sigma=0.2, eta=0.05, batch_size=12)
    before = _kl_to_target(res, x, 0.2)
    after_res = train_ip(res, x, ip, 6, 0)
    after = _kl_to_target(after_res, x, 0.2)
    assert all(b < a for a, b in zip(before, after)), (before, after)
    for (a, b), layer in zip(res.segments, after_res.layers):  # each layer's own g, b moved
        assert np.any(layer.gain != 1.0) and np.any(layer.bias != 0.0)
        np.testing.assert_array_equal(after_res.gain[a:b], layer.gain)


def test_ip_gradient_matches_a_direct_per_unit_computation():
    """The fused chunked sums (several time chunks, per-unit leaks) equal the rule evaluated on
    the full states: ∂b = −μ/σ² + (h/σ²)(2σ² + 1 − h² + μh), ∂g = −1/g + ∂b·x_net."""
    res, x = _deep(30, 2, leak=0.3), _x(40, steps=80)
    res = res.with_ip(np.linspace(0.8, 1.2, 30), np.linspace(-0.1, 0.1, 30))
    cfg = IPConfig(sigma=0.4, mu=0.1)
    xnet = np.empty((80, 40, 30), np.float32)
    run_batch(res, x, xnet_out=xnet)
    xn = xnet.astype(np.float64)
    h = np.tanh(res.gain * xn + res.bias)
    s2 = cfg.sigma**2
    db = -cfg.mu / s2 + (h / s2) * (2 * s2 + 1 - h * h + cfg.mu * h)
    want_db = db.sum(axis=(0, 1)) / 40
    want_dg = -80 / res.gain.astype(np.float64) + (db * xn).sum(axis=(0, 1)) / 40
    dg, dbv = ip_gradients(res, x, cfg)
    # As tests/test_plasticity.py bounds the shallow sums: float32 chunk sums and a·h recovered
    # from the states (measured 3e-8 and 9e-8 of the largest entry here).
    np.testing.assert_allclose(dbv, want_db, rtol=0, atol=2e-6 * np.abs(want_db).max())
    np.testing.assert_allclose(dg, want_dg, rtol=0, atol=2e-6 * np.abs(want_dg).max())


def test_ip_step_is_normalised_per_layer():
    res, x = _deep(30, 3), _x()
    after = ip_step(res, x, IPConfig(sigma=0.3, eta=0.01))
    for a, b in res.segments:
        step = np.linalg.norm(after.gain[a:b].astype(np.float64) - 1.0)
        assert step == pytest.approx(0.01, rel=1e-4)  # every layer moves by η


def test_one_client_deep_fedip_equals_centralised_deep_ip():
    res, x = _deep(24, 2), _x(30)
    ip = IPConfig(sigma=0.3, batch_size=8)
    central = train_ip(res, x, ip, epochs=4, seed=9)
    ledger = CommLedger()
    fed = fedip(res, [x], ip, rounds=2, local_epochs=2, seed=9, ledger=ledger)
    assert fed.gain.tobytes() == central.gain.tobytes() and fed.bias.tobytes() == central.bias.tobytes()
    assert ledger.totals("fedip")["up_floats"] == 2 * 2 * res.units  # 2N per round, N = Σ N_l
    setup = ledger.totals("fedip", include_setup=True)["down_floats"] - ledger.totals("fedip")["down_floats"]
    assert setup == sum(r.w_in.size + r.w.size + 2 * r.units + 1 for r in res.layers)


def test_deep_reservoirs_stream_by_batch():
    """iter_states yields each batch's stacked states (compared with the same batch run alone:
    same product shapes, same bits), in the order asked."""
    res, x = _deep(), _x(20)
    order = np.random.default_rng(3).permutation(20)
    seen = []
    for sb in iter_states(res, x, batch_size=7, order=order):
        assert sb.states.shape == (T, len(sb.index), res.units)
        assert sb.states.tobytes() == run_batch(res, x[sb.index]).tobytes()
        seen += list(sb.index)
    assert seen == list(order)


# ----------------------------------------------------------------- devices and saved models

def test_accelerated_devices_run_deep_methods_on_numpy():
    """runner.device torch-cpu | cuda: deep methods fall back to the numpy path explicitly, and
    the torch kernels refuse a deep reservoir with one line."""
    data, _ = trial_data()
    cfg = {"units": 12, "spectral_radius": 0.8, "leak": 0.5, "input_scaling": 1.0, "layers": 2}
    for device in ("torch-cpu", "cuda"):
        assert not Settings(device=device).accelerated(Method.parse("deep-incfed"))
    assert Settings(device="torch-cpu").accelerated(Method.parse("incfed"))
    cpu = fit("deep-incfed", cfg, 4, data, Settings())
    dev = fit("deep-incfed", cfg, 4, data, Settings(device="torch-cpu"))
    assert cpu.readout.tobytes() == dev.readout.tobytes()
    from esnfed_core.accel.torch_reservoir import Bank  # torch: in the [test] extra

    with pytest.raises(ValueError, match=r"deep reservoir \(2 layers\) runs on the numpy path only"):
        Bank.from_reservoirs([cpu.reservoir], "cpu")
    from esnfed_core.accel.trials import fit_batch

    with pytest.raises(ValueError, match="deep-incfed runs on the numpy path only"):
        fit_batch("deep-incfed", [cfg], [4], data, Settings(device="torch-cpu"))


def test_saved_deep_model_round_trips(tmp_path):
    data, _ = trial_data()
    cfg = {"units": 13, "spectral_radius": 0.8, "leak": 0.5, "input_scaling": 1.0, "layers": 3,
           "sigma": 0.3, "rounds": 1, "local_epochs": 1}
    model = fit("deep-fedip", cfg, 4, data, Settings(ip={"batch_size": 4}))
    save_model(tmp_path, 0, model, {"dataset": "wesad", "pct": "50"})
    back, meta = load_model(tmp_path, 0)
    assert isinstance(back.reservoir, DeepReservoir) and meta["units"] == 13
    x = _x(5, steps=12, seed=3)[:, :, :3]
    assert run_batch(back.reservoir, x).tobytes() == run_batch(model.reservoir, x).tobytes()
    arrays = np.load(tmp_path / "seed-0.npz")
    assert list(arrays["layer_units"]) == [5, 4, 4] and arrays["leak"].shape == (3,)
    assert isinstance(load_model(tmp_path, 0)[0].reservoir.layers[0], Reservoir)


# ----------------------------------------------------------------- the pipeline

def _shallow_best(root: Path, method: str, pct: str, units: int) -> None:
    """A stand-in best.json of the shallow ``method`` that selected ``units``."""
    path = root / "runs/select/wesad" / method / pct / "best.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    config = {"units": units, "spectral_radius": 0.5, "leak": 0.5, "input_scaling": 1.0, "lambda": 1e-3}
    path.write_text(json.dumps({"trial": 1, "config": config}))


def test_deep_search_uses_exactly_the_shallow_selections_units(tmp_path):
    """Every trial of a deep method has the units its shallow counterpart selected in that share
    (here 10, outside the space {8, 12}); ρ, leak and scaling are drawn as the shallow trials'."""
    make_dataset(tmp_path)
    params = small_params()
    params["budgets"]["default"]["trials"] = 6
    exp = experiment_params(params)
    data = open_dataset(tmp_path / "data", "wesad")
    runs = tmp_path / "runs"
    _shallow_best(runs.parent, "incfed", "25", 10)
    _shallow_best(runs.parent, "incfed", "50", 11)
    for pct, units in (("25", 10), ("50", 11)):
        trials, base = select_stage.plan_share(exp, data, Method("deep-incfed"), pct, runs)
        shallow, _ = select_stage.plan_share(exp, data, Method("incfed"), pct, runs)
        assert base["config"]["units"] == units and len(trials) == 6
        assert {t.task.config["units"] for t in trials} == {units}
        for d, s in zip(trials, shallow):
            assert d.task.config == {**s.task.config, "units": units, "layers": 2}
            assert d.task.seed == s.task.seed
    with pytest.raises(DataError, match=r"fedip/25/best\.json: not found: run `esnfed select --dataset wesad "
                       r"--algo fedip --pct 25` before deep-fedip"):
        select_stage.plan_share(exp, data, Method("deep-fedip"), "25", runs)
    _shallow_best(runs.parent, "fedip", "25", 0)
    with pytest.raises(DataError, match=r"fedip/25/best\.json: config\.units: expected a positive integer"):
        select_stage.plan_share(exp, data, Method("deep-fedip"), "25", runs)


def test_deep_select_without_the_shallow_selection_fails_in_one_line(tmp_path):
    root = tmp_path
    make_dataset(root)
    write_params(root, small_params())
    result = CliRunner().invoke(app, ["select", "--dataset", "wesad", "--algo", "deep-incfed", "--pct", "25",
                                      "--params", str(root / "params.yaml"), "--data-dir", str(root / "data"),
                                      "--runs-dir", str(root / "runs")])
    assert result.exit_code != 0
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "run `esnfed select --dataset wesad --algo incfed --pct 25` before deep-incfed" in lines[0]
    assert not (root / "runs/select/wesad/deep-incfed/25/best.json").exists()


def test_deep_methods_flow_select_retrain_assess_report(tmp_path):
    """Tiny data: the deep methods and their shallow counterparts through every stage; the
    report writes deep.md/.csv and the communication rows of the deep methods match."""
    root = tmp_path
    make_dataset(root)
    params = small_params()
    params["budgets"]["default"]["retrains"] = 2
    write_params(root, params)
    run_method_stages(root, "wesad", [(algo, None) for algo in ("incfed", "deep-incfed", "fedip", "deep-fedip")])
    best = json.loads((root / "runs/select/wesad/deep-fedip/25/best.json").read_text())
    assert best["config"]["layers"] == 2 and "local_epochs" in best["config"]
    shallow_best = json.loads((root / "runs/select/wesad/fedip/25/best.json").read_text())
    assert best["config"]["units"] == shallow_best["config"]["units"]  # the same total units
    assert best["base"]["method"] == "fedip" and best["base"]["config"] == shallow_best["config"]
    units = json.loads((root / "runs/select/wesad/incfed/25/best.json").read_text())["config"]["units"]
    for i in (0, 1):  # common random numbers: the same ρ, leak, scaling; the shallow selection's units
        shallow = json.loads((root / f"runs/select/wesad/incfed/25/trial-000{i}.json").read_text())["config"]
        deep = json.loads((root / f"runs/select/wesad/deep-incfed/25/trial-000{i}.json").read_text())["config"]
        assert deep == {**shallow, "units": units, "layers": 2}
    doc = json.loads((root / "runs/assess/wesad/deep-fedip.json").read_text())
    assert doc["method"] == "deep-fedip" and doc["algo"] == "deep-fedip"
    assert all(len(doc["pcts"][p]["test_accuracy"]) == 2 for p in doc["pcts"])
    assert doc["pcts"]["100"]["communication"]["clients"] == 4
    cli_ok("ttest", "--assess-dir", str(root / "runs/assess"), "--out", str(root / "reports/ttest.json"),
           "--allow-missing", "--params", str(root / "params.yaml"))
    for stage in ("privacy", "flower"):  # not run here: empty (a folder named on the command line must be there)
        (root / "runs" / stage).mkdir(parents=True, exist_ok=True)
    cli_ok("report", "--assess-dir", str(root / "runs/assess"), "--ttest", str(root / "reports/ttest.json"),
           "--out-dir", str(root / "reports"), "--allow-missing", "--params", str(root / "params.yaml"),
           "--privacy-dir", str(root / "runs/privacy"), "--flower-dir", str(root / "runs/flower"),
           "--select-dir", str(root / "runs/select"), "--data-dir", str(root / "data"))
    md = (root / "reports/tables/deep.md").read_text()
    assert "WESAD deep-fedip" in md and "n/a" in md  # HHAR cells not run here
    import csv

    rows = [r for r in csv.DictReader((root / "reports/tables/communication.csv").open())
            if r["method"].startswith("deep-")]
    assert len(rows) == 8
    for r in rows:  # measured from the ledger: the shallow formulas at N = the total units
        n, k, c = int(r["units"]), int(r["clients"]), 3  # the tiny data has 3 classes
        ip = int(r["ip_rounds"] or 0)
        assert int(r["up_floats"]) == k * (2 * n * ip + n * n + n * c)
        assert int(r["down_floats"]) == k * (2 * n * ip + n * c)
    # the selection's total from the trial records: deep-incfed's 2 trials at the pinned N, each its
    # IncFed messages as measured (statistics and 2 counts up, the readout and a count down, float64;
    # the tiny data's 3 classes) and the 2 validation users' scoring of the 7 λ values (a readout each
    # down, 8 counts up) at the report's C for WESAD (4, esnfed_stages.data._datasets.classes_of)
    for r in rows:
        if r["method"] == "deep-incfed":
            n, k, c, v, lam, cv = int(r["units"]), int(r["clients"]), 3, 2, 7, 4
            trial = (k * (8 * (n * n + n * c) + 16) + k * (8 * n * c + 8)
                     + v * lam * (8 * n * cv + 8) + v * 8 * (lam + 1))
            assert (r["selection_trials"], r["selection_bytes"]) == ("2", str(2 * trial))
        else:
            assert r["selection_trials"] == "2" and int(r["selection_bytes"]) > 0
