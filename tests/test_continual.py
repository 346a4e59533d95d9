"""CLIP and FedCLIP: forgetting on a two-context task, the replay buffer's uniformity and
capacity, replay batches, joint early stopping, CLIP = FedCLIP on one client, the ledger, seeds."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.stats

from continual_call import run_named
from esnfed_core.continual import ContinualConfig, ContinualEngine, Joint, Naive, make_strategy, run_continual
from esnfed_core.continual_settings import ContinualSettings
from esnfed_core.replay import ReplayBuffer, StreamClient, replay_batches
from esnfed_core.messages import CommLedger
from esnfed_core.plasticity import IPConfig, ip_epoch
from esnfed_core.readout import Counts
from esnfed_core.reservoir import ReservoirConfig, build_reservoir
from esnfed_core.validation import ParameterError

# Two contexts with disjoint classes (like WESAD, where a context is one condition): context 0
# holds classes 0, 1 and context 1 classes 2, 3. A readout fitted on context 1 alone never
# predicts 0 or 1, so it forgets context 0; a readout fitted on both separates all four.
MEANS = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]])
STEPS = 20


def _context(rng, classes, n, noise=0.3):
    lab = np.asarray(classes)[rng.integers(0, len(classes), n)]
    x = np.empty((n, STEPS, 3), np.float32)
    x[:, :, :2] = MEANS[lab][:, None, :] + noise * rng.standard_normal((n, STEPS, 2))
    x[:, :, 2] = 1.0  # a constant input: the current classes' scores stay high everywhere
    return x, np.repeat(lab[:, None], STEPS, axis=1)


def _stream(seed, n):
    rng = np.random.default_rng(seed)
    return [_context(rng, [0, 1], n), _context(rng, [2, 3], n)]


RES = build_reservoir(ReservoirConfig(3, 30, 0.8, 0.5, 0.5), 0)
TRAIN = [_stream(1, 100), _stream(2, 100)]  # two clients
VAL, TEST = _stream(3, 40), _stream(4, 60)
IP = IPConfig(sigma=0.3)


def _run(strategy, federated, train=TRAIN, **kw):
    kw.setdefault("budget", 2)
    kw.setdefault("local_epochs", 2)
    return run_named(RES, train, strategy, federated, IP, n_classes=4, validation=[VAL],
                         evaluate={"test": TEST}, **kw)


@pytest.mark.parametrize("federated", [False, True])
def test_naive_forgets_replay_keeps_part_joint_keeps(federated):
    runs = {s: _run(s, federated) for s in ("naive", "replay", "joint")}
    first = {s: r.accuracy_matrix("test")[1, 0] for s, r in runs.items()}  # context 0 after 1
    assert first["naive"] < 0.05
    assert 0.5 < first["replay"] < first["joint"]
    assert first["joint"] > 0.95
    stream = {s: r.stream_accuracy("test")[-1] for s, r in runs.items()}
    assert stream["joint"] >= stream["replay"] >= stream["naive"]
    assert stream["replay"] > stream["naive"] + 0.2
    for r in runs.values():  # every model learns the context it has just seen
        assert np.diag(r.accuracy_matrix("test")).min() > 0.95
        assert len(r.reservoirs) == len(r.readouts) == 2
        assert r.readouts[0].shape == (4, RES.units)


@pytest.mark.parametrize("strategy", ["naive", "replay", "joint"])
def test_clip_equals_fedclip_on_one_client_with_one_local_epoch(strategy):
    one = [TRAIN[0]]
    central = _run(strategy, False, train=one, patience=3)
    fed = _run(strategy, True, train=one, local_epochs=1, patience=3)
    for a, b in zip(central.reservoirs + central.readouts, fed.reservoirs + fed.readouts):
        if isinstance(a, np.ndarray):
            assert np.array_equal(a, b)
        else:
            assert np.array_equal(a.gain, b.gain) and np.array_equal(a.bias, b.bias)
    assert np.array_equal(central.correct["test"], fed.correct["test"])
    assert central.ip_rounds == fed.ip_rounds


def test_centralised_pools_the_clients_windows():
    pooled = [[(np.concatenate([TRAIN[0][t][0], TRAIN[1][t][0]]),
                np.concatenate([TRAIN[0][t][1], TRAIN[1][t][1]])) for t in range(2)]]
    a, b = _run("replay", False), _run("replay", False, train=pooled)
    assert np.array_equal(a.readouts[-1], b.readouts[-1])
    assert np.array_equal(a.reservoirs[-1].gain, b.reservoirs[-1].gain)


def test_ip_changes_the_reservoir_and_naive_carries_it_over():
    r = _run("naive", False, budget=3)
    assert r.reservoirs[0].has_ip and r.ip_rounds == [3, 3]
    assert not np.array_equal(r.reservoirs[0].gain, r.reservoirs[1].gain)
    zero = _run("naive", False, budget=0)
    assert not zero.reservoirs[-1].has_ip


def test_deterministic_from_seed():
    a, b = _run("replay", True, seed=3), _run("replay", True, seed=3)
    c = _run("replay", True, seed=4)
    assert a.readouts[-1].tobytes() == b.readouts[-1].tobytes()
    assert a.reservoirs[-1].gain.tobytes() == b.reservoirs[-1].gain.tobytes()
    assert np.array_equal(a.correct["test"], b.correct["test"])
    assert a.reservoirs[-1].gain.tobytes() != c.reservoirs[-1].gain.tobytes()


def _inclusion_counts(sizes, capacity, seeds):
    """How often each window of the stream (contexts of ``sizes``) ends in the buffer."""
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    counts = np.zeros(offsets[-1], np.int64)
    for seed in seeds:
        buf = ReplayBuffer(capacity, np.random.default_rng(seed))
        for t, n in enumerate(sizes):
            buf.update(t, n)
            assert len(buf) == min(capacity, offsets[t + 1])  # never above capacity
        counts[offsets[buf.context] + buf.index] += 1
    return counts


def _chi2_pvalue(counts):
    expected = np.full(len(counts), counts.sum() / len(counts))
    return scipy.stats.chisquare(counts, expected).pvalue


def test_replay_buffer_is_a_uniform_sample_of_all_past_windows():
    # Uneven contexts: a per-context quota or a recency bias would show.
    counts = _inclusion_counts([30, 50, 20], capacity=5, seeds=range(400))
    assert counts.sum() == 400 * 5
    assert _chi2_pvalue(counts) > 1e-3
    # The same test rejects a buffer that keeps the first windows of each context equally.
    biased = np.zeros(100, np.int64)
    biased[[0, 1, 30, 31, 80]] = 400
    assert _chi2_pvalue(biased) < 1e-6
    # After the first two contexts only, the buffer is uniform over those 80 windows.
    counts2 = _inclusion_counts([30, 50], capacity=5, seeds=range(400))
    assert _chi2_pvalue(counts2) > 1e-3


def test_replay_buffer_capacity_and_contents():
    buf = ReplayBuffer(10, np.random.default_rng(0))
    buf.update(0, 4)
    assert len(buf) == 4 and list(buf.index) == [0, 1, 2, 3]  # fewer windows than capacity
    buf.update(1, 100)
    assert len(buf) == 10
    assert all(0 <= i < (4 if c == 0 else 100) for c, i in zip(buf.context, buf.index))
    assert len(set(zip(buf.context, buf.index))) == 10  # without replacement
    xs = [(np.arange(4, dtype=np.float32).reshape(4, 1, 1), np.zeros((4, 1), int)),
          (100 + np.arange(100, dtype=np.float32).reshape(100, 1, 1), np.ones((100, 1), int))]
    x, y = buf.gather(xs)
    np.testing.assert_array_equal(x.ravel(), np.where(buf.context == 0, 0, 100) + buf.index)
    np.testing.assert_array_equal(y.ravel(), buf.context)
    empty = ReplayBuffer(0, np.random.default_rng(0))
    empty.update(0, 5)
    assert len(empty) == 0


def test_replay_run_buffer_holds_five_percent_of_the_clients_windows():
    r = _run("replay", True)
    # Each client has 200 windows over both contexts: capacity 10, filled from context 0.
    assert r.buffer_sizes == [[0, 0], [10, 10]]


@pytest.mark.parametrize("n_cur, n_mem", [(250, 80), (250, 200), (50, 0)])
def test_replay_batches_mix_100_current_and_32_buffer_windows(n_cur, n_mem):
    # Window values identify them: current windows 0.., buffer windows 1000.. (context 0).
    ctx0 = (1000 + np.arange(max(n_mem, 1), dtype=np.float32).reshape(-1, 1, 1), np.zeros((max(n_mem, 1), 1), int))
    ctx1 = (np.arange(n_cur, dtype=np.float32).reshape(-1, 1, 1), np.zeros((n_cur, 1), int))
    buf = ReplayBuffer(n_mem, np.random.default_rng(0))
    buf.update(0, n_mem)
    client = StreamClient("c", [ctx0, ctx1], np.random.default_rng(1), buf)
    batches = [b.ravel() for b in replay_batches(client, 1, 100, 32)]
    cur = [int((b < 1000).sum()) for b in batches]
    mem = [int((b >= 1000).sum()) for b in batches]
    n_batches = max(-(-n_cur // 100), -(-n_mem // 32))
    assert len(batches) == n_batches
    assert cur == [min(100, max(0, n_cur - 100 * k)) for k in range(n_batches)]
    assert mem == [min(32, max(0, n_mem - 32 * k)) for k in range(n_batches)]
    seen = np.sort(np.concatenate(batches))
    np.testing.assert_array_equal(seen, np.concatenate([np.arange(n_cur), 1000 + np.arange(n_mem)]))


@pytest.mark.parametrize("federated, patience", [(True, None), (False, None), (False, 1)])
def test_joint_stops_after_patience_rounds_without_improvement(federated, patience):
    r = _run("joint", federated, patience=patience, max_joint_rounds=12)
    wait = patience or (3 if federated else 5)
    for trace, used in zip(r.joint_trace, r.ip_rounds):
        best = int(np.argmax(trace))  # first best: later ties are no improvement
        assert used == best + 1
        assert len(trace) == min(12, best + 1 + wait)
    capped = _run("joint", federated, patience=patience, max_joint_rounds=2)
    assert all(len(t) <= 2 for t in capped.joint_trace)


class _Rising(ContinualEngine):
    """An engine whose IP rounds change nothing and whose validation count rises by one step per
    call up to ``top``, then stays: joint's accuracy improves for ``top`` rounds of context 0."""

    def __init__(self, top: int):
        self.calls, self.top = 0, top

    def ip_epoch(self, res, x, cfg, rng):
        return res

    def counts(self, res, x, y, w):
        self.calls += 1
        return Counts(np.array([min(self.calls, self.top)]), 1000)


