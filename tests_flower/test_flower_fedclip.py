"""The FedCLIP Flower app (esnfed_flower.fedclip) in Flower's simulation engine gives the in-process
pipeline's (esnfed_core.continual.run_continual) per-context (g, b) and readouts bit for bit, naive
and replay: 3 contexts, 2 IP rounds each, 2 local epochs, clients with no windows at a context
(they sit it out; under replay, one trains on its buffer there); SecAgg+ replay to quantization.
Same seeds, partition order, core functions and array shapes on both sides (the stateless
ClientApps rebuild their generators and buffers with esnfed_core.continual.LocalClient.at); replay
with the readout bias too (run config ``readout-bias``: readouts (C, N+1))."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from esnfed_core.continual import ALGORITHM, ContinualConfig, make_strategy, run_continual  # noqa: E402
from esnfed_core.messages import CommLedger  # noqa: E402
from esnfed_core.plasticity import IPConfig  # noqa: E402
from esnfed_core.method import Method  # noqa: E402
from esnfed_core.trial import continual_contexts, make_reservoir  # noqa: E402
from experiment_data import trial_data  # noqa: E402
from test_flower_apps import _flower_rounds as flower_rounds, _ledger_rounds as ledger_rounds  # noqa: E402

CFG = {"units": 10, "spectral_radius": 0.9, "leak": 0.5, "input_scaling": 0.8}
BUDGET, EPOCHS, LAM = 2, 2, 1e-3
SITS_OUT = {1: 0, 2: 1}  # client: the context where it has no windows
PATIENCE, MAX_ROUNDS = 2, 4  # joint: stops early at some context, keeps a later round at another (asserted)


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The training users' streams of three contexts (6 windows each; client 1 none at context 0,
    client 2 none at context 1), written as the app reads them."""
    return _streams(tmp_path_factory.mktemp("fedclip"), SITS_OUT)


@pytest.fixture(scope="module")
def everyone(tmp_path_factory):
    """As ``setup`` with windows for every client at every context: SecAgg+ with client sampling
    (0.75 of 4) then has its minimum of 3 clients in every IP round."""
    return _streams(tmp_path_factory.mktemp("fedclip-everyone"), {})


def _streams(root: Path, sits_out: dict[int, int]):
    """The streams, written to ``root``; client i has no windows at context ``sits_out[i]``."""
    data, _ = trial_data(pct="100", windows_per_context=6)
    train = []
    for i, u in enumerate(data.train.values()):
        if i in sits_out:
            u = u.select(u.context != sits_out[i])
        np.savez(root / f"client-{i}.npz", x=u.x, y=u.y, context=u.context)
        train.append([(u.of_context(t).x, u.of_context(t).y) for t in range(data.n_contexts)])
    for j, u in enumerate(data.validation.values()):  # joint's evaluation nodes, after the training ones
        np.savez(root / f"client-{len(train) + j}.npz", x=u.x, y=u.y, context=u.context)
    return root, data, train


