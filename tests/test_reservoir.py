"""Tests of the reservoir core: seeded construction, the batched recurrence against independent
float64 loops and reservoirpy 0.4.2, batching invariance, echo states, dtypes and buffer reuse."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from esnfed_core.reservoir import (
    DTYPE,
    ReservoirConfig,
    build_reservoir,
    iter_states,
    map_states,
    run_batch,
    spectral_radius,
)

CFG = ReservoirConfig(n_inputs=3, units=40, spectral_radius=0.9, leak=0.3, input_scaling=0.8)


def reference_states(res, x, x0=None):
    """PROTOCOL §2 written out per window and per step in float64, independent of run_batch.

    Returns (states, xnet), both (T, W, N): x(t) and x_net(t) = W_in u(t) + Ŵ x(t-1).
    """
    w_in, w = res.w_in.astype(np.float64), res.w.astype(np.float64)
    g, b, a = res.gain.astype(np.float64), res.bias.astype(np.float64), float(res.leak)
    n_win, t_len, _ = x.shape
    states = np.empty((t_len, n_win, res.units))
    xnet = np.empty_like(states)
    for i in range(n_win):
        state = np.zeros(res.units) if x0 is None else np.asarray(x0[i], np.float64)
        for t in range(t_len):
            xnet[t, i] = w_in @ x[i, t].astype(np.float64) + w @ state
            h = np.tanh(g * xnet[t, i] + b)
            state = (1.0 - a) * state + a * h
            states[t, i] = state
    return states, xnet


def test_same_seed_gives_identical_bytes_and_other_seeds_differ(make_windows):
    x, _ = make_windows(5, 20, 3, 2)
    r1, r2, r3 = build_reservoir(CFG, 7), build_reservoir(CFG, 7), build_reservoir(CFG, 8)
    assert r1.w_in.tobytes() == r2.w_in.tobytes()
    assert r1.w.tobytes() == r2.w.tobytes()
    assert run_batch(r1, x).tobytes() == run_batch(r2, x).tobytes()
    assert not np.array_equal(r1.w, r3.w)
    assert not np.array_equal(r1.w_in, r3.w_in)
    assert not np.allclose(run_batch(r1, x), run_batch(r3, x))
    # An int seed and a Generator seeded with it draw the same stream.
    r4 = build_reservoir(CFG, np.random.default_rng(7))
    assert r4.w.tobytes() == r1.w.tobytes() and r4.w_in.tobytes() == r1.w_in.tobytes()


@pytest.mark.parametrize("rho", [0.3, 0.95, 1.5])
def test_recurrent_matrix_has_requested_spectral_radius(rho):
    res = build_reservoir(dataclasses.replace(CFG, units=60, spectral_radius=rho), 3)
    # Independent check on the float32 matrix actually used (numpy's general eigensolver).
    measured = np.abs(np.linalg.eigvals(res.w.astype(np.float64))).max()
    assert measured == pytest.approx(rho, rel=1e-5)
    assert spectral_radius(res.w) == pytest.approx(measured, rel=1e-12)


def test_input_weights_are_uniform_in_the_scaled_interval():
    cfg = dataclasses.replace(CFG, units=50, n_inputs=40, input_scaling=0.6)
    w_in = build_reservoir(cfg, 0).w_in
    assert w_in.shape == (50, 40)
    assert np.abs(w_in).max() <= 0.6
    # Uniform(-0.6, 0.6): the extremes are approached and the mean is near 0.
    assert np.abs(w_in).max() > 0.59
    assert abs(float(w_in.mean())) < 0.03


@pytest.mark.parametrize("with_ip", [False, True])
def test_run_batch_matches_independent_float64_loop(make_windows, with_ip):
    x, _ = make_windows(6, 50, 3, 2, seed=1)
    res = build_reservoir(CFG, 11)
    if with_ip:
        rng = np.random.default_rng(2)
        res = res.with_ip(rng.uniform(0.5, 1.5, res.units), rng.uniform(-0.3, 0.3, res.units))
        assert res.has_ip
    want_states, want_xnet = reference_states(res, x)
    xnet = np.empty(want_xnet.shape, DTYPE)
    states = run_batch(res, x, xnet_out=xnet)
    assert np.abs(states - want_states).max() <= 1e-5
    assert np.abs(xnet - want_xnet).max() <= 1e-5
    # The states are non-trivial (not all saturated or zero), so the comparison means something.
    assert 0.05 < np.abs(want_states).mean() < 0.95


def test_states_do_not_depend_on_batching_or_order(make_windows):
    x, _ = make_windows(11, 30, 3, 2, seed=4)
    res = build_reservoir(CFG, 5)
    whole = run_batch(res, x)  # (T, W, N)
    order = np.random.default_rng(0).permutation(len(x))
    for batch_size, batch_order in [(1, None), (2, None), (4, order), (11, None), (32, order)]:
        got = np.full_like(whole, np.nan)
        for sb in iter_states(res, x, batch_size, order=batch_order):
            got[:, sb.index] = sb.states
        np.testing.assert_allclose(got, whole, rtol=0, atol=1e-6)
    seen = []
    map_states(res, x, lambda sb: seen.append((sb.index.copy(), sb.states.copy())), batch_size=5)
    assert np.concatenate([i for i, _ in seen]).tolist() == list(range(len(x)))
    np.testing.assert_allclose(np.concatenate([s for _, s in seen], axis=1), whole, rtol=0, atol=1e-6)


def test_thread_split_computes_the_same_states(make_windows, monkeypatch):
    """run_batch splits big batches over threads; force 1 and 3 groups on a small batch."""
    import esnfed_core.reservoir as reservoir

    x, _ = make_windows(10, 25, 3, 2, seed=8)
    res = build_reservoir(CFG, 5).with_ip(np.full(CFG.units, 0.9), np.full(CFG.units, 0.05))
    results = {}
    for threads in (1, 3):
        monkeypatch.setattr(reservoir, "_n_threads", lambda windows, units, k=threads: k)
        xnet = np.empty((25, 10, CFG.units), DTYPE)
        results[threads] = (run_batch(res, x, xnet_out=xnet), xnet)
    want_states, want_xnet = reference_states(res, x)
    for states, xnet in results.values():
        assert np.abs(states - want_states).max() <= 1e-5
        assert np.abs(xnet - want_xnet).max() <= 1e-5
    np.testing.assert_allclose(results[3][0], results[1][0], rtol=0, atol=1e-6)


def _recur_before_issue15(res, x, x0=None, with_xnet=False):
    """run_batch's loop as it was before the in-slot rewrite (commit 035566f): a (B, N) scratch
    buffer h per step, the leak written from it. The same float32 operations in the same order
    and the same product shapes as today's loop, so the bits must agree on one machine."""
    xt = np.ascontiguousarray(np.asarray(x, DTYPE).transpose(1, 0, 2))
    t_len, b, _ = xt.shape
    n, a = res.units, DTYPE(res.leak)
    states = np.empty((t_len, b, n), DTYPE)
    xnet = np.empty_like(states) if with_xnet else None
    h = np.empty((b, n), DTYPE)
    proj = np.empty((min(8, t_len), b, n), DTYPE)
    w_t, w_in_t = np.ascontiguousarray(res.w.T), np.ascontiguousarray(res.w_in.T)
    prev = None if x0 is None else np.asarray(x0, DTYPE)
    for t0 in range(0, t_len, 8):
        t1 = min(t0 + 8, t_len)
        np.matmul(xt[t0:t1], w_in_t, out=proj[: t1 - t0])
        for t in range(t0, t1):
            cur = states[t]
            if prev is None:
                np.copyto(h, proj[t - t0])
            else:
                np.matmul(prev, w_t, out=h)
                h += proj[t - t0]
            if xnet is not None:
                np.copyto(xnet[t], h)
            if res.has_ip:
                h *= res.gain
                h += res.bias
            if a == 1.0:
                np.tanh(h, out=cur)
            else:
                np.tanh(h, out=h)
                if prev is None:
                    np.multiply(h, a, out=cur)
                else:
                    h -= prev
                    h *= a
                    np.add(prev, h, out=cur)
            prev = cur
    return states, xnet