def test_joint_has_no_round_cap_by_default_and_records_a_set_cap_that_fires():
    """PROTOCOL §5: only patience ends a context (the authors' `while patience < 5`): accuracy
    rising for 60 rounds keeps round 60 and stops 5 rounds later (the old default cap, 50, cut it
    while improving). An optional cap that ends a context first is recorded per context."""
    assert Joint().max_rounds is None and ContinualSettings().joint_max_rounds is None
    config = ContinualConfig(False, IP, 4)
    r = run_continual(RES, TRAIN, make_strategy("joint"), config, validation=[VAL], engine=_Rising(60))
    # context 1: two validation contexts per round, 60 + 60 correct of 2000 every round: no improvement
    assert r.ip_rounds == [60, 1] and [len(t) for t in r.joint_trace] == [65, 6]
    assert r.joint_capped == [False, False]
    capped = run_continual(RES, TRAIN, make_strategy("joint", max_joint_rounds=20), config, validation=[VAL],
                           engine=_Rising(20))  # round 20 still improves: the cap, not patience, ends it
    assert capped.ip_rounds == [20, 1] and [len(t) for t in capped.joint_trace] == [20, 6]
    assert capped.joint_capped == [True, False]
    with pytest.raises(ParameterError, match="^max_joint_rounds: must be >= 1"):
        make_strategy("joint", max_joint_rounds=0)


