"""esnfed_core.accel.ip_rounds: an IP epoch / FedIP round's mini-batch steps from a plan held on
the device, each segment (same live slots, same mask need) captured as a CUDA graph on cuda.

What must hold: the plan holds each slot's mini-batches as given (rows, padding mask, counts,
live slots); the segments split exactly where the live slots or the mask need change; on the
CPU, run_round gives the same bytes as calling ip_step step by step the way the trial batcher
did before (the same kernels on the same shapes: bit-identity is the right check); on cuda the
graphs are captured and replayed and agree with the eager steps (see the tolerance there)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from esnfed_core.accel import ip_rounds
from esnfed_core.accel import torch_plasticity as tp
from esnfed_core.accel.ip_rounds import RoundPlan, run_round
from esnfed_core.accel.torch_reservoir import Bank
from esnfed_core.reservoir import ReservoirConfig, build_reservoir

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
BS = 4
STEP = {"mu": 0.0, "eta": 0.05, "normalize_step": True}


def _plans():
    """Three slots: 9 windows in 3 batches (last one short), 8 in 2 full ones, 13 in 4 (last
    short): steps 0-1 all live and full; step 2 slots 0 and 2, slot 0 short; step 3 slot 2 only,
    short."""
    rng = np.random.default_rng(5)
    sizes, offsets = [9, 8, 13], [0, 9, 17]
    plans = []
    for n, off in zip(sizes, offsets):
        order = rng.permutation(n) + off
        plans.append([order[s : s + BS] for s in range(0, n, BS)])
    return plans


def _setup(device="cpu", trials=2, n=12, u=3, t_len=15):
    reservoirs = [build_reservoir(ReservoirConfig(u, n, 0.9, 0.4, 1.0), i) for i in range(trials)]
    base = Bank.from_reservoirs(reservoirs, device)
    rng = np.random.default_rng(2)
    x = torch.from_numpy(rng.standard_normal((30, t_len, u)).astype(np.float32)).to(device)
    sigma = torch.tensor([0.3, 0.6][:trials], dtype=torch.float64, device=device)
    return base, x, sigma


def test_plan_holds_each_slots_mini_batches():
    plans = _plans()
    plan = RoundPlan.of(plans, BS, "cpu")
    assert plan.idx.shape == (4, 3, BS) and plan.live == [(0, 1, 2), (0, 1, 2), (0, 2), (2,)]
    for k, batches in enumerate(plans):
        for s, rows in enumerate(batches):
            assert plan.idx[s, k, : len(rows)].tolist() == rows.tolist()
            assert plan.mask[s, k].tolist() == [1.0] * len(rows) + [0.0] * (BS - len(rows))
            assert plan.n_win[s, k].item() == len(rows)
            assert plan.full[s, k] == (len(rows) == BS)
    assert plan.segments() == [(0, 2, (0, 1, 2)), (2, 3, (0, 2)), (3, 4, (2,))]
    assert [plan.masked(s, live) for s, live in enumerate(plan.live)] == [False, False, True, True]
    with pytest.raises(ValueError, match="slot 0 step 0 has 5 windows"):
        RoundPlan.of([[np.arange(5)]], BS, "cpu")


def test_a_short_mini_batch_does_not_split_a_segment():
    plan = RoundPlan.of([[np.arange(4), np.arange(3), np.arange(4), np.arange(4)]], BS, "cpu")
    assert plan.segments() == [(0, 4, (0,))]
    assert [plan.masked(s, (0,)) for s in range(4)] == [False, True, False, False]


class _FakeGraph:
    """Stands in for a CUDA graph on the CPU: replay runs the captured (full, unmasked) step."""

    def __init__(self, seg):
        self.seg, self.replays = seg, 0

    def replay(self):
        self.replays += 1
        self.seg.step()


def _step_by_step(base, trial_of, sigma, x, plans, gain, bias):
    """The trial batcher's loop before ip_rounds: live slots rebuilt when they change, each
    step's indices gathered from the host, mask None when every live mini-batch is full."""
    gain, bias = gain.clone(), bias.clone()
    live, bank = [], None
    for s in range(max(len(p) for p in plans)):
        now = [k for k, p in enumerate(plans) if s < len(p)]
        if now != live:
            if live:
                gain[live], bias[live] = bank.gain, bank.bias
            live = now
            at = torch.tensor(live)
            bank = base.select([trial_of[k] for k in live]).with_ip(gain[at], bias[at])
            sig = sigma[torch.tensor([trial_of[k] for k in live])]
        idx = np.zeros((len(live), BS), np.int64)
        mask = np.zeros((len(live), BS), np.float32)
        for row, k in enumerate(live):
            idx[row, : len(plans[k][s])] = plans[k][s]
            mask[row, : len(plans[k][s])] = 1.0
        u = x[torch.from_numpy(idx)]
        bank = tp.ip_step(bank, u, None if mask.all() else torch.from_numpy(mask),
                          torch.from_numpy(mask.sum(axis=1)), sig, **STEP)
    gain[live], bias[live] = bank.gain, bank.bias
    return gain, bias


