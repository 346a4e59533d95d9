"""Intrinsic plasticity: the gradient against independent computations (float64 numpy, reservoirpy
0.4.2's IPReservoir), its sign (KL descent),
centralised IP vs FedIP equalities, the communication ledger and determinism."""

from __future__ import annotations

import numpy as np
import pytest

from esnfed_core import plasticity
from esnfed_core.aggregate import weighted_average
from esnfed_core.federated import fedip
from esnfed_core.messages import CommLedger
from esnfed_core.metrics import activation_histogram
from esnfed_core.plasticity import (
    IPConfig,
    ip_epoch,
    ip_gradients,
    ip_step,
    shuffled_batches,
    train_ip,
)
from esnfed_core.reservoir import ReservoirConfig, build_reservoir, run_batch
from esnfed_core.validation import ParameterError


def _res(units=12, inputs=3, leak=0.5, rho=0.9, scaling=1.0, seed=0):
    return build_reservoir(ReservoirConfig(inputs, units, rho, leak, scaling), seed)


def _x(n, steps, inputs=3, seed=1):
    return np.random.default_rng(seed).standard_normal((n, steps, inputs)).astype(np.float32)


def _reference_gradients(res, x, sigma, mu):
    """The Schrauwen rule written out per window and step, float64, from the recurrence."""
    g, b = res.gain.astype(float), res.bias.astype(float)
    w, w_in, a = res.w.astype(float), res.w_in.astype(float), res.leak
    s2 = sigma**2
    dg, db = np.zeros(res.units), np.zeros(res.units)
    for window in x.astype(float):
        state = np.zeros(res.units)
        for u in window:
            xnet = w_in @ u + w @ state
            h = np.tanh(g * xnet + b)
            d = -mu / s2 + (h / s2) * (2 * s2 + 1 - h * h + mu * h)
            db += d
            dg += -1 / g + d * xnet
            state = (1 - a) * state + a * h
    return dg / len(x), db / len(x)


@pytest.mark.parametrize("leak", [1.0, 0.3, 0.1])
@pytest.mark.parametrize("mu", [0.0, 0.1])
def test_gradients_match_independent_numpy(leak, mu):
    res = _res(units=7, leak=leak, seed=1).with_ip(np.linspace(0.8, 1.3, 7), np.linspace(-0.2, 0.2, 7))
    # 90 steps span several internal time chunks, so chunk boundaries are exercised.
    x = _x(5, 90, seed=2)
    dg, db = ip_gradients(res, x, IPConfig(sigma=0.3, mu=mu))
    rg, rb = _reference_gradients(res, x, 0.3, mu)
    assert dg.dtype == db.dtype == np.float64
    np.testing.assert_allclose(dg, rg, rtol=0, atol=2e-6 * np.abs(rg).max())
    np.testing.assert_allclose(db, rb, rtol=0, atol=2e-6 * np.abs(rb).max())