def _flower(root: Path, data, strategy: str, simulation, secagg: bool = False, drop: int | None = None,
            replay: dict | None = None, bias: bool = False, fraction: float = 1.0,
            drop_round: int | None = None) -> dict:
    """The app's per-context arrays and ``sent``: the partitions each IP round (0, 1, ... over the
    run) went to; ``replay``: run-config keys over the defaults (replay-fraction, replay-policy);
    ``bias``: the run config's readout-bias (readout.bias); ``fraction``: its client-fraction
    (federated.client_fraction, present only below 1); ``drop``: the partition that drops out at
    SecAgg+'s masked-vector stage of every round, or with ``drop_round`` of that round only."""
    from esnfed_flower import fedclip, fedclip_joint, secagg_fedclip

    app = secagg_fedclip if secagg else fedclip_joint if strategy == "joint" else fedclip
    n_eval = len(data.validation) if strategy == "joint" else 0
    out = root / (f"{strategy}{'-secagg' if secagg else ''}{'' if drop is None else f'-drop{drop}'}"
                  f"{'' if drop_round is None else f'-round{drop_round}'}"
                  f"{''.join(f'-{v}' for v in (replay or {}).values())}{'-bias' if bias else ''}"
                  f"{'' if fraction == 1 else f'-f{fraction}'}.npy")
    bytes_dir = root / f"{out.stem}-bytes"
    bytes_dir.mkdir()
    steps = max(u.x.shape[0] * u.x.shape[1] for u in data.train.values())  # SecAgg+'s max-weight
    run = {"max-weight": float(steps), **CFG, "reservoir-seed": 5, "n-classes": data.n_classes, "n-inputs": data.n_inputs,
           "n-contexts": data.n_contexts, "num-clients": len(data.train), "strategy": strategy,
           "secagg-min-survivors": 2,  # 4 clients: a simulation below the deployment bound
           "budget": BUDGET, "replay-fraction": 0.2, "replay-batch": 2, "replay-shuffle": False,
           "sigma": 0.3, "mu": 0.0, "eta": 0.01, "ip-batch-size": 4, "ip-normalize-step": True,
           "ip-seed": 9, "local-epochs": EPOCHS, "lambda": LAM, "solver": "cholesky",
           "patience": PATIENCE, "max-joint-rounds": MAX_ROUNDS, "num-eval-clients": n_eval,
           "data-dir": str(root), "out": str(out), **({} if drop is None else {"drop-partition": drop}),
           **({} if drop_round is None else {"drop-round": drop_round}),
           **(replay or {}), **({"readout-bias": True} if bias else {}),
           **({} if fraction == 1 else {"client-fraction": fraction}), "bytes-dir": str(bytes_dir)}
    (root / f"{out.stem}.json").write_text(json.dumps(run))  # to read when a test fails
    client_app = app.client_app if drop is None else app.dropout_client_app
    simulation(app.server_app, client_app, len(data.train) + n_eval, run)  # the module's Ray session
    with np.load(str(out) + ".contexts.npz") as f:
        got = {k: f[k] for k in f.files}
    np.testing.assert_array_equal(np.load(out), got["readout"][-1])
    got["sent"] = _ip_rounds(bytes_dir, "fedclip-joint" if strategy == "joint" else f"fedclip-{strategy}")
    return got


def _ip_rounds(bytes_dir: Path, app: str) -> list[set[int]]:
    """The partitions measure_mod saw an IP message to, per IP round in run order (the groups
    esnfed_flower.run.phase calls "ip")."""
    from esnfed_flower.run import phase

    return [c for g, c in sorted(flower_rounds(bytes_dir).items()) if phase(app, g, BUDGET) == "ip"]


def _ledger_rounds(ledger: CommLedger) -> list[set[int]]:
    """The clients (c<i>: partition i) the pipeline's ledger sends (g, b) to, per IP round."""
    return [c for _, c in sorted(ledger_rounds(ledger, ALGORITHM).items())]


def _pipeline(data, train, strategy: str, replay_fraction: float = 0.2, replay_policy: str = "uniform",
              bias: bool = False, fraction: float = 1.0, ledger: CommLedger | None = None):
    res = make_reservoir(CFG, data.n_inputs, 5)
    strat = make_strategy(strategy, budget=BUDGET, replay_fraction=replay_fraction, replay_batch=2,
                          replay_policy=replay_policy, patience=PATIENCE, max_joint_rounds=MAX_ROUNDS)
    config = ContinualConfig(True, IPConfig(sigma=0.3, batch_size=4), data.n_classes, local_epochs=EPOCHS,
                             lam=LAM, seed=9, bias=bias, client_fraction=fraction)
    validation = continual_contexts(Method.parse("fedclip-joint"), data)[1]  # user by user, as a trial
    return run_continual(res, train, strat, config, validation=validation if strategy == "joint" else None,
                         ledger=ledger, client_names=[f"c{i}" for i in range(len(train))])


