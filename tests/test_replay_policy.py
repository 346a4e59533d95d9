"""The replay buffer's policy (params continual.replay.policy): ``uniform`` keeps what it kept before
the option existed; ``proportional`` (FedCLIP paper, Appendix A.3) keeps exact per-context quotas
(floor formula, largest remainders) filled uniformly within each context by the same keys, and runs
through run_continual, the trial settings and params.yaml."""

from __future__ import annotations

import copy
import itertools
from pathlib import Path

import numpy as np
import pytest
import scipy.stats

from continual_call import run_named
from esnfed_core.continual import make_strategy
from esnfed_core.continual_settings import ContinualSettings
from esnfed_core.errors import ConfigError
from esnfed_core.method import Method
from esnfed_core.plasticity import IPConfig
from esnfed_core.replay import ReplayBuffer, proportional_quotas
from esnfed_core.reservoir import ReservoirConfig, build_reservoir
from esnfed_core.settings import Settings
from esnfed_core.validation import ParameterError
from esnfed_stages.params.experiment import experiment_params
from esnfed_stages.params.schema import validate
from esnfed_stages.params.load import load_params

REPO_PARAMS = load_params(Path(__file__).resolve().parents[1] / "params.yaml")


def _fill(policy: str, capacity: int, sizes, seed) -> list[tuple[list[int], list[int]]]:
    """(contexts, indices) of the buffer after each context of ``sizes``."""
    buf = ReplayBuffer(capacity, np.random.default_rng(seed), policy)
    out = []
    for t, n in enumerate(sizes):
        buf.update(t, n)
        out.append((buf.context.tolist(), buf.index.tolist()))
    return out


# What ReplayBuffer(10, default_rng([7, 1])) held after each context of sizes 13, 0, 5, 21, 8
# before the policy option existed (recorded by running main at 1e64082, whose buffer had no policy).
RECORDED_UNIFORM = [
    ([0] * 10, [0, 2, 4, 5, 6, 7, 8, 9, 10, 12]),
    ([0] * 10, [0, 2, 4, 5, 6, 7, 8, 9, 10, 12]),
    ([0, 0, 0, 0, 0, 0, 2, 2, 2, 2], [0, 4, 5, 6, 9, 12, 0, 1, 3, 4]),
    ([0, 0, 0, 2, 2, 3, 3, 3, 3, 3], [0, 6, 12, 0, 1, 1, 12, 13, 15, 16]),
    ([0, 0, 0, 2, 2, 3, 3, 3, 4, 4], [0, 6, 12, 0, 1, 12, 13, 16, 1, 7]),
]


def test_uniform_policy_keeps_the_entries_of_the_buffer_before_the_option():
    sizes = [13, 0, 5, 21, 8]
    assert _fill("uniform", 10, sizes, [7, 1]) == RECORDED_UNIFORM
    default = ReplayBuffer(10, np.random.default_rng([7, 1]))  # no policy given: uniform
    for t, n in enumerate(sizes):
        default.update(t, n)
    assert (default.context.tolist(), default.index.tolist()) == RECORDED_UNIFORM[-1]


@pytest.mark.parametrize("sizes, capacity, quotas", [
    ([30, 50, 20], 7, [2, 4, 1]),   # floors 2, 3, 1 (2.1, 3.5, 1.4): the leftover to the largest part, .5
    ([10, 10, 10], 4, [2, 1, 1]),   # equal parts: the leftover to the earliest context
    ([30, 50, 20], 5, [2, 2, 1]),   # 1.5, 2.5, 1.0: the tie of .5 goes to context 0
    ([0, 5, 5], 3, [0, 2, 1]),      # an empty context gets nothing
    ([3, 2], 10, [3, 2]),           # fewer windows than capacity: all of them
    ([13, 0, 5, 21, 8], 10, [3, 0, 1, 4, 2]),  # 2.77, 0, 1.06, 4.47, 1.70: floors 8, leftovers to .77 and .70
])
def test_proportional_quotas_are_the_floor_formula_plus_largest_remainders(sizes, capacity, quotas):
    assert proportional_quotas(sizes, capacity) == quotas


