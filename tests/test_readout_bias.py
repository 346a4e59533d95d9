"""Tests of the opt-in readout bias (params.yaml readout.bias, the papers' eq. 1 y = W_out h + b_out):
the augmented statistics, the solve with an unpenalised bias, predictions, the stationary trials,
the message formulas, saved models, the Flower run config, and end to end through the stages.
(IncFed and FedAvg with bias, and reservoirpy's Ridge(fit_bias=True): tests/test_federated.py.)"""

from __future__ import annotations

import numpy as np
import pytest

from esnfed_core.data.processed import UserData
from esnfed_core.errors import ConfigError
from esnfed_core.method import Method
from esnfed_core.readout import count_correct, predict, ridge_stats, solve
from esnfed_core.reservoir import ReservoirConfig, build_reservoir, run_batch
from esnfed_core.settings import Settings
from esnfed_core.communication import Communication, analytic_floats
from esnfed_core.trial import TrialData, fit
from float32_bounds import readout_rtol

C, N = 4, 30
LAMBDAS = [1e-5, 1e-3, 0.1, 1.0]
CFG = {"units": 12, "spectral_radius": 0.9, "leak": 0.5, "input_scaling": 0.8, "sigma": 0.3,
       "rounds": 2, "local_epochs": 1, "budget": 1}


@pytest.fixture
def res():
    return build_reservoir(ReservoirConfig(3, N, 0.9, 0.4, 0.9), 17)


def rows(res, x, batch_size):
    """The float32 states in the accumulator's batches, window-major, as float64 rows."""
    return np.concatenate([run_batch(res, x[lo : lo + batch_size]).transpose(1, 0, 2)
                           for lo in range(0, len(x), batch_size)]).reshape(-1, N).astype(np.float64)


def test_bias_statistics_are_those_of_the_augmented_states(res, make_windows):
    x, y = make_windows(9, 40, 3, C)
    plain = ridge_stats(res, x, y, C, batch_size=4)
    aug = ridge_stats(res, x, y, C, batch_size=4, bias=True)
    assert aug.bias and not plain.bias
    assert aug.a.shape == (C, N + 1) and aug.b.shape == (N + 1, N + 1) and aug.units == N + 1
    # The state block is the same float32 chunk products added in the same order into float64
    # (views of the larger arrays), then the same elementwise symmetrisation: the same bits.
    assert np.array_equal(aug.b[:N, :N], plain.b) and np.array_equal(aug.a[:, :N], plain.a)
    s = rows(res, x, 4)
    labels = y.reshape(-1).astype(int)
    # Σs per unit: float64 sums of the same float32 states (rounding ~1e-16 relative per add).
    np.testing.assert_allclose(aug.b[:N, N], s.sum(axis=0), rtol=1e-12, atol=1e-10)
    assert np.array_equal(aug.b[N, :N], aug.b[:N, N])
    # counts are integers below 2⁵³: exact in float64
    assert aug.b[N, N] == aug.n_steps == 9 * 40
    assert np.array_equal(aug.a[:, N], np.bincount(labels, minlength=C).astype(np.float64))


