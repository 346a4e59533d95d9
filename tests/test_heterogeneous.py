"""Heterogeneous reservoirs: per-client draws, structural alignment, the ensemble,
local training, their messages and their saved models."""

from __future__ import annotations

import re

import numpy as np
import pytest

from esnfed_core.errors import ConfigError
from esnfed_core.heterogeneity import Heterogeneity, align, aligned_reservoirs, draw_clients
from esnfed_core.heterogeneous import assess_scores, ensemble_counts
from esnfed_core.method import Method
from esnfed_core.readout import ridge_stats, solve
from esnfed_core.reservoir import spectral_radius
from esnfed_core.scoring import pooled_counts
from esnfed_core.search import parse_space
from esnfed_core.settings import Settings
from esnfed_core.communication import Communication, analytic_floats, communication_rows
from esnfed_core.trial import make_reservoir, sub_seeds
from esnfed_stages.experiment.models import load_model, save_model
from esnfed_stages.experiment.runner import fit_trial as fit  # every family: local/ensemble/align and incfed
from experiment_data import trial_data

CFG = {"units": 10, "spectral_radius": 0.9, "leak": 0.5, "input_scaling": 1.0}
SPACE = parse_space({"spectral_radius": {"low": 0.3, "high": 0.95, "step": 0.05},
                     "leak": {"low": 0.1, "high": 0.8, "step": 0.05}, "input_scaling": [0.5, 1.0]})
SPACE_HET = Heterogeneity("space", 7, tuple(SPACE))


@pytest.fixture(scope="module")
def data():
    return trial_data(pct="100")


def _same(a, b) -> bool:
    return all(np.array_equal(getattr(a, k), getattr(b, k)) for k in ("w_in", "w", "gain", "bias")) \
        and a.leak == b.leak


def test_method_ids_round_trip_and_alpha_rules():
    assert Method.parse("align-0.25") == Method("align", alpha=0.25)
    assert [Method("align", alpha=a).id for a in (0, 0.25, 0.9, 1)] == ["align-0", "align-0.25", "align-0.9",
                                                                       "align-1"]
    assert Method("ensemble").heterogeneous and Method("local").federated and not Method("incfed").heterogeneous
    for bad, message in ((lambda: Method("align"), "alpha: align needs an alignment strength in [0, 1], got None"),
                         (lambda: Method("align", alpha=1.5), "alpha: align needs an alignment strength in [0, 1], got 1.5"),
                         (lambda: Method("incfed", alpha=0.5), "alpha: incfed takes no alignment strength"),
                         (lambda: Method.parse("align-x"), "method 'align-x': expected align-<alpha>, e.g. align-0.5")):
        with pytest.raises(ConfigError, match=f"^{re.escape(message)}$"):
            bad()


def test_draws_are_deterministic_and_per_client():
    a = draw_clients(SPACE_HET, CFG, 3, 4, 123)
    b = draw_clients(SPACE_HET, CFG, 3, 4, 123)
    assert all(_same(x.reservoir, y.reservoir) and x.config == y.config for x, y in zip(a, b))
    # client c's draw does not depend on how many clients there are
    assert all(_same(x.reservoir, y.reservoir) for x, y in zip(a, draw_clients(SPACE_HET, CFG, 3, 2, 123)))
    # clients differ from each other, and another heterogeneity seed or trial seed changes them
    assert not _same(a[0].reservoir, a[1].reservoir)
    assert not _same(a[0].reservoir, draw_clients(Heterogeneity("space", 8, tuple(SPACE)), CFG, 3, 1, 123)[0].reservoir)
    assert not _same(a[0].reservoir, draw_clients(SPACE_HET, CFG, 3, 1, 124)[0].reservoir)
    # mode space draws the varied hyperparameters from the space (units stay), mode seed keeps them
    grid = {d.name: d.values for d in SPACE}
    for c in a:
        assert c.config["units"] == CFG["units"]
        assert all(c.config[k] in grid[k] for k in grid)
        assert spectral_radius(c.reservoir.w) == pytest.approx(c.config["spectral_radius"], rel=1e-5)
    assert len({c.config["spectral_radius"] for c in a}) > 1
    seed_mode = draw_clients(Heterogeneity("seed", 7), CFG, 3, 4, 123)
    assert all(c.config == CFG for c in seed_mode)
    # the same weight stream in both modes: mode seed's W equals mode space's up to its rescaling
    w_seed, w_space = seed_mode[0].reservoir.w.astype(float), a[0].reservoir.w.astype(float)
    ratio = a[0].config["spectral_radius"] / CFG["spectral_radius"]
    np.testing.assert_allclose(w_space, w_seed * ratio, rtol=1e-5, atol=1e-6)


