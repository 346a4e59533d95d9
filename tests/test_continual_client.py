"""The stateless FedCLIP client (esnfed_core.continual.LocalClient): rebuilt at (context t,
round r) it holds the live pipeline client's state there (shuffle generator, buffer and its
generator), and a server loop over such clients (average of their fits in client order, sum of
their statistics) gives run_continual's (g, b) and readouts bit for bit, sit-outs included."""

from __future__ import annotations

import numpy as np
import pytest

import esnfed_core.continual as continual
from esnfed_core.aggregate import weighted_average
from esnfed_core.continual import ContinualConfig, LocalClient, NUMPY_ENGINE, make_strategy, run_continual
from esnfed_core.plasticity import IPConfig
from esnfed_core.readout import solve
from esnfed_core.reservoir import ReservoirConfig, build_reservoir
from esnfed_core.validation import ParameterError

RES = build_reservoir(ReservoirConfig(3, 12, 0.8, 0.5, 0.5), 0)
BUDGET = 2


def _streams():
    """Three clients, three contexts: client 1 has no windows at context 1 (sits it out under
    naive; under replay it trains on its buffer), client 2 none at context 0 (sits it out)."""
    rng = np.random.default_rng(7)

    def split(n):
        return rng.standard_normal((n, 10, 3)).astype(np.float32), rng.integers(0, 3, (n, 10))

    return [[split(30), split(20), split(25)], [split(15), split(0), split(40)], [split(0), split(12), split(9)]]


TRAIN = _streams()


def _setup(strategy: str, shuffle: bool = False, policy: str = "uniform"):
    strat = make_strategy(strategy, budget=BUDGET, replay_fraction=0.2, replay_batch=4, replay_shuffle=shuffle,
                          replay_policy=policy)
    config = ContinualConfig(True, IPConfig(sigma=0.3, batch_size=7), 3, local_epochs=2, lam=1e-3, seed=11)
    return strat, config


def _state(client) -> tuple:
    """What a client carries between rounds: its generators' states and its buffer's entries."""
    buf = client.buffer
    out = (repr(client.rng.bit_generator.state),)
    if buf is not None:
        out += (buf.context.tolist(), buf.index.tolist(), buf._key.tolist(), repr(buf._rng.bit_generator.state),
                [(c, k.tolist()) for c, k in sorted(buf._seen.items())])  # proportional: every key drawn
    return out


def _recording(monkeypatch) -> tuple[list[list[tuple]], continual.ContinualEngine]:
    """(snapshots, engine): run with the engine, snapshots holds every live client's state before
    each IP round."""
    live: list = []
    made = continual.stream_client

    def record(*args, **kw):
        live.append(made(*args, **kw))
        return live[-1]

    monkeypatch.setattr(continual, "stream_client", record)
    snapshots: list[list[tuple]] = []

    class Recording(continual.ContinualEngine):
        def fit_clients(self, start, fits):
            snapshots.append([_state(c) for c in live])
            return super().fit_clients(start, fits)

    return snapshots, Recording()


@pytest.mark.parametrize("strategy,shuffle,policy", [("naive", False, "uniform"), ("replay", False, "uniform"),
                                                     ("replay", True, "uniform"), ("replay", False, "proportional")])
def test_rebuilt_client_holds_the_live_clients_state_at_every_round(strategy, shuffle, policy, monkeypatch):
    strat, config = _setup(strategy, shuffle, policy)
    snapshots, engine = _recording(monkeypatch)
    run_continual(RES, TRAIN, strat, config, engine=engine)
    assert len(snapshots) == len(TRAIN[0]) * BUDGET
    for k, states in enumerate(snapshots):
        t, r = divmod(k, BUDGET)
        for c, contexts in enumerate(TRAIN):
            rebuilt = LocalClient.at(strat, config, contexts, t, r, f"client{c}")
            assert _state(rebuilt.client) == states[c], (t, r, c)
    # Not vacuous: the states move within the first context (shuffles) and between contexts.
    assert len({repr(s) for s in snapshots}) > len(TRAIN[0])


def _federate(strat, config, train):
    """A server over LocalClients rebuilt for every message: per context, ``budget`` rounds of the
    weighted average of the participants' fits in client order, then the sum of their statistics."""
    cur, gains, readouts = RES, [], []
    for t in range(len(train[0])):
        for r in range(strat.budget):
            clients = [LocalClient.at(strat, config, contexts, t, r) for contexts in train]
            part = [c for c in clients if c.takes_part(t)]
            fitted = [c.fit(cur, t) for c in part]
            weights = [c.weight(t) for c in part]
            cur = cur.with_ip(weighted_average([f.gain for f in fitted], weights),
                              weighted_average([f.bias for f in fitted], weights))
        total = None
        for contexts in train:
            c = LocalClient.at(strat, config, contexts, t, strat.budget)
            if c.takes_part(t):
                s = c.stats(cur, t)
                total = s if total is None else total + s
        gains.append(cur)
        readouts.append(solve(total, [config.lam], config.solver)[0])
    return gains, readouts