def test_solve_with_bias_leaves_the_bias_unpenalised(res, make_windows):
    x, y = make_windows(9, 40, 3, C, seed=1)
    stats = ridge_stats(res, x, y, C, bias=True)
    s = np.hstack([rows(res, x, len(x)), np.ones((9 * 40, 1))])
    onehot = np.eye(C)[y.reshape(-1).astype(int)]
    penalty = np.diag([1.0] * N + [0.0])
    grid = solve(stats, LAMBDAS)
    assert grid.shape == (len(LAMBDAS), C, N + 1)
    for lam, w in zip(LAMBDAS, grid):
        want = np.linalg.solve(s.T @ s + lam * penalty, s.T @ onehot).T
        # float32 chunk rounding of the statistics moves W within u·cond (float32_bounds.readout_rtol)
        assert np.linalg.norm(w - want) <= (1e-9 + readout_rtol(stats.b, lam, bias=True)) * np.linalg.norm(want)
    # A penalty far above the states' scale drives W to 0 but not the bias: it tends to the class
    # frequencies (the least-squares constant); a penalised bias would shrink to 0 as well.
    freq = np.bincount(y.reshape(-1).astype(int), minlength=C) / y.size
    w = solve(stats, 1e9)
    assert np.abs(w[:, :N]).max() < 1e-5
    np.testing.assert_allclose(w[:, N], freq, rtol=0, atol=1e-6)
    # pinv32 spares it too: equal to the float64 solve within float32 pseudo-inverse rounding
    # (eps32·cond per side, ×10), at a λ where penalising the bias would move it far more.
    lam = 1e3
    m = stats.b + lam * np.diag([1.0] * N + [0.0])
    tol = 10 * float(np.finfo(np.float32).eps) * np.linalg.cond(m)
    chol, pinv = solve(stats, lam), solve(stats, lam, solver="pinv32")
    assert np.linalg.norm(pinv - chol) <= tol * np.linalg.norm(chol)
    penalised = np.linalg.solve(stats.b + lam * np.eye(N + 1), stats.a.T).T
    assert np.linalg.norm(penalised - chol) > 10 * tol * np.linalg.norm(chol)
    # At λ = 1e9 the bias direction's singular value (≈ n_steps = 360) is ~4e-7·σmax: kept by the
    # authors' cut-off 1e-15·σmax, so pinv32's bias is the class frequencies as the float64 one.
    np.testing.assert_allclose(solve(stats, 1e9, solver="pinv32")[:, N], freq, rtol=0, atol=1e-6)


def test_predictions_add_the_bias_column():
    # Entries that are multiples of 1/8 with small sums: every float32 product and sum is exact, so
    # the readout's (C, N+1) form and an explicit [s, 1] feature must give the same argmax bits.
    rng = np.random.default_rng(0)
    states = (rng.integers(-4, 5, (6, 5, 7)) / 8).astype(np.float32)  # (T, B, N)
    w = rng.integers(-8, 9, (3, 8)) / 8.0  # (C, N+1)
    ones = np.ones((6, 5, 1), np.float32)
    scores = np.concatenate([states, ones], axis=2).reshape(-1, 8).astype(np.float64) @ w.T
    want = scores.argmax(axis=1).reshape(6, 5).T
    assert np.array_equal(predict(states, w), want)
    assert not np.array_equal(predict(states, w[:, :7]), want)  # the bias column changes answers
    labels = rng.integers(0, 3, (5, 6))
    grid = np.stack([w, w[:, ::-1]])
    counts = count_correct(states, labels, grid)
    assert counts.correct[0] == int((want == labels).sum()) and counts.total == 30
    with pytest.raises(Exception, match=r"readouts: expected \(L, C, 7\) or \(L, C, 8\)"):
        count_correct(states, labels, np.zeros((1, 3, 9)))


def _data(seed=0):
    rng = np.random.default_rng(seed)

    def user(w):
        return UserData(rng.standard_normal((w, 25, 3)).astype(np.float32),
                        rng.integers(0, 3, (w, 25)).astype(np.int8), np.zeros(w, np.int8))

    return TrialData({"a": user(7), "b": user(5), "c": user(9)}, {"v": user(6)}, 3, 1)