def test_alignment_interpolates_and_rescales():
    client, = draw_clients(SPACE_HET, CFG, 3, 1, 5)
    target = draw_clients(Heterogeneity("seed", 99), CFG, 3, 1, 6)[0]
    assert align(client, target, 0.0) is client.reservoir
    assert align(client, target, 1.0) is target.reservoir
    mid = align(client, target, 0.5)
    rho = 0.5 * client.config["spectral_radius"] + 0.5 * CFG["spectral_radius"]
    assert spectral_radius(mid.w) == pytest.approx(rho, rel=1e-5)
    assert mid.leak == pytest.approx(0.5 * client.config["leak"] + 0.5 * CFG["leak"])
    # W_in is the plain interpolation up to one positive factor (its rescale, tested below)
    plain = 0.5 * client.reservoir.w_in.astype(float) + 0.5 * target.reservoir.w_in.astype(float)
    factor = np.linalg.norm(mid.w_in.astype(float)) / np.linalg.norm(plain)
    np.testing.assert_allclose(mid.w_in, factor * plain, rtol=1e-6, atol=1e-7)
    wider = draw_clients(Heterogeneity("seed", 1), {**CFG, "units": 12}, 3, 1, 5)
    with pytest.raises(ConfigError, match="equal units"):
        aligned_reservoirs(wider, target, 0.5)
    with pytest.raises(ConfigError, match=r"^heterogeneity\.vary: mode seed varies no hyperparameter"):
        Heterogeneity("seed", 0, tuple(SPACE))


@pytest.mark.parametrize("alpha", [0.25, 0.5, 0.75, 0.9])
def test_alignment_keeps_the_input_scale_at_intermediate_alpha(alpha):
    # A client at input scaling 0.5 toward a target at 1.0, 200 units × 3 inputs (600 entries).
    client, = draw_clients(Heterogeneity("seed", 1), {**CFG, "units": 200, "input_scaling": 0.5}, 3, 1, 5)
    target, = draw_clients(Heterogeneity("seed", 99), {**CFG, "units": 200}, 3, 1, 6)
    got = np.linalg.norm(align(client, target, alpha).w_in.astype(float))
    norm_c, norm_t = (np.linalg.norm(r.reservoir.w_in.astype(float)) for r in (client, target))
    # Exactly the interpolated Frobenius norm (to the float32 rounding of the stored matrix); the
    # plain interpolation of the two independent draws has √((1−α)²·0.25 + α²)/((1−α)·0.5 + α) of
    # it: 0.72, 0.75, 0.87, 0.95 at these α.
    assert got == pytest.approx((1 - alpha) * norm_c + alpha * norm_t, rel=1e-6)
    # ... which is the norm a fresh U(−1, 1)·s draw has at the interpolated scaling s: √(600/3)·s,
    # within 8 % (the norm of a 600-entry draw has a relative std of ½√(0.8/600) ≈ 1.8 %).
    s = (1 - alpha) * 0.5 + alpha * 1.0
    assert got == pytest.approx(np.sqrt(600 / 3) * s, rel=0.08)


def test_alignment_tends_to_its_endpoints_through_the_arithmetic():
    # α = 0 and α = 1 return the client's and the target's reservoir objects; just inside them the
    # interpolation and both rescales run and must land on those reservoirs to float32 rounding
    # (the target's stored float32 Ŵ has its radius only to ~1e-7; 1e-5 of the largest entry
    # leaves room for the eigenvalue's conditioning).
    client, = draw_clients(SPACE_HET, CFG, 3, 1, 5)
    target = draw_clients(Heterogeneity("seed", 99), CFG, 3, 1, 6)[0]
    for alpha, end in ((1 - 1e-9, target), (1e-9, client)):
        near = align(client, target, alpha)
        assert near is not end.reservoir
        for key in ("w_in", "w"):
            want = getattr(end.reservoir, key)
            np.testing.assert_allclose(getattr(near, key), want, rtol=0, atol=1e-5 * np.abs(want).max())
        assert near.leak == pytest.approx(end.reservoir.leak, rel=1e-8)
    assert spectral_radius(align(client, target, 1 - 1e-9).w) == pytest.approx(CFG["spectral_radius"], rel=1e-6)


@pytest.mark.parametrize("het", [Heterogeneity(), SPACE_HET])
def test_align_at_one_is_incfed_bit_for_bit(data, het):
    # align returns the target reservoir itself at α = 1, so this checks the method's plumbing
    # (λ, scores, messages) rather than the interpolation; its continuity toward α = 1 is tested
    # above.
    train, _ = data
    settings = Settings(heterogeneity=het)
    inc = fit("incfed", CFG, 11, train, settings)
    a1 = fit("align-1", CFG, 11, train, settings)
    assert np.array_equal(a1.readout, inc.readout)
    assert a1.validation == inc.validation and a1.lam == inc.lam
    assert all(_same(r, inc.reservoir) for r in a1.clients)
    assert {k: v for k, v in a1.communication.items() if k not in ("inputs", "classes")} == inc.communication


def test_align_at_zero_is_incfed_over_the_clients_own_reservoirs(data):
    train, _ = data
    settings = Settings(heterogeneity=SPACE_HET)
    a0 = fit("align-0", {**CFG, "lambda": 0.1}, 11, train, settings, score=False)
    draws = draw_clients(SPACE_HET, CFG, train.n_inputs, len(train.train), sub_seeds(11)["reservoir"])
    assert all(_same(r, d.reservoir) for r, d in zip(a0.clients, draws))
    total = sum(ridge_stats(d.reservoir, u.x, u.y, train.n_classes) for d, u in zip(draws, train.train.values()))
    assert np.array_equal(a0.readout, solve(total, 0.1))


