"""The Flower apps (esnfed_flower) in Flower's simulation engine equal the in-process pipeline:
IncFed's readout to float rounding, FedIP's (g, b) and readout bit for bit (same seeds, partition
order and core functions), with and without the readout bias (run config ``readout-bias``,
params.yaml readout.bias: readouts (C, N+1)). Runs in the Flower environment (`make test-flower`), not the main one:
flwr 1.42 cannot be installed beside this project's typer/rich/protobuf pins (docs/flower-apps.md)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from esnfed_core.federated import Client, incfed  # noqa: E402
from esnfed_core.federated import fedip  # noqa: E402
from esnfed_core.messages import CommLedger  # noqa: E402
from esnfed_core.plasticity import IPConfig  # noqa: E402
from esnfed_core.trial import make_reservoir  # noqa: E402
from experiment_data import trial_data  # noqa: E402
from time_limit import time_limit  # noqa: E402

CFG = {"units": 10, "spectral_radius": 0.9, "leak": 0.5, "input_scaling": 0.8}
SEED = 5  # the reservoir's
LAM = 1e-3
IP = {"sigma": 0.3, "mu": 0.0, "eta": 0.01, "ip-batch-size": 4, "ip-seed": 9, "local-epochs": 2, "rounds": 3}


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("flower")
    data, _ = trial_data(pct="100")
    users = list(data.train.values())
    for i, u in enumerate(users):
        np.savez(root / f"client-{i}.npz", x=np.asarray(u.x), y=np.asarray(u.y))
    return root, data, users


def _simulate(app_module, root: Path, run: dict, n: int, simulation, *, dropout: bool = False,
              config: str = "run.json") -> None:
    """``app_module``'s ServerApp and ClientApp (its dropout_client_app with ``dropout``) on ``n``
    nodes in the module's Ray session (conftest.py's ``simulation``), with ``run`` as the run config
    (also written to ``root / config``, to read when a test fails)."""
    (root / config).write_text(json.dumps(run))
    client = app_module.dropout_client_app if dropout else app_module.client_app
    simulation(app_module.server_app, client, n, run)


def bounded(seconds: int):
    """A test of a run that must stop fails after ``seconds`` instead of hanging (tests/time_limit.py)."""
    return time_limit(seconds, TimeoutError(f"the simulation ran past {seconds} s"))


# The tests' federations have 4 clients: SecAgg+ runs are simulations below the deployment bound.
SIMULATION = {"secagg-min-survivors": 2}


def _run_config(root, data, out, **extra):
    return {**CFG, "reservoir-seed": SEED, "n-classes": data.n_classes, "batch-size": 5, "lambda": LAM,
            "data-dir": str(root), "out": str(out), "n-inputs": data.n_inputs, "num-clients": len(data.train),
            **SIMULATION, **extra}


def _max_weight(users) -> dict:
    """SecAgg+'s max-weight: the largest client's steps, a public bound of n_steps."""
    return {"max-weight": float(max(u.x.shape[0] * u.x.shape[1] for u in users))}


def _clients(data, users, bias: bool = False):
    """The pipeline's IncFed clients over the same users as the apps' ClientApps (``bias``:
    readout.bias's augmented statistics)."""
    return [Client(f"c{i}", u.x, u.y, data.n_classes, batch_size=5, bias=bias) for i, u in enumerate(users)]


def _bias(bias: bool) -> dict:
    """The run config's readout-bias key: present only with the bias (as esnfed_stages.studies.flower's)."""
    return {"readout-bias": True} if bias else {}


def _plain_fedip(data, users, bias: bool = False, fraction: float = 1.0, ledger: CommLedger | None = None):
    """The pipeline's FedIP (``IP``'s settings, ``fraction`` of the clients per round) and IncFed on
    its reservoir: (initial reservoir, trained reservoir, readout)."""
    res = make_reservoir(CFG, data.n_inputs, SEED)
    trained = fedip(res, [u.x for u in users], IPConfig(sigma=0.3, batch_size=4), rounds=3, local_epochs=2, seed=9,
                    ledger=ledger, client_names=[f"c{i}" for i in range(len(users))], client_fraction=fraction)
    return res, trained, incfed(trained, _clients(data, users, bias), [LAM]).readouts[0]


def _fraction(fraction: float) -> dict:
    """The run config's client-fraction key: present only below 1 (as esnfed_stages.studies.flower's)."""
    return {} if fraction == 1.0 else {"client-fraction": fraction}


def _flower_rounds(bytes_dir: Path) -> dict[int, set[int]]:
    """The partitions measure_mod saw a message to, by round (group id; 0: the role query)."""
    out: dict[int, set[int]] = {}
    for f in bytes_dir.glob("client-*.jsonl"):
        for line in f.read_text().splitlines():
            r = json.loads(line)
            out.setdefault(int(r["round"]), set()).add(int(r["partition"]))
    return out


def _ledger_rounds(ledger: CommLedger, algorithm: str) -> dict[int, set[int]]:
    """The clients (c<i>: partition i) the pipeline's ledger sends (g, b) to, by round."""
    out: dict[int, set[int]] = {}
    for e in ledger.entries:
        if e.algorithm == algorithm and e.kind == "PlasticityMessage" and e.direction == "down":
            out.setdefault(e.round, set()).add(int(e.client[1:]))
    return out


@pytest.mark.parametrize("bias", [False, True])
def test_incfed_app_equals_the_pipeline(setup, simulation, bias):
    from esnfed_flower import incfed as app

    root, data, users = setup
    out = root / f"incfed-{bias}.npy"
    _simulate(app, root, _run_config(root, data, out, **_bias(bias)), len(users), simulation)
    expected = incfed(make_reservoir(CFG, data.n_inputs, SEED), _clients(data, users, bias), [LAM]).readouts[0]
    assert expected.shape == (data.n_classes, CFG["units"] + bias)
    # Same sums in the same order from the same float32 products of the same shapes: equal bits
    # (one BLAS thread here, conftest.py, as in the Ray workers and the pipeline's trials).
    np.testing.assert_array_equal(np.load(out), expected)


def test_a_simulation_runs_on_the_actors_the_last_one_left_idle(setup, simulation, monkeypatch):
    """The module's Ray session starts its ClientApp actors once (esnfed_flower.session): after a
    first simulation, a second one with the same client resources creates no actor, and its
    readout is still the pipeline's."""
    from flwr.simulation.ray_transport.ray_actor import BasicActorPool

    from esnfed_flower import incfed as app

    root, data, users = setup
    _simulate(app, root, _run_config(root, data, root / "kept-0.npy"), len(users), simulation)
    created = []
    add = BasicActorPool.add_actors_to_pool
    monkeypatch.setattr(BasicActorPool, "add_actors_to_pool", lambda pool, n: (created.append(n), add(pool, n))[1])
    _simulate(app, root, _run_config(root, data, root / "kept-1.npy"), len(users), simulation)
    assert created == []
    expected = incfed(make_reservoir(CFG, data.n_inputs, SEED), _clients(data, users), [LAM]).readouts[0]
    np.testing.assert_array_equal(np.load(root / "kept-1.npy"), expected)


def test_a_sparse_reservoir_reaches_every_client(setup, simulation):
    """A run config with a connectivity (docs/protocol.md §2, sparse reservoirs): the server passes
    it on and every client rebuilds the same sparse reservoir, so IncFed is the pipeline's again."""
    from esnfed_flower import incfed as app

    root, data, users = setup
    sparse = {"input_connectivity": 40, "recurrent_connectivity": 20}
    out = root / "incfed-sparse.npy"
    _simulate(app, root, _run_config(root, data, out, **sparse), len(users), simulation)
    res = make_reservoir({**CFG, **sparse}, data.n_inputs, SEED)
    assert np.count_nonzero(res.w) == 20 and np.count_nonzero(res.w_in) == round(0.4 * res.w_in.size)
    expected = incfed(res, _clients(data, users), [LAM]).readouts[0]
    np.testing.assert_array_equal(np.load(out), expected)
    dense = incfed(make_reservoir(CFG, data.n_inputs, SEED), _clients(data, users), [LAM]).readouts[0]
    assert not np.allclose(expected, dense)  # the comparison is not the dense one's


@pytest.mark.parametrize(("bias", "fraction"), [(False, 1.0), (True, 1.0), (False, 0.5), (True, 0.5)])
def test_fedip_app_equals_the_pipeline(setup, simulation, bias, fraction):
    """Every client in every round, or (fraction 0.5 of 4) the pipeline's sampled pairs: the same
    (g, b), readout and IP messages (round by round, the same clients)."""
    from esnfed_flower import fedip as app

    root, data, users = setup
    out = root / f"fedip-{bias}-{fraction}.npy"
    bytes_dir = root / f"fedip-{bias}-{fraction}-bytes"
    bytes_dir.mkdir()
    _simulate(app, root, _run_config(root, data, out, **IP, **_bias(bias), **_fraction(fraction),
                                     **{"bytes-dir": str(bytes_dir)}), len(users), simulation)
    ledger = CommLedger()
    res, trained, expected = _plain_fedip(data, users, bias, fraction, ledger)
    sent = _ledger_rounds(ledger, "fedip")
    assert len(sent) == IP["rounds"] and all(len(c) == len(users) * min(fraction, 1) for c in sent.values())
    flower = _flower_rounds(bytes_dir)
    assert {r - 1: c for r, c in flower.items() if 1 <= r <= IP["rounds"]} == sent
    assert (0 in flower) == (fraction < 1)  # the role query only when sampling
    # The stage's summary (esnfed_flower.run): the IP messages are the ledger's, each client-round
    # averaged over the messages sent (not over every client when sampling).
    from esnfed_flower.run import summarise

    records = [json.loads(line) for f in bytes_dir.glob("client-*.jsonl") for line in f.read_text().splitlines()]
    rows = {r["phase"]: r for r in summarise(records, "fedip", IP["rounds"], len(users), sampled=fraction < 1)["rows"]}
    assert set(rows) == ({"ip", "stats"} | ({"role"} if fraction < 1 else set()))
    ip_up = sum(r["up"] for r in records if 1 <= int(r["round"]) <= IP["rounds"])
    assert rows["ip"]["messages"] == sum(map(len, sent.values())) and rows["ip"]["rounds"] == IP["rounds"]
    assert rows["ip"]["up_per_client_round"] == pytest.approx(ip_up / rows["ip"]["messages"], rel=1e-12)
    assert rows["stats"]["messages"] == len(users)
    if fraction < 1:
        assert len(set(map(frozenset, sent.values()))) > 1  # the rounds sampled different clients
        assert not np.allclose(trained.gain, _plain_fedip(data, users)[1].gain)  # sampling changed (g, b)
    got = np.load(str(out) + ".ip.npz")
    np.testing.assert_array_equal(got["gain"], trained.gain)
    np.testing.assert_array_equal(got["bias"], trained.bias)
    assert not np.allclose(trained.gain, res.gain)  # IP moved (g, b): the comparison is not vacuous
    np.testing.assert_array_equal(np.load(out), expected)


@pytest.mark.parametrize("bias", [False, True])
def test_secaggplus_incfed_equals_the_pipeline_to_quantization(setup, simulation, bias):
    from esnfed_flower import secagg as app

    root, data, users = setup
    out = root / f"secagg-{bias}.npy"
    _simulate(app, root, _run_config(root, data, out, **_max_weight(users), **_bias(bias)), len(users), simulation,
              config=f"run-secagg-{bias}.json")
    res = make_reservoir(CFG, data.n_inputs, SEED)
    plain = incfed(res, _clients(data, users, bias), [LAM])
    assert plain.readouts[0].shape == (data.n_classes, CFG["units"] + bias)
    got = np.load(out)
    err = np.linalg.norm(got - plain.readouts[0]) / np.linalg.norm(plain.readouts[0])
    print(f"SecAgg+ relative readout error: {err:.3g}")
    # Quantization: 2/2^22 per mean entry and the weight ratio n_c/max-weight quantized likewise,
    # amplified by cond(B + λI) in the solve. Measured: 6.2e-5 with max-weight = max n_steps,
    # 9.0e-4 with Flower's default max-weight 1000 (a coarser weight ratio); 1e-3 bounds both.
    assert 0 < err < 1e-3
    states = [u.x for u in users]
    from esnfed_core.readout import predict
    from esnfed_core.reservoir import run_batch

    for x in states:
        s = run_batch(res, x)
        assert np.mean(predict(s, got) == predict(s, plain.readouts[0])) > 0.99


def test_secaggplus_survives_a_dropout_after_key_sharing(setup, simulation):
    from esnfed_flower import secagg as app

    root, data, users = setup
    out = root / "secagg-drop.npy"
    _simulate(app, root, _run_config(root, data, out, **_max_weight(users), **{"drop-partition": 1}), len(users),
              simulation, dropout=True, config="run-drop.json")
    res = make_reservoir(CFG, data.n_inputs, SEED)
    everyone = _clients(data, users)
    survivors = [c for i, c in enumerate(everyone) if i != 1]
    got = np.load(out)  # the round completed: the server solved from the unmasked sum
    want = incfed(res, survivors, [LAM]).readouts[0]
    assert np.linalg.norm(got - want) / np.linalg.norm(want) < 1e-3
    full = incfed(res, everyone, [LAM]).readouts[0]
    assert np.linalg.norm(got - full) / np.linalg.norm(full) > 1e-2  # it is the survivors' sum, not all


def _secagg_fedip(root, data, users, simulation, name, **extra):
    """SecAgg+ FedIP in the simulation: (readout, trained gain, bias, out.json)."""
    from esnfed_flower import secagg_fedip as app

    out = root / f"{name}.npy"
    _simulate(app, root, _run_config(root, data, out, **IP, **_max_weight(users), **extra), len(users), simulation,
              dropout="drop-partition" in extra, config=f"{name}.json")
    gb = np.load(str(out) + ".ip.npz")
    return np.load(out), gb["gain"], gb["bias"], json.loads((root / f"{name}.npy.json").read_text())


def _quantization_bound(users) -> float:
    """SecAgg+'s error bound on one round's mean update: K clients' stochastic rounding to
    2·clip/2^22 (clip 1) of n_c/max-weight · Δ_c, divided by Σ n_c/max-weight."""
    steps = [u.x.shape[0] * u.x.shape[1] for u in users]
    return len(users) * 2 / 2**22 * max(steps) / sum(steps)


@pytest.mark.parametrize("fraction", [1.0, 0.75])
def test_secaggplus_fedip_equals_the_pipeline_to_quantization(setup, simulation, fraction):
    """Every client, or (fraction 0.75 of 4) the pipeline's 3 sampled clients a round, each round
    through SecAgg+ sized to them; the statistics round goes to every client."""
    root, data, users = setup
    bytes_dir = root / f"secagg-fedip-{fraction}-bytes"
    bytes_dir.mkdir()
    readout, gain, bias, info = _secagg_fedip(root, data, users, simulation, f"secagg-fedip-{fraction}",
                                              **_fraction(fraction), **{"bytes-dir": str(bytes_dir)})
    ledger = CommLedger()
    res, trained, plain = _plain_fedip(data, users, fraction=fraction, ledger=ledger)
    assert info == {"clients": len(users), "sampled": len(users), "min_clients": len(users) - 1}
    sent = _ledger_rounds(ledger, "fedip")
    assert {r - 1: c for r, c in _flower_rounds(bytes_dir).items() if 1 <= r <= IP["rounds"]} == sent
    assert all(len(c) == (3 if fraction < 1 else len(users)) for c in sent.values())
    if fraction < 1:
        assert len(set(map(frozenset, sent.values()))) > 1  # the rounds sampled different clients
    moved = max(np.max(np.abs(trained.gain - res.gain)), np.max(np.abs(trained.bias - res.bias)))
    assert moved > 1e-3  # IP moved (g, b) well beyond the tolerance below: not vacuous
    # R = 3 rounds of at most one quantization bound each, propagated through the IP epochs
    # (near-identity maps for these small steps): 10·R bounds, well below the IP movement. A
    # round's bound over its sampled clients is at most the one over all here (equal step counts).
    tol = 10 * 3 * _quantization_bound(users)
    err = max(np.max(np.abs(gain - trained.gain)), np.max(np.abs(bias - trained.bias)))
    print(f"SecAgg+ FedIP: max |Δ(g, b)| {err:.3g} (tolerance {tol:.3g}), IP moved {moved:.3g}")
    assert err < tol
    rel = np.linalg.norm(readout - plain) / np.linalg.norm(plain)
    print(f"SecAgg+ FedIP relative readout error: {rel:.3g}")
    assert 0 < rel < 1e-3  # as SecAgg+ IncFed (test above): statistics' quantization through the solve


def test_secaggplus_fedip_survives_a_dropout_after_key_sharing(setup, simulation):
    root, data, users = setup
    readout, gain, bias, info = _secagg_fedip(root, data, users, simulation, "secagg-fedip-drop",
                                              **{"drop-partition": 1})
    assert info == {"clients": len(users) - 1, "sampled": len(users), "min_clients": len(users) - 1}
    survivors = [u for i, u in enumerate(users) if i != 1]
    _, trained, plain = _plain_fedip(data, survivors)
    _, everyone, _ = _plain_fedip(data, users)
    tol = 10 * 3 * _quantization_bound(survivors)
    assert max(np.max(np.abs(gain - trained.gain)), np.max(np.abs(bias - trained.bias))) < tol
    assert np.max(np.abs(gain - everyone.gain)) > 10 * tol  # the survivors' FedIP, not everyone's
    assert np.linalg.norm(readout - plain) / np.linalg.norm(plain) < 1e-3


def _hand_fedip(data, users, sets: list[list[int]], dropped_fits: bool = False):
    """FedIP by hand from the core's round (esnfed_core.plasticity.fedip_round): round r averages
    (weights: windows) the local fits of ``sets[r]`` = (sampled, survivors), each client with its
    own long-lived generator seeded with ``IP``'s seed, as the pipeline's fedip keeps them. A
    sampled client that dropped did not fit, so its generator stays; ``dropped_fits``: it moves
    anyway (what a server counting the dropped client's fit would make it replay next time)."""
    from esnfed_core.plasticity import fedip_round, ip_epoch

    cfg = IPConfig(sigma=0.3, batch_size=4)
    res = make_reservoir(CFG, data.n_inputs, SEED)
    rngs = [np.random.default_rng(IP["ip-seed"]) for _ in users]

    def local(i):
        def fit(start):
            for _ in range(IP["local-epochs"]):
                start = ip_epoch(start, users[i].x, cfg, rngs[i])
            return start
        return fit

    for sampled, survivors in sets:
        res = fedip_round(res, [local(i) for i in survivors], [len(users[i].x) for i in survivors],
                          [f"c{i}" for i in survivors])
        if dropped_fits:
            for i in set(sampled) - set(survivors):
                local(i)(res)  # the fit it never sent: only its generator's move matters
    return res


def test_secaggplus_fedip_survives_a_dropout_in_a_sampled_round(setup, simulation):
    """Fraction 0.75 of 4 (3 a round, threshold 2): client 1 is sampled in rounds 1 and 3 and drops
    at the masked-vector stage of round 1 only. Round 1 completes with its 2 survivors; the
    server's (g, b) is the hand-built FedIP whose round 1 averages exactly the survivors, to the
    quantization tolerance of the full runs; and in round 3 client 1 fits from a generator that
    its lost round did not move (the server counts only the fits that made a sum), which differs
    from the one a counted dropout would give by far more than the tolerance."""
    from esnfed_core.sampling import sample_clients

    root, data, users = setup
    drop, fraction = 1, 0.75
    sampled = [sample_clients(len(users), fraction, IP["ip-seed"], r) for r in range(IP["rounds"])]
    assert drop in sampled[0] and drop not in sampled[1] and drop in sampled[2]  # sampled, out, back
    assert len(sampled[0]) - 1 >= 2  # the survivors reach the threshold max(2, 3 - 1)
    bytes_dir = root / "secagg-fedip-sampled-drop-bytes"
    bytes_dir.mkdir()
    readout, gain, bias, info = _secagg_fedip(root, data, users, simulation, "secagg-fedip-sampled-drop",
                                              **_fraction(fraction), **{"drop-partition": drop, "drop-round": 1,
                                                                        "bytes-dir": str(bytes_dir)})
    assert info == {"clients": len(users), "sampled": len(users), "min_clients": len(users) - 1}  # stats: all
    assert {r - 1: c for r, c in _flower_rounds(bytes_dir).items() if 1 <= r <= IP["rounds"]} == \
        {r: set(c) for r, c in enumerate(sampled)}  # the pipeline's sets reached (the dropped client too)
    sets = [(s, [i for i in s if not (r == 0 and i == drop)]) for r, s in enumerate(sampled)]
    want = _hand_fedip(data, users, sets)
    counted = _hand_fedip(data, users, sets, dropped_fits=True)
    everyone = _plain_fedip(data, users, fraction=fraction)[1]  # no dropout: the pipeline's sampled FedIP
    tol = 10 * 3 * _quantization_bound(users)
    err = max(np.max(np.abs(gain - want.gain)), np.max(np.abs(bias - want.bias)))
    print(f"sampled SecAgg+ FedIP with a dropout: max |Δ(g, b)| {err:.3g} (tolerance {tol:.3g})")
    assert err < tol
    for other in (counted, everyone):  # the comparison tells these apart
        assert max(np.max(np.abs(other.gain - want.gain)), np.max(np.abs(other.bias - want.bias))) > 10 * tol
    plain = incfed(want, _clients(data, users), [LAM]).readouts[0]  # the statistics round: every client
    assert np.linalg.norm(readout - plain) / np.linalg.norm(plain) < 1e-3


def test_two_dropouts_in_a_sampled_secaggplus_round_of_3_stop_the_run_in_one_line(setup, simulation):
    """Fraction 0.75 of 4 (3 a round, threshold 2): two of round 1's sampled clients drop at the
    masked-vector stage, so 1 vector is left, below the threshold: the round cannot complete.
    Flower's workflow halts it and went on to round 2 (the round skipped silently: (g, b) not
    updated, the three fits counted); now the run stops with one line naming the round and why,
    within a bounded time (SIGALRM: no hang), and writes no readout."""
    from esnfed_core.sampling import sample_clients

    root, data, users = setup
    first = sample_clients(len(users), 0.75, IP["ip-seed"], 0)
    assert len(first) == 3
    out = root / "secagg-fedip-two-drops.npy"
    with bounded(300), pytest.raises(RuntimeError) as info:  # a full SecAgg+ FedIP run here takes ~20 s
        _secagg_fedip(root, data, users, simulation.alone, "secagg-fedip-two-drops", **_fraction(0.75),
                      **{"drop-partition": f"{first[0]},{first[1]}", "drop-round": 1})
    assert str(info.value) == ("round 1: SecAgg+ cannot complete it: 1 of its 3 clients left at the masked vector "
                               "stage, below the reconstruction threshold 2 (clients dropped out)")
    assert not out.exists()


def test_secaggplus_fedip_replays_its_own_fits_after_a_dropout_at_fraction_1(setup, simulation):
    """Every client in every round (fraction 1, threshold 3 of 4): client 1 drops at the
    masked-vector stage of round 1 only and is back for rounds 2 and 3. Round 1 completes with its
    3 survivors; the server's (g, b) is the hand-built FedIP whose round 1 averages exactly them,
    each client with its own long-lived generator, to the quantization tolerance of the full runs:
    client 1 replays the one fit it made before round 3, not the round index (which would count
    its lost round 1 as a fit: the hand-built run with its generator moved lies far away)."""
    root, data, users = setup
    drop, everyone = 1, list(range(len(users)))
    readout, gain, bias, info = _secagg_fedip(root, data, users, simulation, "secagg-fedip-drop-round",
                                              **{"drop-partition": drop, "drop-round": 1})
    assert info == {"clients": len(users), "sampled": len(users), "min_clients": len(users) - 1}  # stats: all
    sets = [(everyone, [i for i in everyone if not (r == 0 and i == drop)]) for r in range(IP["rounds"])]
    want = _hand_fedip(data, users, sets)
    counted = _hand_fedip(data, users, sets, dropped_fits=True)
    tol = 10 * 3 * _quantization_bound(users)
    err = max(np.max(np.abs(gain - want.gain)), np.max(np.abs(bias - want.bias)))
    off = max(np.max(np.abs(counted.gain - want.gain)), np.max(np.abs(counted.bias - want.bias)))
    print(f"f = 1 SecAgg+ FedIP with a round-1 dropout: max |Δ(g, b)| {err:.3g} (tolerance {tol:.3g}); "
          f"a counted dropout's run lies {off:.3g} away")
    assert err < tol
    assert off > 10 * tol  # the comparison tells the two apart
    plain = incfed(want, _clients(data, users), [LAM]).readouts[0]  # the statistics round: every client
    assert np.linalg.norm(readout - plain) / np.linalg.norm(plain) < 1e-3


@pytest.mark.parametrize("bias", [False, True])
def test_fedavg_app_equals_the_pipeline(setup, simulation, bias):
    from esnfed_core.federated import fedavg
    from esnfed_flower import fedavg as app

    root, data, users = setup
    out = root / f"fedavg-{bias}.npy"
    _simulate(app, root, _run_config(root, data, out, **_bias(bias)), len(users), simulation)
    res = make_reservoir(CFG, data.n_inputs, SEED)
    expected = fedavg(res, _clients(data, users, bias), LAM)
    assert expected.shape == (data.n_classes, CFG["units"] + bias)
    # Same local solves of the same statistics, averaged in the same order: equal bits.
    np.testing.assert_array_equal(np.load(out), expected)
    assert not np.allclose(expected, incfed(res, _clients(data, users, bias), [LAM]).readouts[0])  # not IncFed


def test_secaggplus_refuses_a_round_under_its_minimum_in_one_line():
    """SecAgg+ takes integer shares above 2: a sampled round of 2 clients is refused naming the run
    config's client-fraction; 3 sizes the workflow to 3 shares, threshold 2."""
    from flwr.server.workflow import SecAggPlusWorkflow

    from esnfed_flower.secagg import size_round

    fit = SecAggPlusWorkflow(num_shares=4, reconstruction_threshold=3)
    fit.min_survivors = 2  # a simulation's bound (run_secagg sets it from secagg-min-survivors)
    with pytest.raises(ValueError, match=r"^client-fraction: SecAgg\+ needs at least 3 clients per round, "
                                         r"a round samples 2$"):
        size_round(fit, 2)
    size_round(fit, 3)
    assert (fit.num_shares, fit.reconstruction_threshold) == (3, 2)


@pytest.mark.parametrize("k, least, ok", [(3, None, False), (5, None, False), (6, None, True), (9, None, True),
                                          (3, 2, True), (6, 6, False), (7, 6, True)])
def test_secaggplus_refuses_rounds_below_the_survivor_bound_before_any_round(monkeypatch, k, least, ok):
    """Flower 1.42's 32-bit mask seeds: a round that may complete with fewer survivors than
    secagg-min-survivors (absent: 5) is refused in one line naming the key, before the workflow
    runs a round; at or above it the workflow starts. K clients give threshold max(2, K − 1)."""
    from types import SimpleNamespace

    import esnfed_flower.secagg as secagg

    started = []
    monkeypatch.setattr(secagg, "LegacyContext", lambda **kw: kw)
    monkeypatch.setattr(secagg, "DefaultWorkflow", lambda fit_workflow: lambda grid, legacy: started.append(fit_workflow))
    monkeypatch.delenv("ESNFED_FLOWER_RUN", raising=False)
    rc = {"num-clients": k, **({} if least is None else {"secagg-min-survivors": least})}
    strategy = SimpleNamespace()
    if ok:
        secagg.run_secagg(None, SimpleNamespace(run_config=rc), strategy, rounds=1)
        assert started and started[0].reconstruction_threshold == max(2, k - 1) >= (least or 5)
        return
    with pytest.raises(ValueError) as err:
        secagg.run_secagg(None, SimpleNamespace(run_config=rc), strategy, rounds=1)
    msg = str(err.value)
    assert msg.startswith(f"secagg-min-survivors: a SecAgg+ round of {k} clients may complete with {max(2, k - 1)} "
                          f"survivors, below {least or 5}") and "\n" not in msg
    assert not started


def test_secaggplus_checks_a_sampled_rounds_survivors_before_any_round(monkeypatch):
    """client-fraction 0.5 of 10 clients: rounds of 5, threshold 4 < 5, refused before any round;
    at 0.6 (rounds of 6, threshold 5) it starts; size_round refuses a later smaller round."""
    from types import SimpleNamespace

    import esnfed_flower.secagg as secagg

    monkeypatch.setattr(secagg, "LegacyContext", lambda **kw: kw)
    monkeypatch.setattr(secagg, "DefaultWorkflow", lambda fit_workflow: lambda grid, legacy: None)
    monkeypatch.delenv("ESNFED_FLOWER_RUN", raising=False)
    with pytest.raises(ValueError, match=r"^secagg-min-survivors: a SecAgg\+ round of 5 clients may complete with 4"):
        secagg.run_secagg(None, SimpleNamespace(run_config={"num-clients": 10, "client-fraction": 0.5}),
                          SimpleNamespace(), rounds=1)
    strategy = SimpleNamespace()
    secagg.run_secagg(None, SimpleNamespace(run_config={"num-clients": 10, "client-fraction": 0.6}), strategy, 1)
    assert strategy.secagg.min_survivors == 5
    secagg.size_round(strategy.secagg, 6)
    with pytest.raises(ValueError, match=r"^secagg-min-survivors: a SecAgg\+ round of 4 clients"):
        secagg.size_round(strategy.secagg, 4)
    with pytest.raises(ValueError, match=r"^secagg-min-survivors: expected an integer >= 2, got 1$"):
        secagg.run_secagg(None, SimpleNamespace(run_config={"num-clients": 10, "secagg-min-survivors": 1}),
                          SimpleNamespace(), 1)


def test_sampling_takes_back_the_fit_of_a_client_that_dropped():
    """The server's fit counts (esnfed_flower.common.Sampling): a round counts its sampled nodes'
    fits; only_fitted takes back those that did not make the sum (once), so the dropped node's next
    message carries the fits it made."""
    from esnfed_flower.common import Sampling

    s = Sampling([10, 11, 12, 13], [[1]] * 4, 0.75, IP["ip-seed"])
    first = s.next_round(0)
    assert len(first) == 3 and all(w["round"] == 0 for w in first.values())
    lost, *kept = list(first)
    s.only_fitted(kept)
    s.only_fitted(kept)  # idempotent: the count goes back once
    assert s.where(lost, 0)["round"] == 0 and all(s.where(n, 0)["round"] == 1 for n in kept)