def test_joint_resets_plasticity_at_each_context():
    # One joint epoch per context: context 1's model is one epoch from (1, 0) on the pooled
    # contexts 0..1, continuing the shuffle generator, not a continuation of context 0's model.
    r = _run("joint", False, patience=1, max_joint_rounds=1)
    pooled = [np.concatenate([TRAIN[0][t][0], TRAIN[1][t][0]]) for t in range(2)]
    rng = np.random.default_rng(0)
    fresh = RES.with_ip(np.ones(RES.units), np.zeros(RES.units))
    first = ip_epoch(fresh, pooled[0], IP, rng)
    second = ip_epoch(fresh, np.concatenate(pooled), IP, rng)
    assert np.array_equal(r.reservoirs[0].gain, first.gain)
    assert np.array_equal(r.reservoirs[1].gain, second.gain)
    assert np.array_equal(r.reservoirs[1].bias, second.bias)
    assert r.ip_rounds == [1, 1]


def test_fedclip_ledger_counts_plasticity_and_readout_messages():
    ledger = CommLedger()
    budget, n = 2, RES.units
    _run("naive", True, budget=budget, ledger=ledger, client_names=["u1", "u2"])
    plast = [e for e in ledger.entries if e.algorithm == "fedclip" and e.kind == "PlasticityMessage"]
    assert len(plast) == 2 * 2 * budget * 2  # directions × clients × rounds × contexts
    assert all(e.floats == 2 * n for e in plast)
    assert sorted({e.client for e in plast}) == ["u1", "u2"]
    assert ledger.totals("fedclip")["rounds"] == budget * 2
    setup = [e for e in ledger.entries if e.kind == "ReservoirMessage"]
    assert len(setup) == 2
    stats = [e for e in ledger.entries if e.algorithm == "incfed" and e.kind == "StatsMessage"]
    assert len(stats) == 2 * 2  # clients × contexts
    assert all(e.floats == n * n + 4 * n for e in stats)
    assert ledger.totals("incfed")["rounds"] == 2  # one readout solve per context
    joint = CommLedger()
    r = _run("joint", True, ledger=joint)
    assert joint.totals("incfed")["rounds"] == joint.totals("fedclip")["rounds"] == sum(map(len, r.joint_trace))
    central = CommLedger()
    _run("naive", False, ledger=central)
    assert central.entries == []  # centralised: nothing is communicated