def _assert_sampled(got: dict, ledger: CommLedger, fraction: float) -> None:
    """Below 1, the Flower run's IP rounds went to the pipeline's clients, round by round: at
    most max(1, ⌊fraction · 4⌋) of the 4 clients, not the same ones every round. At 1 every
    round goes to every node (one that sits the context out replies with no vector; the ledger
    counts the participants only)."""
    sent = _ledger_rounds(ledger)
    assert len(got["sent"]) == len(sent) > 0
    if fraction < 1:
        assert got["sent"] == sent
        assert len(set(map(frozenset, sent))) > 1 and max(map(len, sent)) <= max(1, int(fraction * 4))
    else:
        assert all(g == {0, 1, 2, 3} and s <= g for g, s in zip(got["sent"], sent))


@pytest.mark.parametrize(("strategy", "bias", "fraction"),
                         [("naive", False, 1.0), ("replay", False, 1.0), ("replay", True, 1.0),
                          ("naive", False, 0.5), ("replay", False, 0.5)])
def test_fedclip_app_equals_the_pipeline(setup, strategy, bias, fraction, simulation):
    """Every participant in every IP round, or (fraction 0.5) the pipeline's sampled ones: the
    stateless clients replay only the rounds they fitted; the same IP messages round by round."""
    root, data, train = setup
    got = _flower(root, data, strategy, simulation, bias=bias, fraction=fraction)
    ledger = CommLedger()
    want = _pipeline(data, train, strategy, bias=bias, fraction=fraction, ledger=ledger)
    _assert_sampled(got, ledger, fraction)
    if fraction < 1:  # sampling changed the model: the comparison is not the full run's
        assert not np.allclose(want.readouts[-1], _pipeline(data, train, strategy, bias=bias).readouts[-1])
    assert got["gain"].shape == (data.n_contexts, CFG["units"])
    assert got["readout"].shape == (data.n_contexts, data.n_classes, CFG["units"] + bias)
    for t in range(data.n_contexts):
        np.testing.assert_array_equal(got["gain"][t], want.reservoirs[t].gain)
        np.testing.assert_array_equal(got["bias"][t], want.reservoirs[t].bias)
        np.testing.assert_array_equal(got["readout"][t], want.readouts[t])
    # Not vacuous: (g, b) move from context to context.
    assert not np.allclose(want.reservoirs[0].gain, want.reservoirs[1].gain)
    if strategy == "replay":
        assert want.buffer_sizes[1][2] > 0  # client 2 trains on its buffer at context 1


def test_fedclip_replay_app_equals_the_pipeline_under_the_proportional_policy(setup, simulation):
    """continual.replay.policy proportional reaches the app's clients (run config "replay-policy"),
    whose rebuilt buffers are the pipeline's: the same bits. 60 % of each client's windows buffered
    (capacity 10 over contexts of 6): before the last context proportional keeps 5 + 5 where uniform
    keeps another split, so the pipeline's uniform run differs (not vacuous)."""
    root, data, train = setup
    got = _flower(root, data, "replay", simulation,
                  replay={"replay-fraction": 0.6, "replay-policy": "proportional"})
    want = _pipeline(data, train, "replay", replay_fraction=0.6, replay_policy="proportional")
    for t in range(data.n_contexts):
        np.testing.assert_array_equal(got["gain"][t], want.reservoirs[t].gain)
        np.testing.assert_array_equal(got["bias"][t], want.reservoirs[t].bias)
        np.testing.assert_array_equal(got["readout"][t], want.readouts[t])
    uniform = _pipeline(data, train, "replay", replay_fraction=0.6)
    assert not np.allclose(uniform.readouts[-1], want.readouts[-1], rtol=1e-3, atol=0)