def test_ensemble_of_identical_clients_is_the_single_model(data):
    train, test = data
    res = make_reservoir(CFG, train.n_inputs, 3)
    w = solve(sum(ridge_stats(res, u.x, u.y, train.n_classes) for u in train.train.values()), [1e-3, 0.1])
    users = list(test.values())
    single = pooled_counts(res, users, w, batch_size=5)  # the same batches of states
    for combine in ("softmax", "vote"):
        ens = ensemble_counts([res] * 3, [w] * 3, users, 5, combine)
        # The class scores are other products (one per client, then softmax or votes summed): an
        # argmax can flip where two class scores tie within float32 rounding, so allow 1 in 1000.
        assert ens.total == single.total and single.correct.min() > 0
        assert np.all(np.abs(ens.correct - single.correct) <= max(1, single.total // 1000))


def test_local_and_ensemble_fit_each_client_alone(data):
    train, test = data
    settings = Settings(heterogeneity=SPACE_HET)
    local = fit("local", CFG, 4, train, settings)
    ens = fit("ensemble", CFG, 4, train, settings)
    assert local.readout is None and len(local.client_readouts) == len(train.train)
    for r, w, u in zip(local.clients, local.client_readouts, train.train.values()):  # own data only
        assert np.array_equal(w, solve(ridge_stats(r, u.x, u.y, train.n_classes), local.lam))
    users = list(test.values())
    sc = assess_scores(local, users, 256)
    assert sc["score"] == pytest.approx(np.mean(sc["clients"]), abs=1e-12)
    es = assess_scores(ens, users, 256)
    # The ensemble's accuracy recomputed by hand in float64, window by window, from the clients'
    # weights and readouts (not through ensemble_counts): softmax of each client's outputs, summed.
    correct = total = 0
    for u in users:
        for x, y in zip(np.asarray(u.x, np.float64), np.asarray(u.y)):
            probs = 0.0
            for r, w in zip(ens.clients, ens.client_readouts):
                w = np.asarray(w, np.float64).reshape(-1, r.units)  # one λ: (C, N)
                state, rows = np.zeros(r.units), []
                for u_t in x:
                    h = np.tanh(r.gain * (r.w_in.astype(np.float64) @ u_t + r.w.astype(np.float64) @ state) + r.bias)
                    state = (1.0 - r.leak) * state + r.leak * h
                    rows.append(state)
                z = np.asarray(rows) @ w.T
                z = np.exp(z - z.max(axis=1, keepdims=True))
                probs = probs + z / z.sum(axis=1, keepdims=True)
            correct += int((probs.argmax(axis=1) == y).sum())
            total += y.size
    # float32 states against float64 ones: an argmax may flip where two classes tie within
    # rounding, so allow 1 step in 1000 (as the identical-clients test above)
    assert abs(es["score"] * total - correct) <= max(1, total // 1000) and 0 < correct < total


def test_ledger_bytes_equal_the_formulas(data):
    train, _ = data
    settings = Settings(heterogeneity=SPACE_HET)
    k, n, u, c = len(train.train), CFG["units"], train.n_inputs, train.n_classes
    ens = fit("ensemble", CFG, 4, train, settings).communication
    floats = n * u + n * n + 2 * n + 1 + n * c
    assert ens["up_floats"] == k * floats and ens["down_floats"] == 0 and ens["rounds"] == 1
    # float32 reservoir arrays, the leak and the readout as float64, one count
    assert ens["up_bytes"] == k * (4 * (n * u + n * n + 2 * n) + 8 + 8 * n * c + 8)
    loc = fit("local", CFG, 4, train, settings).communication
    assert loc["up_floats"] == loc["down_floats"] == loc["up_bytes"] == loc["rounds"] == 0
    al = fit("align-0.5", CFG, 4, train, settings).communication
    assert al["up_floats"] == k * (n * n + n * c) and al["down_floats"] == k * n * c
    for method, comm in (("ensemble", ens), ("local", loc), ("align-0.5", al)):
        item = Communication("wesad", "100", method, comm["up_floats"], comm["down_floats"], comm["up_bytes"],
                             comm["down_bytes"], comm["rounds"], comm["clients"], units=n, classes=c,
                             readouts=1, inputs=comm["inputs"])
        assert communication_rows([item])[0]["match"] is True, (method, analytic_floats(item))


@pytest.mark.parametrize("method", ["ensemble", "align-0.5"])
def test_saved_models_round_trip(tmp_path, data, method):
    train, test = data
    model = fit(method, CFG, 4, train, Settings(heterogeneity=SPACE_HET))
    save_model(tmp_path, 0, model, {"dataset": "wesad", "pct": "100"})
    back, meta = load_model(tmp_path, 0)
    assert meta["n_clients"] == len(train.train) and len(meta["client_configs"]) == len(train.train)
    assert all(_same(a, b) for a, b in zip(model.clients, back.clients))
    users = list(test.values())
    assert assess_scores(back, users, 256) == assess_scores(model, users, 256)
