"""IncFed with Flower's SecAgg+ (SecAggPlusWorkflow + secaggplus_mod): the server only holds the
masked vectors and their sum; and what the SecAgg+ apps share (esnfed_flower.secagg_fedip).

Encoding: each client sends its per-step means (Ā, B̄) = (A, B)/n_steps with n_steps as the
weight. States lie in [-1, 1] and labels are one-hot, so every entry lies in [-1, 1]: SecAgg+'s
clipping range 1 never clips, and its quantization (2·clip / quantization_range per entry) is the
only error. The workflow returns the weighted mean Σ n_c·(Ā_c, B̄_c) / Σ n_c = (A, B)/n; the
server multiplies by n = Σ n_c (the step counts are the legacy FitRes' num-examples) and solves.
Flower's SecAgg+ runs on its legacy (LegacyContext, NumPyClient) API in flwr 1.42.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from flwr.client import ClientApp, NumPyClient
from flwr.client.mod import secaggplus_mod
from flwr.common import parameters_to_ndarrays
from flwr.server import LegacyContext, ServerApp, ServerConfig
from flwr.server.strategy import FedAvg
from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow

from esnfed_core.readout import RidgeStats, solve
from esnfed_flower.common import measure_mod, partition, run_config
from esnfed_flower.incfed import client_stats


def mean_stats(rc: dict, x: np.ndarray, y: np.ndarray, gb: dict | None = None) -> tuple[list, int]:
    """A client's SecAgg+ upload: its per-step means [Ā, B̄] and n_steps (the weight)."""
    return encode_stats(client_stats(rc, x, y, gb))


def encode_stats(s: RidgeStats) -> tuple[list, int]:
    """Statistics as SecAgg+ carries them: the per-step means [Ā, B̄] and n_steps (the weight)."""
    return [s.a / s.n_steps, s.b / s.n_steps], s.n_steps


def write_readout(rc: dict, results: list) -> np.ndarray:
    """From SecAgg+'s weighted mean of the statistics (every result carries it) to the readout:
    rescale by Σ n_c, solve with λ, save to ``out`` and return it; ``out``.json: the clients whose
    vectors made the sum, of the ``num-clients`` sampled (Flower's own failure list counts a
    dropout twice)."""
    a_mean, b_mean = parameters_to_ndarrays(results[0][1].parameters)
    n = sum(fit_res.num_examples for _, fit_res in results)
    stats = RidgeStats(a_mean * n, 0.5 * (b_mean + b_mean.T) * n, n, 0)
    w = solve(stats, [float(rc["lambda"])], rc.get("solver", "cholesky"))[0]
    np.save(str(rc["out"]), w)
    Path(str(rc["out"]) + ".json").write_text(json.dumps({"clients": len(results), "sampled": int(rc["num-clients"])}))
    return w


class SecAggClient(NumPyClient):
    """A SecAgg+ client of this package: holds its Flower context and its partition; the server
    sends the parameters (nothing to get)."""

    def __init__(self, context):
        self.context = context

    def get_parameters(self, config):
        return []

    def data(self) -> tuple[dict, np.ndarray, np.ndarray]:
        """(run config, x, y) of this client's partition."""
        x, y = partition(self.context, int(self.context.node_config["partition-id"]))
        return run_config(self.context), x, y


class StatsClient(SecAggClient):
    """Uploads its per-step mean statistics with the step count as the weight."""

    def fit(self, parameters, config):
        rc, x, y = self.data()
        vec, n = mean_stats(rc, x, y)
        return vec, n, {}


def dropout_mod(msg, context, call_next):
    """Simulates a device lost after sharing its keys: the client whose partition id is the run
    config's ``drop-partition`` fails at SecAgg+'s collect-masked-vectors stage (tests)."""
    from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key, Stage

    configs = msg.content.config_records.get(RECORD_KEY_CONFIGS)
    drop = run_config(context).get("drop-partition")
    if (drop is not None and configs is not None and configs.get(Key.STAGE) == Stage.COLLECT_MASKED_VECTORS
            and int(context.node_config["partition-id"]) == int(drop)):
        raise ConnectionError("simulated dropout after key sharing")
    return call_next(msg, context)


def client_apps(client_fn) -> tuple[ClientApp, ClientApp]:
    """The SecAgg+ ClientApp of ``client_fn`` (bytes measured outermost) and its dropout twin."""
    return (ClientApp(client_fn=client_fn, mods=[measure_mod, secaggplus_mod]),
            ClientApp(client_fn=client_fn, mods=[measure_mod, dropout_mod, secaggplus_mod]))


def run_secagg(grid, context, strategy, rounds: int) -> None:
    """Run ``rounds`` legacy rounds of ``strategy`` with every fit through SecAgg+: shares and
    threshold for all ``num-clients`` (one may drop), ``clipping-range`` (default 1) and
    ``max-weight`` (default Flower's 1000; set it to the largest step count) from the run config."""
    rc = run_config(context)
    k = int(rc["num-clients"])
    legacy = LegacyContext(context=context, config=ServerConfig(num_rounds=rounds), strategy=strategy)
    workflow = DefaultWorkflow(fit_workflow=SecAggPlusWorkflow(
        num_shares=k, reconstruction_threshold=max(2, k - 1),
        clipping_range=float(rc.get("clipping-range", 1.0)), max_weight=float(rc.get("max-weight", 1000.0))))
    workflow(grid, legacy)


def all_clients(rc: dict) -> dict:
    """FedAvg's arguments for a round with every client (SecAgg+ needs them all sampled)."""
    k = int(rc["num-clients"])
    return {"fraction_fit": 1.0, "fraction_evaluate": 0.0, "min_fit_clients": k, "min_available_clients": k}


class SumStrategy(FedAvg):
    """FedAvg whose aggregate_fit receives SecAgg+'s weighted mean and writes the readout."""

    def __init__(self, rc, **kw):
        super().__init__(**kw)
        self.rc = rc

    def aggregate_fit(self, server_round, results, failures):
        write_readout(self.rc, results)
        return None, {}


client_app, dropout_client_app = client_apps(lambda context: StatsClient(context).to_client())
server_app = ServerApp()


@server_app.main()
def main(grid, context) -> None:
    rc = run_config(context)
    run_secagg(grid, context, SumStrategy(rc, **all_clients(rc)), rounds=1)