@pytest.mark.parametrize("units,leak,with_ip,with_x0", [
    (40, 0.3, False, False), (40, 1.0, True, False), (100, 0.3, True, True), (100, 0.55, False, True),
])
def test_run_batch_bits_equal_the_previous_loop(make_windows, monkeypatch, units, leak, with_ip, with_x0):
    """The in-slot loop of run_batch gives the previous loop's states and x_net bit for bit (one
    thread group, BLAS threads as the caller's in both, so every product has the same shape)."""
    import esnfed_core.reservoir as reservoir

    monkeypatch.setattr(reservoir, "_MAX_THREADS", 1)
    x, _ = make_windows(13, 30, 3, 2, seed=3)
    cfg = dataclasses.replace(CFG, units=units, leak=leak)
    res = build_reservoir(cfg, 9)
    rng = np.random.default_rng(4)
    if with_ip:
        res = res.with_ip(rng.uniform(0.5, 1.5, units), rng.uniform(-0.3, 0.3, units))
    x0 = rng.uniform(-1, 1, (13, units)).astype(DTYPE) if with_x0 else None
    want_states, want_xnet = _recur_before_issue15(res, x, x0, with_xnet=True)
    xnet = np.empty_like(want_xnet)
    states = run_batch(res, x, xnet_out=xnet, x0=x0)
    assert states.tobytes() == want_states.tobytes()
    assert xnet.tobytes() == want_xnet.tobytes()
    assert 0.05 < np.abs(states).mean() < 0.95  # not saturated: the bits carry information