def test_bad_arguments_name_the_key():
    with pytest.raises(ParameterError, match="^strategy:"):
        _run("greedy", False)
    with pytest.raises(ParameterError, match="^validation:"):
        run_named(RES, TRAIN, "joint", False, IP, 1, 1, n_classes=4)
    with pytest.raises(ParameterError, match=r"^train\[client1\]: 1 contexts"):
        _run("naive", False, train=[TRAIN[0], TRAIN[1][:1]])
    with pytest.raises(ParameterError, match=r"^evaluate\[test\]\[0\]"):
        run_named(RES, TRAIN, "naive", False, IP, 1, 1, n_classes=4,
                  evaluate={"test": [(TEST[0][0][..., :2], TEST[0][1]), TEST[1]]})
    with pytest.raises(ParameterError, match="^replay_fraction:"):
        _run("replay", False, replay_fraction=0.0)


def _numbered_stream(n: int) -> list:
    """Two contexts of n windows; every value of window i of context c is 1000·c + i."""
    out = []
    for c in range(2):
        x = np.broadcast_to((1000 * c + np.arange(n, dtype=np.float32))[:, None, None], (n, 5, 3))
        out.append((np.ascontiguousarray(x), np.zeros((n, 5), int)))
    return out


def _recorded_replay_batches(monkeypatch, shuffle: bool) -> list[list[list[int]]]:
    import esnfed_core.continual_engine as continual_engine

    recorded = []

    def record(res, batches, cfg):
        recorded.append([[int(v) for v in b[:, 0, 0]] for b in batches])
        return res

    monkeypatch.setattr(continual_engine, "ip_pass", record)
    # 20 windows, fraction 0.5: the buffer holds all 10 windows of context 0 after it.
    run_named(RES, [_numbered_stream(10)], "replay", False, IPConfig(sigma=0.3, batch_size=4),
              budget=1, local_epochs=1, n_classes=2, seed=0, replay_fraction=0.5, replay_batch=2,
                  replay_shuffle=shuffle)
    return recorded