@pytest.mark.parametrize("fraction", [1.0, 0.5])
def test_fedclip_joint_app_equals_the_pipeline(setup, simulation, fraction):
    """Joint: the validation users are evaluation nodes; the per-context (g, b) and readouts, the
    rounds kept (ip_rounds) and run, and every round's validation accuracy are the pipeline's.
    Client 1 has no windows at context 0 and sits it out. Fraction 0.5: the sampled IP rounds too."""
    root, data, train = setup
    got = _flower(root, data, "joint", simulation, fraction=fraction)
    ledger = CommLedger()
    want = _pipeline(data, train, "joint", fraction=fraction, ledger=ledger)
    _assert_sampled(got, ledger, fraction)
    for t in range(data.n_contexts):
        np.testing.assert_array_equal(got["gain"][t], want.reservoirs[t].gain)
        np.testing.assert_array_equal(got["bias"][t], want.reservoirs[t].bias)
        np.testing.assert_array_equal(got["readout"][t], want.readouts[t])
    assert got["ip_rounds"].tolist() == want.ip_rounds
    assert got["rounds"].tolist() == [len(tr) for tr in want.joint_trace]
    np.testing.assert_array_equal(got["trace"], np.concatenate(want.joint_trace))
    assert got["capped"].tolist() == want.joint_capped
    if fraction < 1:
        return
    assert True in want.joint_capped  # the set cap fired
    # Not vacuous: early stopping stopped some context before the max rounds, the kept round is
    # not always the last one run nor always the first, and the rounds run differ between contexts
    # (the training clients' history).
    assert min(got["rounds"]) < MAX_ROUNDS
    assert any(u < len(tr) for u, tr in zip(want.ip_rounds, want.joint_trace))
    assert max(want.ip_rounds) > 1 and len(set(got["rounds"].tolist())) > 1
    assert len(set(np.concatenate(want.joint_trace).tolist())) > 1


def test_fedclip_joint_app_has_no_cap_unless_the_run_config_sets_one():
    """PROTOCOL §5: a run config without max-joint-rounds (params.yaml's null) stops on patience
    alone, as the pipeline's default Joint; a set one caps it."""
    from esnfed_flower.fedclip import setup as app_setup

    cfg = {"strategy": "joint", "n-classes": 3, "local-epochs": 1, "lambda": LAM, "ip-seed": 9, "sigma": 0.3,
           "mu": 0.0, "eta": 0.01, "ip-batch-size": 4, "ip-normalize-step": True}
    assert app_setup(cfg, ("joint",))[0].max_rounds is None
    assert app_setup({**cfg, "max-joint-rounds": MAX_ROUNDS}, ("joint",))[0].max_rounds == MAX_ROUNDS


def _quantization_bound(steps: list[int]) -> float:
    """As SecAgg+ FedIP (test_flower_apps): one round's mean update is off by at most
    K·2/2^22·max n/Σ n (K clients' stochastic rounding of n_c/max-weight · Δ_c)."""
    return len(steps) * 2 / 2**22 * max(steps) / sum(steps)


@pytest.mark.parametrize(("bias", "fraction"), [(False, 1.0), (True, 1.0), (False, 0.75)])
def test_secaggplus_fedclip_replay_equals_the_pipeline_to_quantization(request, simulation, bias, fraction):
    """Every client, or (fraction 0.75, clients with windows at every context) the pipeline's 3
    sampled clients per IP round, SecAgg+ sized to them."""
    root, data, train = request.getfixturevalue("setup" if fraction == 1 else "everyone")
    got = _flower(root, data, "replay", simulation, secagg=True, bias=bias, fraction=fraction)
    ledger = CommLedger()
    want = _pipeline(data, train, "replay", bias=bias, fraction=fraction, ledger=ledger)
    if fraction < 1:
        sent = _ledger_rounds(ledger)
        assert got["sent"] == sent and {len(c) for c in sent} == {3} and len(set(map(frozenset, sent))) > 1
    assert got["readout"].shape == (data.n_contexts, data.n_classes, CFG["units"] + bias)
    steps = [u.x.shape[0] * u.x.shape[1] for u in data.train.values()]
    bound = _quantization_bound(steps)  # 10 bounds per IP round so far, the contexts' rounds chained
    for t in range(data.n_contexts):
        tol = 10 * BUDGET * (t + 1) * bound
        err = max(np.max(np.abs(got["gain"][t] - want.reservoirs[t].gain)),
                  np.max(np.abs(got["bias"][t] - want.reservoirs[t].bias)))
        rel = np.linalg.norm(got["readout"][t] - want.readouts[t]) / np.linalg.norm(want.readouts[t])
        print(f"SecAgg+ FedCLIP context {t}: max |Δ(g, b)| {err:.3g} (tolerance {tol:.3g}), readout {rel:.3g}")
        assert err < tol
        assert 0 < rel < 1e-3  # the statistics' quantization through the solve (SecAgg+ IncFed: < 1e-3)
    moved = np.max(np.abs(want.reservoirs[-1].gain - make_reservoir(CFG, data.n_inputs, 5).gain))
    assert moved > 100 * 10 * BUDGET * data.n_contexts * bound  # IP moved (g, b) far beyond the tolerance