def test_run_round_on_the_cpu_equals_ip_step_by_step_bit_for_bit():
    base, x, sigma = _setup()
    plans = _plans()
    plans[1] = plans[1] + [plans[1][0][:3], plans[1][1]]  # a short step inside slot 1's run
    trial_of = [0, 1, 1]  # FedIP-like: slots 1 and 2 are two clients of trial 1
    rng = np.random.default_rng(8)
    gain = torch.from_numpy(rng.uniform(0.7, 1.3, (3, 12)).astype(np.float32))
    bias = torch.from_numpy(rng.uniform(-0.2, 0.2, (3, 12)).astype(np.float32))
    want_g, want_b = _step_by_step(base, trial_of, sigma, x, plans, gain, bias)
    got_g, got_b = gain.clone(), bias.clone()
    run_round(base, trial_of, sigma, x, RoundPlan.of(plans, BS, "cpu"), got_g, got_b, **STEP)
    assert torch.equal(got_g, want_g) and torch.equal(got_b, want_b)
    assert not torch.equal(got_g, gain)  # the steps moved (g, b)



def test_capture_flow_replays_full_steps_and_runs_short_ones_between(monkeypatch):
    """run_segments with capture on, the capture faked on the CPU (a replay runs the loaded full
    step): which steps replay, which run eagerly, and the same bytes as step by step."""
    base, x, sigma = _setup()
    plans = [[np.arange(s, s + BS) for s in range(0, 12, BS)] + [np.arange(12, 15)] + [np.arange(16, 20)] * 2,
             [np.arange(s, s + BS) for s in range(0, 24, BS)]]  # slot 0: full ×3, short, full ×2
    trial_of = [0, 1]
    gain, bias = torch.ones((2, 12)), torch.zeros((2, 12))
    want_g, want_b = _step_by_step(base, trial_of, sigma, x, plans, gain, bias)
    graphs = []

    def fake_capture(seg):
        seg.step()  # the warm-up is the step itself
        ip_rounds.COUNTS["captured"] += 1
        graphs.append(_FakeGraph(seg))
        return graphs[-1]

    monkeypatch.setattr(ip_rounds, "_capture", fake_capture)
    monkeypatch.setattr(ip_rounds, "COUNTS", dict.fromkeys(ip_rounds.COUNTS, 0))
    got_g, got_b = gain.clone(), bias.clone()
    ip_rounds.run_segments(base, trial_of, sigma, x, RoundPlan.of(plans, BS, "cpu"), got_g, got_b, capture=True,
                           step_args={**STEP, "fused": None})
    assert torch.equal(got_g, want_g) and torch.equal(got_b, want_b)
    # one segment of 6 steps: step 0 captured, steps 1, 2, 4, 5 replayed, the short step 3 eager
    assert ip_rounds.COUNTS == {"captured": 1, "replayed": 4, "eager": 2, "failed": 0}
    assert len(graphs) == 1 and graphs[0].replays == 4