def test_stationary_trials_with_bias_and_their_message_counts():
    data = _data()
    on, off = Settings(readout_bias=True), Settings()
    models = {m: fit(m, CFG, 11, data, on) for m in ("ridge", "incfed", "fedavg", "ip", "fedip")}
    for m, model in models.items():
        assert model.readout.shape == (3, 13), m
        assert np.abs(model.readout[:, 12]).max() > 1e-3, m  # a bias was fitted
    plain = fit("incfed", CFG, 11, data, off)
    assert plain.readout.shape == (3, 12) and "readout_bias" not in plain.communication
    # IncFed is centralised ridge with the bias too (same λ grid, other sums of the same rows)
    r, i = models["ridge"], models["incfed"]
    lam = r.lam
    assert i.lam == lam
    assert np.linalg.norm(i.readout - r.readout) <= (1e-9 + readout_rtol(
        _pooled(data), lam, sides=2, bias=True)) * np.linalg.norm(r.readout)
    # The ledger's totals are the analytic formulas with N+1 readout columns (IP keeps 2N)
    for m in ("incfed", "fedavg", "fedip"):
        comm = models[m].communication
        assert comm["readout_bias"] is True
        ip_rounds, readouts = (CFG["rounds"], 1) if m == "fedip" else (None, 1)
        c = Communication("x", "100", m, comm["up_floats"], comm["down_floats"], comm["up_bytes"],
                          comm["down_bytes"], comm["rounds"], comm["clients"], units=12, classes=3,
                          ip_rounds=ip_rounds, readouts=readouts, readout_bias=True)
        text_up, _, up, down = analytic_floats(c)
        assert (up, down) == (comm["up_floats"], comm["down_floats"]), m
        assert "(N+1)" in text_up
    assert models["incfed"].communication["up_floats"] == 3 * (13 * 13 + 13 * 3)


def _pooled(data):
    from esnfed_core.trial import make_reservoir, sub_seeds  # noqa: PLC0415

    res = make_reservoir(CFG, data.n_inputs, sub_seeds(11)["reservoir"])
    return sum(ridge_stats(res, u.x, u.y, 3, bias=True) for u in data.train.values()).b


def test_trial_key_gets_readout_bias_only_when_on():
    for m in ("ridge", "incfed", "fedip"):
        assert "readout_bias" not in Settings().used_by(Method.parse(m), True)
        assert Settings(readout_bias=True).used_by(Method.parse(m), True)["readout_bias"] is True


def test_a_non_boolean_is_one_line_and_the_flower_run_config_carries_the_bias_only_when_on():
    with pytest.raises(ConfigError, match=r"^readout\.bias: expected true or false, got 'yes'") as exc:
        Settings(readout_bias="yes")
    assert "\n" not in str(exc.value)
    data = _data()
    from esnfed_stages.studies.flower import run_config
    from esnfed_stages.report.flower_table import vector_entries  # noqa: PLC0415

    on = run_config(CFG, {"reservoir": 1}, data, Settings(readout_bias=True), 0.1, "incfed", False)
    off = run_config(CFG, {"reservoir": 1}, data, Settings(), 0.1, "incfed", False)
    assert on == {**off, "readout-bias": True} and "readout-bias" not in off  # default messages as before
    doc = {"config": {"units": 12}, "n_classes": 3}
    assert vector_entries(doc, "stats") == 3 * 12 + 12 * 12
    doc["readout_bias"] = True  # the apps' statistics and readouts then carry N+1 columns, (g, b) 2N
    assert (vector_entries(doc, "stats"), vector_entries(doc, "readout"), vector_entries(doc, "ip")) == \
        (3 * 13 + 13 * 13, 3 * 13, 24)


def test_params_readout_bias_is_checked_and_read():
    from test_stage_params import _params  # noqa: PLC0415
    from esnfed_stages.params.experiment import experiment_params  # noqa: PLC0415
    from esnfed_stages.params.schema import validate  # noqa: PLC0415

    p = _params()
    assert p["readout"]["bias"] is False  # the repository's default: the authors' code
    assert experiment_params(p).settings.readout_bias is False
    p["readout"]["bias"] = True
    validate(p)
    assert experiment_params(p).settings.readout_bias is True
    p["readout"]["bias"] = "yes"
    with pytest.raises(ConfigError, match=r"readout\.bias"):
        validate(p)
    with pytest.raises(ConfigError, match=r"^params\.yaml: 'readout\.bias' must be true or false"):
        experiment_params(p)