def test_secaggplus_fedclip_survives_a_dropout_in_every_round(setup, simulation):
    """Client 0 shares its keys and then drops at the masked-vector stage of every round (IP and
    readout rounds of every context): each round completes with the survivors' sum, so the run is
    the pipeline's FedCLIP over the other clients (to quantization), not over everyone."""
    root, data, train = setup
    got = _flower(root, data, "replay", simulation, secagg=True, drop=0)
    survivors = _pipeline(data, train[1:], "replay")
    everyone = _pipeline(data, train, "replay")
    users = list(data.train.values())
    bound = _quantization_bound([u.x.shape[0] * u.x.shape[1] for u in users[1:]])
    for t in range(data.n_contexts):
        tol = 10 * BUDGET * (t + 1) * bound
        err = max(np.max(np.abs(got["gain"][t] - survivors.reservoirs[t].gain)),
                  np.max(np.abs(got["bias"][t] - survivors.reservoirs[t].bias)))
        assert err < tol
        rel = np.linalg.norm(got["readout"][t] - survivors.readouts[t]) / np.linalg.norm(survivors.readouts[t])
        assert rel < 1e-3
    # The survivors' run, not everyone's: client 0's windows move (g, b) well beyond the tolerance
    # (as SecAgg+ FedIP's dropout test: > 10 tolerances; measured ~70).
    assert np.max(np.abs(got["gain"][-1] - everyone.reservoirs[-1].gain)) > 10 * tol


def _hand_naive(data, train, lost: set[tuple[int, int]] = frozenset(), lost_fits: bool = False):
    """SecAgg+ FedCLIP naive by hand from the core's round (esnfed_core.plasticity.fedip_round):
    per context ``BUDGET`` IP rounds (numbered 1, 2, ... over the run, as the legacy rounds without
    the readout rounds), each averaging (weights: windows at the context) the local fits of the
    clients with windows there, except those whose (client, IP round) is in ``lost``, each client
    with its own long-lived generator seeded with the IP seed (esnfed_core.continual.stream_client);
    then IncFed over the context's clients. ``lost_fits``: a lost client's generator moves anyway
    (what replaying the round index would give). Per context: (reservoir, readout)."""
    from esnfed_core.federated import Client, incfed
    from esnfed_core.plasticity import fedip_round, ip_epoch

    cfg = IPConfig(sigma=0.3, batch_size=4)
    res = make_reservoir(CFG, data.n_inputs, 5)
    rngs = [np.random.default_rng(9) for _ in train]

    def local(i, t):
        def fit(start):
            for _ in range(EPOCHS):
                start = ip_epoch(start, train[i][t][0], cfg, rngs[i])
            return start
        return fit

    out, k = [], 0
    for t in range(data.n_contexts):
        part = [i for i in range(len(train)) if len(train[i][t][0])]
        for _ in range(BUDGET):
            k += 1
            kept = [i for i in part if (i, k) not in lost]
            res = fedip_round(res, [local(i, t) for i in kept], [len(train[i][t][0]) for i in kept],
                              [f"c{i}" for i in kept])
            if lost_fits:
                for i in set(part) - set(kept):
                    local(i, t)(res)  # the fit it never sent: only its generator's move matters
        clients = [Client(f"c{i}", *train[i][t], data.n_classes) for i in part]
        out.append((res, incfed(res, clients, [LAM]).readouts[0]))
    return out