@cuda
def test_cuda_graphs_are_replayed_and_equal_the_eager_steps(monkeypatch):
    """Tolerance: a replay runs the eager step's kernels, but cuBLAS may choose another algorithm
    under capture (a float32 reordering of each product's sums, ≲ 1e-6 on states |x| ≤ 1); after
    six normalised SGD steps of η = 0.05 that moves (g, b) by far less than 1e-5."""
    base, x, sigma = _setup("cuda")
    plans = [[np.arange(s, s + BS) for s in range(0, 24, BS)]] * 2  # 6 full steps of both slots
    plan = RoundPlan.of(plans, BS, "cuda")
    gain = torch.ones((2, 12), device="cuda")
    bias = torch.zeros((2, 12), device="cuda")
    monkeypatch.setattr(ip_rounds, "COUNTS", dict.fromkeys(ip_rounds.COUNTS, 0))
    eager_g, eager_b = gain.clone(), bias.clone()
    run_round(base, [0, 1], sigma, x, plan, eager_g, eager_b, graphs=False, **STEP)
    assert ip_rounds.COUNTS == {"captured": 0, "replayed": 0, "eager": 6, "failed": 0}
    graph_g, graph_b = gain.clone(), bias.clone()
    run_round(base, [0, 1], sigma, x, plan, graph_g, graph_b, graphs=True, **STEP)
    assert ip_rounds.COUNTS == {"captured": 1, "replayed": 5, "eager": 7, "failed": 0}
    torch.testing.assert_close(graph_g, eager_g, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(graph_b, eager_b, rtol=1e-5, atol=1e-5)
    assert not torch.equal(graph_g, gain)


@cuda
def test_cuda_graphs_with_the_fused_sums_equal_the_eager_fused_steps(monkeypatch):
    """The fused sums (torch.compile, Triton) inside a captured step: compiled in the warm-up,
    then replayed; tolerance as above."""
    base, x, sigma = _setup("cuda")
    plan = RoundPlan.of([[np.arange(s, s + BS) for s in range(0, 24, BS)]] * 2, BS, "cuda")
    monkeypatch.setattr(ip_rounds, "COUNTS", dict.fromkeys(ip_rounds.COUNTS, 0))
    got = []
    for graphs in (False, True):
        g, b = torch.ones((2, 12), device="cuda"), torch.zeros((2, 12), device="cuda")
        run_round(base, [0, 1], sigma, x, plan, g, b, graphs=graphs, fused=True, **STEP)
        got.append((g, b))
    assert ip_rounds.COUNTS["captured"] == 1 and ip_rounds.COUNTS["replayed"] == 5
    torch.testing.assert_close(got[1], got[0], rtol=1e-5, atol=1e-5)


@cuda
def test_cuda_fedip_trials_replay_graphs_and_equal_numpy(monkeypatch):
    """fit_batch's FedIP on cuda with every segment of ≥ 2 steps captured: the same bounds as
    tests/test_accel.py's test_cuda_fit_batch_equals_fit (gains 1e-5, readouts 1e-3 relative)."""
    from experiment_data import trial_data
    from test_accel import check_cuda_fedip_equals_fit

    monkeypatch.setattr(ip_rounds, "COUNTS", dict.fromkeys(ip_rounds.COUNTS, 0))
    monkeypatch.setattr(ip_rounds, "MIN_GRAPH_STEPS", 2)
    check_cuda_fedip_equals_fit(trial_data(seed=1, pct="75")[0])
    assert ip_rounds.COUNTS["captured"] > 0 and ip_rounds.COUNTS["replayed"] > 0
    assert ip_rounds.COUNTS["failed"] == 0