def test_proportional_quotas_hold_their_rule_on_random_sizes():
    rng = np.random.default_rng(5)
    for _ in range(500):
        sizes = [int(s) for s in rng.integers(0, 60, rng.integers(1, 7))]
        n, total = int(rng.integers(0, 80)), sum(sizes)
        q = proportional_quotas(sizes, n)
        assert sum(q) == min(n, total) <= n
        assert all(0 <= qj <= s for qj, s in zip(q, sizes))
        if total <= n:
            assert q == sizes
            continue
        floors = [n * s // total for s in sizes]  # floor(n·|D_j| / Σ|D_k|), in integers
        extra = [qj - f for qj, f in zip(q, floors)]
        assert set(extra) <= {0, 1}
        rem = [n * s % total for s in sizes]  # the fractional parts, times Σ|D_k|
        for j, k in itertools.permutations(range(len(sizes)), 2):
            if extra[j] and not extra[k]:  # a leftover went to j, not k: j's part larger, or equal and earlier
                assert rem[j] > rem[k] or (rem[j] == rem[k] and j < k)


def _per_context(entries) -> dict[int, set[int]]:
    ctx, idx = entries
    out: dict[int, set[int]] = {}
    for c, i in zip(ctx, idx):
        out.setdefault(c, set()).add(i)
    return out


@pytest.mark.parametrize("seed", range(20))
def test_proportional_buffer_holds_each_quota_by_the_uniform_policys_keys(seed):
    rng = np.random.default_rng(100 + seed)
    sizes = [int(s) for s in rng.integers(0, 40, 5)]
    capacity = int(rng.integers(1, 30))
    prop = _fill("proportional", capacity, sizes, seed)
    unif = _fill("uniform", capacity, sizes, seed)
    for t, ((ctx, idx), u) in enumerate(zip(prop, unif)):
        quotas = proportional_quotas(sizes[: t + 1], capacity)
        assert [ctx.count(c) for c in range(t + 1)] == quotas  # exact quotas, sum <= capacity
        assert len(set(zip(ctx, idx))) == len(ctx) and all(0 <= i < sizes[c] for c, i in zip(ctx, idx))
        assert sorted(zip(ctx, idx)) == list(zip(ctx, idx))  # stream order, as the uniform buffer
        # The same keys rank each context's windows under both policies: within a context, one
        # policy's kept windows are the other's or a subset of them (the largest keys first).
        p, q = _per_context((ctx, idx)), _per_context(u)
        for c in set(p) | set(q):
            a, b = p.get(c, set()), q.get(c, set())
            assert a <= b or b <= a, (t, c, a, b)
        if t:  # keys never change: a context's windows stay nested as its quota moves
            before = _per_context(prop[t - 1])
            for c in range(t):
                a, b = before.get(c, set()), p.get(c, set())
                assert (b <= a) if len(b) <= len(a) else (a <= b)


def test_proportional_buffer_is_uniform_within_each_context():
    """Over 400 seeds, each window of a context is kept equally often: a chi-square test per context
    (p > 1e-3: the seeds are fixed, so the outcome is too; a correct sampler fails such a bound once in
    a thousand seed sets, and the test below shows it rejects a sampler biased to the first windows)."""
    sizes, capacity, n_seeds = [30, 50, 20], 5, 400
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    counts = np.zeros(offsets[-1], np.int64)
    for seed in range(n_seeds):
        buf = ReplayBuffer(capacity, np.random.default_rng(seed), "proportional")
        for t, n in enumerate(sizes):
            buf.update(t, n)
        counts[offsets[buf.context] + buf.index] += 1
    quotas = proportional_quotas(sizes, capacity)
    assert quotas == [2, 2, 1]
    for j in range(len(sizes)):
        part = counts[offsets[j]: offsets[j + 1]]
        assert part.sum() == n_seeds * quotas[j]  # stratified: exactly the quota every time
        assert scipy.stats.chisquare(part).pvalue > 1e-3
    biased = np.zeros(30, np.int64)
    biased[:2] = n_seeds  # the first two windows of context 0, always
    assert scipy.stats.chisquare(biased).pvalue < 1e-6


def test_proportional_buffer_refuses_a_context_offered_twice_and_bad_policies():
    buf = ReplayBuffer(4, np.random.default_rng(0), "proportional")
    buf.update(0, 5)
    with pytest.raises(ParameterError, match="^context: 0 already offered"):
        buf.update(0, 5)
    for bad in ("stratified", None, True):
        with pytest.raises(ParameterError, match="^replay_policy: expected one of uniform, proportional, got "):
            ReplayBuffer(4, np.random.default_rng(0), bad)
        with pytest.raises(ParameterError, match="^replay_policy: "):
            make_strategy("replay", budget=1, replay_policy=bad)
        with pytest.raises(ParameterError, match="^replay_policy: "):
            ContinualSettings(replay_policy=bad)


STEPS = 6


def _uneven_stream(seed: int, sizes) -> list:
    rng = np.random.default_rng(seed)
    out = []
    for c, n in enumerate(sizes):
        y = np.full((n, STEPS), c % 3)
        x = (rng.standard_normal((n, STEPS, 2)) + c).astype(np.float32)
        out.append((x, y))
    return out


def test_run_continual_with_the_proportional_policy_fills_each_clients_quotas():
    res = build_reservoir(ReservoirConfig(2, 12, 0.8, 0.5, 0.5), 0)
    sizes = [[40, 5, 30], [10, 60, 0]]
    train = [_uneven_stream(1, sizes[0]), _uneven_stream(2, sizes[1])]
    kw = dict(budget=1, local_epochs=1, n_classes=3, replay_fraction=0.1, replay_batch=2, seed=3)
    prop = run_named(res, train, "replay", True, IPConfig(sigma=0.3, batch_size=8), replay_policy="proportional", **kw)
    unif = run_named(res, train, "replay", True, IPConfig(sigma=0.3, batch_size=8), **kw)
    # capacity max(1, ⌊0.1 · 75⌋) = 7 and ⌊0.1 · 70⌋ = 7; the buffer used at t holds contexts < t.
    want = [[0, 0]] + [[sum(proportional_quotas(s[:t], 7)) for s in sizes] for t in (1, 2)]
    assert prop.buffer_sizes == want == [[0, 0], [7, 7], [7, 7]]
    assert unif.buffer_sizes == want  # same sizes, other windows: the models differ
    assert not np.allclose(prop.readouts[-1], unif.readouts[-1], rtol=1e-3, atol=0)
    again = run_named(res, train, "replay", True, IPConfig(sigma=0.3, batch_size=8), replay_policy="proportional", **kw)
    assert prop.readouts[-1].tobytes() == again.readouts[-1].tobytes()  # deterministic from the seed


def _params(**replay):
    p = copy.deepcopy(REPO_PARAMS)
    p["continual"]["replay"].update(replay)
    return p


def test_params_read_the_policy_and_refuse_a_bad_one_in_one_line():
    assert REPO_PARAMS["continual"]["replay"]["policy"] == "uniform"  # the default, written out
    absent = _params()
    del absent["continual"]["replay"]["policy"]
    validate(absent)
    assert experiment_params(absent).settings.continual.replay_policy == "uniform"
    assert experiment_params(_params(policy="proportional")).settings.continual.replay_policy == "proportional"
    for bad in ("stratified", 1, True):
        with pytest.raises(ConfigError) as schema:
            validate(_params(policy=bad))
        assert str(schema.value).startswith("params.yaml: continual.replay.policy: expected one of uniform, proportional")
        assert "\n" not in str(schema.value)
        with pytest.raises(ConfigError, match=r"^params.yaml: 'continual.replay.policy' must be one of uniform, "
                                              r"proportional, got [^\n]+$"):
            experiment_params(_params(policy=bad))


def test_the_trial_key_names_the_policy_only_when_it_is_not_the_default():
    replay = Method("fedclip", "replay")
    default = Settings().used_by(replay, True)
    assert "replay_policy" not in default  # default trials keep their keys
    prop = Settings(continual={"replay_policy": "proportional"})
    assert prop.used_by(replay, True) == {**default, "replay_policy": "proportional"}
    assert "replay_policy" not in prop.used_by(Method("fedclip", "naive"), True)