def test_replay_batches_after_the_first_context_are_the_authors_in_order_batches(monkeypatch):
    """docs/fidelity.md §3: for t > 0 batch k = current windows [4k, 4k+4) then buffer windows
    [2k, 2k+2), in order; once the current side runs out, buffer windows alone."""
    t0, t1 = _recorded_replay_batches(monkeypatch, shuffle=False)
    assert sorted(v for b in t0 for v in b) == list(range(10))  # t = 0: a shuffled pass
    assert t1 == [[1000, 1001, 1002, 1003, 0, 1], [1004, 1005, 1006, 1007, 2, 3], [1008, 1009, 4, 5],
                  [6, 7], [8, 9]]


def test_replay_shuffle_option_permutes_each_side(monkeypatch):
    _, t1 = _recorded_replay_batches(monkeypatch, shuffle=True)
    assert [len(b) for b in t1] == [6, 6, 4, 2, 2]
    cur = [v for b in t1 for v in b if v >= 1000]
    mem = [v for b in t1 for v in b if v < 1000]
    assert sorted(cur) == list(range(1000, 1010)) and sorted(mem) == list(range(10))
    assert cur != sorted(cur) or mem != sorted(mem)


def test_run_continual_takes_a_strategy_object_and_a_config():
    config = ContinualConfig(False, IP, 4, seed=3)
    with pytest.raises(ParameterError, match="^strategy:"):
        run_continual(RES, TRAIN, "naive", config)  # names are resolved once, by make_strategy
    direct = run_continual(RES, TRAIN, Naive(2), config, evaluate={"test": TEST})
    named = run_named(RES, TRAIN, "naive", False, IP, 2, n_classes=4, seed=3, evaluate={"test": TEST})
    assert np.array_equal(direct.readouts[-1], named.readouts[-1])
    assert direct.ip_rounds == [2, 2] and direct.buffer_sizes == [] and direct.joint_trace == []


def test_joint_scores_validation_user_by_user_and_pools_the_counts():
    """Joint's validation accuracy of a round: every validation user's contexts 0..t counted on
    their own (the products a federated server's evaluation nodes compute), the integer counts
    pooled; a user without windows at a context adds nothing."""
    from esnfed_core.continual import ContinualConfig, ContinualEngine, make_strategy, run_continual

    calls = []

    class Recording(ContinualEngine):
        def counts(self, res, x, y, w):
            c = super().counts(res, x, y, w)
            calls.append((len(x), int(c.correct[0]), int(c.total)))
            return c

    empty = (VAL[0][0][:0], VAL[0][1][:0])
    users = [_stream(5, 20), [empty, _stream(6, 30)[1]]]  # the second user has no context-0 windows
    strat = make_strategy("joint", patience=1, max_joint_rounds=3)
    r = run_continual(RES, TRAIN, strat, ContinualConfig(True, IP, 4), validation=users, engine=Recording())
    k = 0
    for t, trace in enumerate(r.joint_trace):
        for acc in trace:
            n = 1 if t == 0 else 2 * (t + 1) - 1  # user 2 sits context 0 out
            got = calls[k : k + n]
            k += n
            assert [w for w, _, _ in got] == [20] * (t + 1) + ([30] if t else [])
            assert acc == sum(c for _, c, _ in got) / sum(n for _, _, n in got)
    assert k == len(calls) > 0  # every counts call was a validation one, in rounds