def test_echo_state_property_states_forget_the_initial_state(make_windows):
    cfg = dataclasses.replace(CFG, spectral_radius=0.9, leak=0.5)
    res = build_reservoir(cfg, 21)
    x, _ = make_windows(4, 150, 3, 2, seed=6)
    x0 = np.random.default_rng(1).uniform(-1.0, 1.0, (4, res.units))
    from_zero = run_batch(res, x).copy()
    from_x0 = run_batch(res, x, x0=x0)
    gap = np.abs(from_zero - from_x0).max(axis=(1, 2))  # per step, over windows and units
    assert gap[0] > 0.1
    # Fading: the gap shrinks over the first steps, then stays at float32 rounding level.
    assert gap[0] > gap[10] > gap[20] > gap[40]
    assert gap[-50:].max() <= 1e-6
    # The initial state enters only through the first step: x0 = 0 reproduces the default.
    assert run_batch(res, x, x0=np.zeros((4, res.units))).tobytes() == from_zero.tobytes()


def test_float32_everywhere(make_windows):
    x, _ = make_windows(4, 10, 3, 2)
    res = build_reservoir(CFG, 0)
    for arr in (res.w_in, res.w, res.gain, res.bias):
        assert arr.dtype == DTYPE == np.float32
    ip = res.with_ip(np.full(res.units, 1.1), np.full(res.units, 0.1))  # float64 in
    assert ip.gain.dtype == np.float32 and ip.bias.dtype == np.float32
    assert run_batch(res, x.astype(np.float64)).dtype == np.float32
    for sb in iter_states(ip, x, 3, with_xnet=True):
        assert sb.states.dtype == np.float32 and sb.xnet.dtype == np.float32


def test_iter_states_reuses_its_buffers_between_batches(make_windows):
    x, _ = make_windows(10, 12, 3, 2)
    res = build_reservoir(CFG, 0)
    batches = list(iter_states(res, x, 3, with_xnet=True))
    assert [len(sb.index) for sb in batches] == [3, 3, 3, 1]
    first = batches[0]
    # Every batch, the last and smaller one included, lives in the first batch's buffers: memory
    # never exceeds one batch, however the windows divide.
    for sb in batches[1:]:
        assert np.shares_memory(sb.states, first.states) and np.shares_memory(sb.xnet, first.xnet)
        assert sb.states.flags.c_contiguous and sb.xnet.flags.c_contiguous
    assert batches[3].states.shape == (12, 1, res.units)
    assert all(sb.states.shape[1] <= 3 for sb in batches)


def test_reservoir_is_immutable_and_with_ip_shares_weights():
    res = build_reservoir(CFG, 0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.leak = 0.5
    for arr in (res.w_in, res.w, res.gain, res.bias):
        with pytest.raises(ValueError, match="read-only"):
            arr[0] = 1.0
    ip = res.with_ip(np.full(res.units, 2.0), np.zeros(res.units))
    assert ip.w is res.w and ip.w_in is res.w_in
    assert not res.has_ip and ip.has_ip


@pytest.mark.parametrize("leak", [0.3, 1.0])
def test_states_equal_reservoirpy(make_windows, leak):
    """Cross-check against reservoirpy 0.4.2's ``Reservoir`` node.

    Its update (reservoirpy/nodes/reservoir.py, ``Reservoir._step``) is
        next = f(W @ s + Win @ x + bias);  next = (1 - lr) * s + lr * next
    i.e. x(t) = (1 - lr) x(t-1) + lr · tanh(Ŵ x(t-1) + W_in u(t) + bias): the tanh term uses
    x(t-1), the leak multiplies the whole new activation, and there is no feedback or noise in this
    node. With ``activation="tanh"``, ``bias=0.0`` and ``lr = a`` it is exactly PROTOCOL §2 with
    g = 1, b = 0. ``W`` and ``Win`` passed as arrays are used unchanged (``sr`` and
    ``input_scaling`` only parametrise its own initialisers; our W_in already holds the input
    scaling). Its state starts at zeros after ``initialize`` and after ``reset()``, so running it
    window by window with a reset reproduces x(0) = 0 per window. It computes in float64; we
    compute in float32, hence the 1e-5 tolerance.
    """
    from reservoirpy.nodes import Reservoir as RpyReservoir

    res = build_reservoir(dataclasses.replace(CFG, units=50, leak=leak), 13)
    x, _ = make_windows(5, 120, 3, 2, seed=9)
    node = RpyReservoir(
        units=res.units, lr=res.leak, W=res.w.astype(np.float64), Win=res.w_in.astype(np.float64),
        bias=0.0, activation="tanh", input_scaling=1.0, input_dim=res.n_inputs,
    )
    theirs = np.empty((x.shape[1], len(x), res.units))
    for i, window in enumerate(x.astype(np.float64)):
        if node.initialized:
            node.reset()
        theirs[:, i] = node.run(window)
    # reservoirpy used our matrices as given (no rescaling).
    assert np.array_equal(node.W, res.w.astype(np.float64))
    assert np.array_equal(node.Win, res.w_in.astype(np.float64))
    ours = run_batch(res, x)
    assert np.abs(ours - theirs).max() <= 1e-5
    assert np.abs(theirs).mean() > 0.05  # non-trivial dynamics