def test_saved_model_with_bias_round_trips(tmp_path):
    from esnfed_stages.experiment.models import load_model, save_model  # noqa: PLC0415

    cfg = {k: CFG[k] for k in Method.parse("incfed").config_keys}  # a saved config holds no other key
    model = fit("incfed", cfg, 11, _data(), Settings(readout_bias=True))
    save_model(tmp_path, 0, model, {"dataset": "wesad", "pct": "100"})
    back, meta = load_model(tmp_path, 0)
    assert meta["readout_bias"] is True
    assert np.array_equal(back.readout, model.readout) and back.readout.shape == (3, 13)
    plain = fit("incfed", cfg, 11, _data(), Settings())
    save_model(tmp_path, 1, plain, {"dataset": "wesad", "pct": "100"})
    assert "readout_bias" not in load_model(tmp_path, 1)[1]


@pytest.mark.pipeline
def test_select_retrain_assess_with_bias_and_the_communication_table(tmp_path):
    """The stages end to end with readout.bias: the models' readouts carry the bias column, the
    assess file's message counts are the N+1 formulas (a continual method's too), and the privacy
    stage runs and records the bias."""
    from experiment_data import make_dataset, run_method_stages, small_params, stage_options, write_params  # noqa: PLC0415
    from typer.testing import CliRunner  # noqa: PLC0415

    from esnfed_cli.main import app  # noqa: PLC0415
    from esnfed_stages.experiment.models import load_model  # noqa: PLC0415

    make_dataset(tmp_path)
    params = small_params()
    params["readout"]["bias"] = True
    write_params(tmp_path, params)
    run_method_stages(tmp_path, "wesad", [("ridge", None), ("incfed", None), ("fedavg", None)])
    result = CliRunner().invoke(app, ["select", "--algo", "fedip", "--pct", "all", *stage_options(tmp_path)])
    assert result.exit_code == 0, result.output  # FedIP (stationary) takes the bias
    run_method_stages(tmp_path, "wesad", [("fedclip", "naive")])  # from FedIP's best configs
    import json  # noqa: PLC0415

    for method in ("ridge", "incfed", "fedavg", "fedclip-naive"):
        model, meta = load_model(tmp_path / "runs" / "models" / "wesad" / method / "50", 0)
        assert meta["readout_bias"] is True and model.readout.shape == (3, model.reservoir.units + 1)
        doc = json.loads((tmp_path / "runs" / "assess" / "wesad" / f"{method}.json").read_text())
        share = doc["pcts"]["50"]
        if method != "ridge":
            comm = share["communication"]
            extra = {} if method != "fedclip-naive" else {
                "participants": tuple(comm["participants"]), "context_rounds": tuple(comm["context_rounds"])}
            c = Communication("wesad", "50", method, comm["up_floats"], comm["down_floats"], comm["up_bytes"],
                              comm["down_bytes"], comm["rounds"], comm["clients"], units=share["config"]["units"],
                              classes=3, readouts=1, readout_bias=comm.get("readout_bias") is True, **extra)
            assert c.readout_bias
            assert analytic_floats(c)[2:] == (comm["up_floats"], comm["down_floats"])
    assert model.context_readout.shape == (3, 3, model.reservoir.units + 1)  # fedclip-naive: per context
    matrix = np.asarray(share["accuracy_matrix"][0])  # assessed with the (C, N+1) context readouts
    assert matrix.shape == (3, 3) and np.all((0 <= matrix) & (matrix <= 1))
    result = CliRunner().invoke(app, ["privacy", *stage_options(tmp_path), "--out-dir",
                                      str(tmp_path / "runs" / "privacy")])
    assert result.exit_code == 0, result.output  # DP with the N+1 bound (docs/privacy.md)
    doc = json.loads((tmp_path / "runs" / "privacy" / "wesad.json").read_text())
    assert doc["readout_bias"] is True and set(doc["methods"]) == {"incfed", "fedip"}
