"""The FedCLIP Flower app (esnfed_flower.fedclip) in Flower's simulation engine gives the in-process
pipeline's (esnfed_core.continual.run_continual) per-context (g, b) and readouts bit for bit, naive
and replay: 3 contexts, 2 IP rounds each, 2 local epochs, one client with no windows at a context.
Same seeds, partition order, core functions and array shapes on both sides (the stateless
ClientApps rebuild their generators and buffers with esnfed_core.continual.LocalClient.at)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from esnfed_core.continual import ContinualConfig, make_strategy, run_continual  # noqa: E402
from esnfed_core.plasticity import IPConfig  # noqa: E402
from esnfed_core.trial import make_reservoir  # noqa: E402
from experiment_data import trial_data  # noqa: E402

CFG = {"units": 10, "spectral_radius": 0.9, "leak": 0.5, "input_scaling": 0.8}
BUDGET, EPOCHS, LAM = 2, 2, 1e-3
SITS_OUT = (1, 1)  # (client, context): no windows there


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The training users' streams of three contexts (6 windows each, client 1 none at context 1),
    written as the app reads them."""
    root = tmp_path_factory.mktemp("fedclip")
    data, _ = trial_data(pct="100", windows_per_context=6)
    train = []
    for i, u in enumerate(data.train.values()):
        if i == SITS_OUT[0]:
            u = u.select(u.context != SITS_OUT[1])
        np.savez(root / f"client-{i}.npz", x=u.x, y=u.y, context=u.context)
        train.append([(u.of_context(t).x, u.of_context(t).y) for t in range(data.n_contexts)])
    return root, data, train


def _flower(root: Path, data, strategy: str, monkeypatch) -> dict:
    from flwr.simulation import run_simulation

    from esnfed_flower import fedclip as app

    out = root / f"{strategy}.npy"
    run = {**CFG, "reservoir-seed": 5, "n-classes": data.n_classes, "n-inputs": data.n_inputs,
           "n-contexts": data.n_contexts, "num-clients": len(data.train), "strategy": strategy,
           "budget": BUDGET, "replay-fraction": 0.2, "replay-batch": 2, "replay-shuffle": False,
           "sigma": 0.3, "mu": 0.0, "eta": 0.01, "ip-batch-size": 4, "ip-normalize-step": True,
           "ip-seed": 9, "local-epochs": EPOCHS, "lambda": LAM, "solver": "cholesky",
           "data-dir": str(root), "out": str(out)}
    cfg = root / f"{strategy}.json"
    cfg.write_text(json.dumps(run))
    monkeypatch.setenv("ESNFED_FLOWER_RUN", str(cfg))
    run_simulation(app.server_app, app.client_app, num_supernodes=len(data.train),
                   backend_config={"client_resources": {"num_cpus": 1}, "init_args": {"num_cpus": 2}})
    with np.load(str(out) + ".contexts.npz") as f:
        got = {k: f[k] for k in f.files}
    np.testing.assert_array_equal(np.load(out), got["readout"][-1])
    return got


@pytest.mark.parametrize("strategy", ["naive", "replay"])
def test_fedclip_app_equals_the_pipeline(setup, strategy, monkeypatch):
    root, data, train = setup
    got = _flower(root, data, strategy, monkeypatch)
    res = make_reservoir(CFG, data.n_inputs, 5)
    strat = make_strategy(strategy, budget=BUDGET, replay_fraction=0.2, replay_batch=2)
    config = ContinualConfig(True, IPConfig(sigma=0.3, batch_size=4), data.n_classes, local_epochs=EPOCHS,
                             lam=LAM, seed=9)
    want = run_continual(res, train, strat, config)
    assert got["gain"].shape == (data.n_contexts, CFG["units"])
    for t in range(data.n_contexts):
        np.testing.assert_array_equal(got["gain"][t], want.reservoirs[t].gain)
        np.testing.assert_array_equal(got["bias"][t], want.reservoirs[t].bias)
        np.testing.assert_array_equal(got["readout"][t], want.readouts[t])
    # Not vacuous: (g, b) move from context to context.
    assert not np.allclose(want.reservoirs[0].gain, want.reservoirs[1].gain)
    if strategy == "replay":
        assert want.buffer_sizes[1][SITS_OUT[0]] > 0  # replay: client 1 still trains on its buffer