def test_secaggplus_fedclip_replays_its_own_fits_after_a_dropout_at_fraction_1(setup, simulation):
    """Naive, every client in every round (fraction 1, threshold 3 of 4): client 0 drops at the
    masked-vector stage of the run's first round (context 0's first IP round) only. That round
    completes with the 3 survivors (client 1, without windows at context 0, sends zeros); the
    server then sends client 0 its own fits (``round`` 0 in the next round, ``history`` 1 at
    context 0 afterwards), so every context's (g, b) is the hand-built FedCLIP whose first round
    averages the others, each client with its own long-lived generator, to the tolerance of the
    full runs; the hand-built run whose lost round moved client 0's generator lies far away."""
    root, data, train = setup
    assert all(len(train[0][t][0]) for t in range(data.n_contexts))  # client 0 trains at every context
    got = _flower(root, data, "naive", simulation, secagg=True, drop=0, drop_round=1)
    want = _hand_naive(data, train, {(0, 1)})
    counted = _hand_naive(data, train, {(0, 1)}, lost_fits=True)
    bound = _quantization_bound([u.x.shape[0] * u.x.shape[1] for u in data.train.values()])
    for t, (res, readout) in enumerate(want):
        tol = 10 * BUDGET * (t + 1) * bound
        err = max(np.max(np.abs(got["gain"][t] - res.gain)), np.max(np.abs(got["bias"][t] - res.bias)))
        off = max(np.max(np.abs(counted[t][0].gain - res.gain)), np.max(np.abs(counted[t][0].bias - res.bias)))
        rel = np.linalg.norm(got["readout"][t] - readout) / np.linalg.norm(readout)
        print(f"f = 1 SecAgg+ FedCLIP naive, round-1 dropout, context {t}: max |Δ(g, b)| {err:.3g} "
              f"(tolerance {tol:.3g}), readout {rel:.3g}; a counted dropout's run lies {off:.3g} away")
        assert err < tol
        assert off > 10 * tol  # the comparison tells the two apart at every context
        assert rel < 1e-3  # the statistics' quantization through the solve (SecAgg+ IncFed: < 1e-3)


def _hand_replay(data, train, sets: list[list[int]], lost: set[tuple[int, int]] = frozenset(),
                 lost_fits: bool = False):
    """SecAgg+ FedCLIP replay by hand: each client a long-lived esnfed_core.continual.LocalClient
    (its own shuffle generator seeded with the IP seed and its own replay buffer, updated after each
    context by the strategy), fitted only in the IP rounds it was sampled in and not lost. IP round
    k (1, 2, ... over the run; ``sets[k - 1]``: its sampled clients) averages with fedip_round
    (weights: the clients' FedAvg weights at the context, |D_t,c| + |M_t,c|) the fits of the
    sampled clients except those whose (client, k) is in ``lost``; ``lost_fits``: a lost client's
    generator moves anyway (what a server counting its fit would make it replay). Then IncFed over
    the context's data (D_t ∪ M_t). Per context: (reservoir, readout)."""
    from esnfed_core.continual import LocalClient
    from esnfed_core.federated import Client, incfed
    from esnfed_core.plasticity import fedip_round

    strat = make_strategy("replay", budget=BUDGET, replay_fraction=0.2, replay_batch=2)
    config = ContinualConfig(True, IPConfig(sigma=0.3, batch_size=4), data.n_classes, local_epochs=EPOCHS,
                             lam=LAM, seed=9)
    clients = [LocalClient(strat, config, list(train[i]), f"c{i}") for i in range(len(train))]
    res = make_reservoir(CFG, data.n_inputs, 5)
    out, k = [], 0
    for t in range(data.n_contexts):
        for _ in range(BUDGET):
            k += 1
            kept = [i for i in sets[k - 1] if (i, k) not in lost]
            res = fedip_round(res, [lambda s, i=i: clients[i].fit(s, t) for i in kept],
                              [clients[i].weight(t) for i in kept], [f"c{i}" for i in kept])
            if lost_fits:
                for i in set(sets[k - 1]) - set(kept):
                    clients[i].fit(res, t)  # the fit it never sent: only its generator's move matters
        part = [Client(f"c{i}", *clients[i].data(t), data.n_classes) for i in range(len(train))
                if clients[i].takes_part(t)]
        out.append((res, incfed(res, part, [LAM]).readouts[0]))
        for c in clients:
            strat.end_context(c.client, t)
    return out