def test_gradient_is_the_derivative_of_the_kl_loss():
    """With x_net held fixed, (dg, db) is the finite-difference gradient of
    mean over windows of Σ_t ℓ, ℓ = −log g − log(1 − h²) + (h − μ)²/(2σ²): the sample KL
    divergence of h to N(μ, σ²) up to constants. So the minus step descends the KL."""
    sigma, mu = 0.4, 0.05
    res = _res(units=4, inputs=2, seed=3).with_ip(np.array([0.9, 1.1, 1.0, 1.2]), np.array([0.1, -0.1, 0.0, 0.05]))
    x = _x(3, 6, inputs=2, seed=4)
    xnet = np.empty((6, 3, 4), np.float32)
    run_batch(res, x, xnet_out=xnet)
    xnet = xnet.astype(np.float64)

    def loss(g, b):
        h = np.tanh(g * xnet + b)
        ell = -np.log(g) - np.log(1 - h**2) + (h - mu) ** 2 / (2 * sigma**2)
        return ell.sum() / x.shape[0]

    g0, b0 = res.gain.astype(float), res.bias.astype(float)
    eps = 1e-6
    fd_g, fd_b = np.zeros(4), np.zeros(4)
    for i in range(4):
        e = np.zeros(4)
        e[i] = eps
        fd_g[i] = (loss(g0 + e, b0) - loss(g0 - e, b0)) / (2 * eps)
        fd_b[i] = (loss(g0, b0 + e) - loss(g0, b0 - e)) / (2 * eps)
    dg, db = ip_gradients(res, x, IPConfig(sigma=sigma, mu=mu))
    np.testing.assert_allclose(dg, fd_g, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(db, fd_b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("sigma", [0.05, 0.2, 0.5, 0.8])
def test_ip_lowers_kl_to_target_and_the_opposite_step_raises_it(sigma):
    res = _res(units=20, leak=0.5)
    x = _x(200, 30)  # stationary input: i.i.d. Gaussian
    cfg = IPConfig(sigma=sigma, eta=0.05)

    def kl(r):
        return activation_histogram(r, x, kind="activation").mean_kl(0.0, sigma)

    before = kl(res)
    after = train_ip(res, x, cfg, epochs=10, seed=0)
    assert kl(after) < 0.9 * before
    # The PROTOCOL step is θ ← θ − η∂θ; stepping the other way must move away from the target.
    up = res
    for batch in shuffled_batches(x, 100, np.random.default_rng(0)):
        dg, db = ip_gradients(up, batch, cfg)
        up = up.with_ip(up.gain + 0.05 * dg / np.linalg.norm(dg), up.bias + 0.05 * db / np.linalg.norm(db))
    down = ip_epoch(res, x, cfg, np.random.default_rng(0))
    assert kl(up) > before > kl(down)


def test_eta_zero_changes_nothing():
    res = _res().with_ip(np.full(12, 1.2), np.full(12, -0.1))
    x = _x(50, 10)
    out = train_ip(res, x, IPConfig(sigma=0.2, eta=0.0), epochs=3, seed=0)
    assert np.array_equal(out.gain, res.gain) and np.array_equal(out.bias, res.bias)
    out = fedip(res, [x[:20], x[20:]], IPConfig(sigma=0.2, eta=0.0), rounds=2, local_epochs=2, seed=0)
    assert np.array_equal(out.gain, res.gain) and np.array_equal(out.bias, res.bias)


def test_normalised_step_has_norm_eta_and_plain_step_is_eta_times_gradient():
    res = _res()
    x = _x(30, 10)
    cfg = IPConfig(sigma=0.3, eta=0.01)
    one = ip_step(res, x, cfg)
    assert np.linalg.norm(one.gain.astype(float) - 1.0) == pytest.approx(0.01, rel=1e-4)
    assert np.linalg.norm(one.bias.astype(float)) == pytest.approx(0.01, rel=1e-4)
    plain = IPConfig(sigma=0.3, eta=1e-4, normalize_step=False)
    dg, db = ip_gradients(res, x, plain)
    two = ip_step(res, x, plain)
    np.testing.assert_allclose(two.gain, (1.0 - 1e-4 * dg).astype(np.float32))
    np.testing.assert_allclose(two.bias, (-1e-4 * db).astype(np.float32))


def test_epoch_visits_every_window_once_in_seeded_shuffled_batches():
    x = np.arange(250, dtype=np.float32).reshape(250, 1, 1)
    batches = list(shuffled_batches(x, 100, np.random.default_rng(7)))
    assert [len(b) for b in batches] == [100, 100, 50]
    seen = np.concatenate(batches).ravel()
    assert sorted(seen) == list(range(250))
    assert not np.array_equal(seen, np.arange(250))
    assert np.array_equal(seen, x[np.random.default_rng(7).permutation(250)].ravel())


def test_fedip_one_client_equals_centralised_ip():
    res, x, cfg = _res(), _x(230, 12), IPConfig(sigma=0.25)
    fed = fedip(res, [x], cfg, rounds=3, local_epochs=2, seed=5)
    central = train_ip(res, x, cfg, epochs=6, seed=5)
    assert np.array_equal(fed.gain, central.gain) and np.array_equal(fed.bias, central.bias)
    assert fed.has_ip


def test_fedip_identical_clients_equal_centralised_ip_on_one():
    res, x, cfg = _res(), _x(150, 12), IPConfig(sigma=0.25)
    fed = fedip(res, [x, x, x], cfg, rounds=2, local_epochs=3, seed=9)
    central = train_ip(res, x, cfg, epochs=6, seed=9)
    np.testing.assert_allclose(fed.gain, central.gain, rtol=0, atol=1e-7)
    np.testing.assert_allclose(fed.bias, central.bias, rtol=0, atol=1e-7)


def test_fedip_is_the_window_weighted_average_of_local_epochs():
    res, cfg = _res(), IPConfig(sigma=0.3)
    xs = [_x(40, 8, seed=11), _x(130, 8, seed=12), _x(0, 8, seed=13), _x(75, 8, seed=14)]
    rounds, local = 2, 2
    fed = fedip(res, xs, cfg, rounds=rounds, local_epochs=local, seed=3)
    # Independent simulation: each non-empty client shuffles with its own generator seeded 3.
    xs_in = [x for x in xs if len(x)]
    rngs = [np.random.default_rng(3) for _ in xs_in]
    glob = res
    for _ in range(rounds):
        locals_ = []
        for x, rng in zip(xs_in, rngs):
            r = glob
            for _ in range(local):
                r = ip_epoch(r, x, cfg, rng)
            locals_.append(r)
        n = [len(x) for x in xs_in]
        glob = glob.with_ip(weighted_average([r.gain for r in locals_], n),
                            weighted_average([r.bias for r in locals_], n))
    assert np.array_equal(fed.gain, glob.gain) and np.array_equal(fed.bias, glob.bias)


def test_fedip_ledger_counts_2n_floats_each_way_per_client_and_round():
    units, rounds = 12, 3
    res, ledger = _res(units=units), CommLedger()
    fedip(res, [_x(30, 5), _x(20, 5), _x(10, 5)], IPConfig(sigma=0.3), rounds=rounds, local_epochs=1,
          seed=0, ledger=ledger, client_names=["a", "b", "c"])
    kinds = [(e.kind, e.direction) for e in ledger.entries]
    assert kinds.count(("ReservoirMessage", "down")) == 3
    plast = [e for e in ledger.entries if e.kind == "PlasticityMessage"]
    assert len(plast) == 2 * 3 * rounds
    assert all(e.floats == 2 * units and e.algorithm == "fedip" for e in plast)
    for rnd in range(rounds):
        for name in "abc":
            dirs = sorted(e.direction for e in plast if e.round == rnd and e.client == name)
            assert dirs == ["down", "up"]
    totals = ledger.totals("fedip")
    assert totals["up_floats"] == totals["down_floats"] == 2 * units * 3 * rounds
    assert totals["rounds"] == rounds


def test_deterministic_from_seed():
    # Small batches so that the seed's shuffle changes the result.
    res, x, cfg = _res(), _x(120, 10), IPConfig(sigma=0.3, batch_size=16)
    a = fedip(res, [x[:70], x[70:]], cfg, rounds=2, local_epochs=2, seed=4)
    b = fedip(res, [x[:70], x[70:]], cfg, rounds=2, local_epochs=2, seed=4)
    c = fedip(res, [x[:70], x[70:]], cfg, rounds=2, local_epochs=2, seed=5)
    assert a.gain.tobytes() == b.gain.tobytes() and a.bias.tobytes() == b.bias.tobytes()
    assert a.gain.tobytes() != c.gain.tobytes()
    t1, t2 = train_ip(res, x, cfg, 2, seed=1), train_ip(res, x, cfg, 2, seed=1)
    assert t1.gain.tobytes() == t2.gain.tobytes() and t1.bias.tobytes() == t2.bias.tobytes()
    assert t1.gain.tobytes() != train_ip(res, x, cfg, 2, seed=2).gain.tobytes()


def test_gradients_do_not_depend_on_the_time_chunking(monkeypatch):
    res = _res(units=9).with_ip(np.full(9, 1.1), np.full(9, 0.05))
    x = _x(6, 40)
    cfg = IPConfig(sigma=0.3, mu=0.05)
    ref = ip_gradients(res, x, cfg)
    for k in (1, 3, 40):
        monkeypatch.setattr(plasticity, "_chunk_steps", lambda *_a, k=k: k)
        got = ip_gradients(res, x, cfg)
        for a, b in zip(got, ref):
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6 * np.abs(b).max())


@pytest.mark.parametrize(
    "kwargs, key",
    [({"sigma": 0.0}, "sigma"), ({"sigma": 0.3, "eta": -1.0}, "eta"),
     ({"sigma": 0.3, "batch_size": 0}, "batch_size"), ({"sigma": 0.3, "mu": 1.5}, "mu"),
     ({"sigma": 0.3, "normalize_step": 1}, "normalize_step")],
)
def test_config_rejects_bad_values_naming_the_key(kwargs, key):
    with pytest.raises(ParameterError, match=f"^{key}:"):
        IPConfig(**kwargs)


def test_fedip_rejects_mismatched_client_names():
    with pytest.raises(ParameterError, match="^client_names:"):
        fedip(_res(), [_x(5, 3)], IPConfig(sigma=0.3), 1, 1, 0, client_names=["a", "b"])


def _reservoirpy_ip_node(res, cfg, learning_rate=0.0):
    """reservoirpy 0.4.2's ``IPReservoir`` on our W, W_in, g and b (float64).

    Its step (reservoirpy/nodes/intrinsic_plasticity.py, ``IPReservoir._step``) is
        internal = (1 − lr)·internal + lr·(W @ out + Win @ u + bias);  out = tanh(a·internal + b)
    so with lr = 1 and bias = 0, internal is our x_net and out our h: PROTOCOL §2 with leak 1.
    (With lr < 1 it leaks the pre-activation, we leak h, so only leak 1 compares.) Its
    ``gaussian_gradients`` is Schrauwen's rule written as an ascent direction (δ = −∂), and
    ``partial_fit`` steps a ← a + η·δa, b ← b + η·δb after every time step.
    """
    from reservoirpy.nodes import IPReservoir

    node = IPReservoir(W=res.w.astype(np.float64), Win=res.w_in.astype(np.float64), bias=0.0, lr=1.0,
                       mu=cfg.mu, sigma=cfg.sigma, learning_rate=learning_rate, activation="tanh",
                       input_dim=res.n_inputs)
    node.initialize(np.zeros((1, res.n_inputs)))
    node.a = res.gain.astype(np.float64).copy()
    node.b = res.bias.astype(np.float64).copy()
    return node


@pytest.mark.parametrize("mu", [0.0, 0.1])
def test_gradients_equal_reservoirpy(mu):
    """Cross-check with an independent implementation: reservoirpy's per-step IP gradients,
    summed over each window's steps and averaged over windows, are minus our (∂g, ∂b)."""
    cfg = IPConfig(sigma=0.35, mu=mu)
    res = _res(units=9, leak=1.0, seed=5).with_ip(np.linspace(0.7, 1.4, 9), np.linspace(-0.3, 0.25, 9))
    x = _x(4, 40, seed=6)
    node = _reservoirpy_ip_node(res, cfg)
    sum_a, sum_b = np.zeros(res.units), np.zeros(res.units)
    for window in x.astype(np.float64):
        node.reset()
        for u in window:
            post = node.step(u)
            pre = node.state["internal"]
            delta_a, delta_b = node.gradient(x=np.ravel(pre), y=np.ravel(post), a=node.a)
            sum_a += delta_a
            sum_b += delta_b
    # learning_rate 0: reservoirpy's a and b stayed ours, so every step used the same g, b.
    assert np.array_equal(node.a, res.gain.astype(np.float64))
    dg, db = ip_gradients(res, x, cfg)
    # float32 recurrence against float64: relative to each vector's largest entry.
    np.testing.assert_allclose(dg, -sum_a / len(x), rtol=0, atol=2e-6 * np.abs(dg).max())
    np.testing.assert_allclose(db, -sum_b / len(x), rtol=0, atol=2e-6 * np.abs(db).max())
    assert np.abs(db).max() > 1.0  # a gradient that is not trivially zero


def test_plain_step_equals_reservoirpys_online_update_on_one_step():
    """On a batch of one window of one step, reservoirpy's online update (one ``partial_fit`` step,
    learning rate η) and our plain averaged step (``normalize_step: false``) are the same SGD step:
    same sign (KL descent), same size."""
    cfg = IPConfig(sigma=0.3, mu=0.05, eta=0.02, normalize_step=False)
    res = _res(units=6, leak=1.0, seed=7).with_ip(np.linspace(0.8, 1.2, 6), np.linspace(-0.1, 0.2, 6))
    x = _x(1, 1, seed=8)
    node = _reservoirpy_ip_node(res, cfg, learning_rate=cfg.eta)
    node.reset()
    node.partial_fit(x[0].astype(np.float64))
    stepped = ip_step(res, x, cfg)
    moved = np.abs(node.b - res.bias.astype(np.float64)).max()
    assert moved > 1e-3  # the step moved b, so equality below is not trivial
    np.testing.assert_allclose(stepped.gain, node.a, rtol=0, atol=1e-6)
    np.testing.assert_allclose(stepped.bias, node.b, rtol=0, atol=1e-6)