@pytest.mark.parametrize("strategy,shuffle,policy", [("naive", False, "uniform"), ("replay", False, "uniform"),
                                                     ("replay", True, "uniform"), ("replay", False, "proportional")])
def test_a_server_over_rebuilt_clients_gives_the_pipelines_bits(strategy, shuffle, policy):
    strat, config = _setup(strategy, shuffle, policy)
    want = run_continual(RES, TRAIN, strat, config)
    reservoirs, readouts = _federate(strat, config, TRAIN)
    for t, (got, w) in enumerate(zip(reservoirs, readouts)):
        np.testing.assert_array_equal(got.gain, want.reservoirs[t].gain)
        np.testing.assert_array_equal(got.bias, want.reservoirs[t].bias)
        np.testing.assert_array_equal(w, want.readouts[t])
    assert not np.allclose(want.reservoirs[0].gain, want.reservoirs[-1].gain)  # IP moved (g, b)


def test_sit_outs_follow_the_strategys_data():
    naive, config = _setup("naive")
    replay, _ = _setup("replay")
    assert not LocalClient.at(naive, config, TRAIN[1], 1, 0).takes_part(1)
    # Replay: no windows at context 1, but a buffer from context 0 to train on (and weigh by).
    c = LocalClient.at(replay, config, TRAIN[1], 1, 0)
    assert c.takes_part(1) and c.weight(1) == len(c.client.buffer) > 0
    assert not LocalClient.at(replay, config, TRAIN[2], 0, 0).takes_part(0)
    c = LocalClient.at(replay, config, TRAIN[0], 2, 0)
    assert len(c.client.buffer) > 0 and c.weight(2) == 25 + len(c.client.buffer)  # |D_2| + |M_2|


def test_bad_arguments_name_the_key():
    strat, config = _setup("naive")
    with pytest.raises(ParameterError, match="context"):
        LocalClient.at(strat, config, TRAIN[0], 3, 0)
    with pytest.raises(ParameterError, match="round"):
        LocalClient.at(strat, config, TRAIN[0], 0, BUDGET + 1)
    with pytest.raises(ParameterError, match="strategy: .*stateless"):
        LocalClient(object(), config, TRAIN[0], engine=NUMPY_ENGINE)
    with pytest.raises(ParameterError, match="history: .*joint"):
        LocalClient.at(make_strategy("joint"), config, TRAIN[0], 1, 0)
    with pytest.raises(ParameterError, match="history: 1 contexts"):
        LocalClient.at(make_strategy("joint"), config, TRAIN[0], 2, 0, history=[3])


def test_rebuilt_joint_client_holds_the_live_clients_state_at_every_round(monkeypatch):
    """Joint: the rounds per context vary (early stopping on the validation users); rebuilt with
    the rounds the run took at each earlier context (all of them, not only up to the best), the
    client holds the live one's shuffle generator before every IP round."""
    _, config = _setup("naive")
    strat = make_strategy("joint", patience=1, max_joint_rounds=4)
    snapshots, engine = _recording(monkeypatch)
    rng = np.random.default_rng(3)
    validation = [(rng.standard_normal((8, 10, 3)).astype(np.float32), rng.integers(0, 3, (8, 10)))
                  for _ in range(3)]
    result = run_continual(RES, TRAIN, strat, config, validation=[validation], engine=engine)
    ran = [len(trace) for trace in result.joint_trace]  # rounds run per context
    assert len(snapshots) == sum(ran)
    assert any(n < strat.max_rounds for n in ran)  # early stopping stopped some context
    k = 0
    for t, n in enumerate(ran):
        for r in range(n):
            for c, contexts in enumerate(TRAIN):
                rebuilt = LocalClient.at(strat, config, contexts, t, r, f"client{c}", history=ran[:t])
                assert _state(rebuilt.client) == snapshots[k][c], (t, r, c)
            k += 1
    assert not LocalClient.at(strat, config, TRAIN[2], 0, 0, history=[]).takes_part(0)
    assert LocalClient.at(strat, config, TRAIN[2], 1, 0, history=ran[:1]).weight(1) == 12  # D_0 ∪ D_1


def test_a_client_config_with_a_client_fraction_is_refused_in_one_line():
    """A stateless client replays the fits its server tells it (history, round; the Flower apps'
    servers sample, esnfed_flower.common.Sampling): a config of its own with a fraction below 1 is
    refused naming the key."""
    strat, config = _setup("naive")
    sampled = ContinualConfig(True, config.ip, 3, local_epochs=2, lam=1e-3, seed=11, client_fraction=0.5)
    with pytest.raises(ParameterError, match=r"^federated\.client_fraction: a stateless client replays"):
        LocalClient(strat, sampled, TRAIN[0])
    assert LocalClient(strat, config, TRAIN[0]).takes_part(0)  # at 1 it is built