def test_secaggplus_fedclip_replay_replays_its_own_fits_after_a_dropout_in_a_sampled_round(everyone, simulation):
    """Replay at fraction 0.75 (3 of 4 clients each IP round, threshold 2; every client has windows
    at every context): client 0, sampled in IP rounds 1 to 5, drops at the masked-vector stage of
    the run's first round only. That round completes with its 2 survivors; the server counts only
    the fits that made the sum, so client 0's next message carries ``round`` 0 at context 0 and
    ``history`` 1 afterwards, and every context's (g, b) is the hand-built replay FedCLIP (each
    client its own long-lived generator and buffer, fitted only when sampled and not lost) to the
    full runs' tolerance; the hand-built run whose lost round moved client 0's generator, and the
    sampled pipeline without a dropout, lie far away."""
    from esnfed_core.sampling import sample_clients

    root, data, train = everyone
    fraction, drop = 0.75, 0
    sets = [sample_clients(len(train), fraction, 9, k) for k in range(BUDGET * data.n_contexts)]
    assert all(drop in s for s in sets[:5]) and len(sets[0]) - 1 >= 2  # sampled again; survivors at the threshold
    got = _flower(root, data, "replay", simulation, secagg=True, drop=drop, drop_round=1, fraction=fraction)
    assert got["sent"] == [set(s) for s in sets]  # the sampled sets reached (client 0 in round 1 too)
    want = _hand_replay(data, train, sets, {(drop, 1)})
    counted = _hand_replay(data, train, sets, {(drop, 1)}, lost_fits=True)
    nodrop = _pipeline(data, train, "replay", fraction=fraction)
    bound = _quantization_bound([u.x.shape[0] * u.x.shape[1] for u in data.train.values()])
    for t, (res, readout) in enumerate(want):
        # as the full runs': 10 quantization bounds per IP round so far, the contexts' rounds chained
        # (a sampled round of 3 clients rounds less than the bound over all 4)
        tol = 10 * BUDGET * (t + 1) * bound
        err = max(np.max(np.abs(got["gain"][t] - res.gain)), np.max(np.abs(got["bias"][t] - res.bias)))
        off = max(np.max(np.abs(counted[t][0].gain - res.gain)), np.max(np.abs(counted[t][0].bias - res.bias)))
        away = max(np.max(np.abs(nodrop.reservoirs[t].gain - res.gain)),
                   np.max(np.abs(nodrop.reservoirs[t].bias - res.bias)))
        rel = np.linalg.norm(got["readout"][t] - readout) / np.linalg.norm(readout)
        print(f"sampled SecAgg+ FedCLIP replay, round-1 dropout, context {t}: max |Δ(g, b)| {err:.3g} "
              f"(tolerance {tol:.3g}), readout {rel:.3g}; a counted dropout's run lies {off:.3g} away, "
              f"the run without a dropout {away:.3g}")
        assert err < tol
        assert off > 10 * tol and away > 10 * tol  # the comparison tells them apart at every context
        assert rel < 1e-3  # the statistics' quantization through the solve (SecAgg+ IncFed: < 1e-3)
