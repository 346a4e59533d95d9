"""IncFed with Flower's SecAgg+ (SecAggPlusWorkflow + secaggplus_mod): the server only holds the
masked vectors and their sum.

Encoding: each client sends its per-step means (Ā, B̄) = (A, B)/n_steps with n_steps as the
weight. States lie in [-1, 1] and labels are one-hot, so every entry lies in [-1, 1]: SecAgg+'s
clipping range 1 never clips, and its quantization (2·clip / quantization_range per entry) is the
only error. The workflow returns the weighted mean Σ n_c·(Ā_c, B̄_c) / Σ n_c = (A, B)/n; the
server multiplies by n = Σ n_c (the window counts are the legacy FitRes' num-examples) and solves.
Flower's SecAgg+ runs on its legacy (LegacyContext, NumPyClient) API in flwr 1.42.
"""

from __future__ import annotations

import numpy as np
from flwr.client import ClientApp, NumPyClient
from flwr.client.mod import secaggplus_mod
from flwr.server import LegacyContext, ServerApp, ServerConfig
from flwr.server.strategy import FedAvg
from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow
from flwr.common import parameters_to_ndarrays

from esnfed_core.readout import RidgeStats, ridge_stats, solve
from esnfed_flower.common import partition, reservoir, run_config


class StatsClient(NumPyClient):
    """Uploads its per-step mean statistics with the step count as the weight."""

    def __init__(self, context):
        self.context = context

    def get_parameters(self, config):
        return []

    def fit(self, parameters, config):
        rc = run_config(self.context)
        pid = int(self.context.node_config["partition-id"])
        x, y = partition(self.context, pid)
        s = ridge_stats(reservoir(rc, x.shape[2]), x, y, int(rc["n-classes"]), int(rc["batch-size"]))
        return [s.a / s.n_steps, s.b / s.n_steps], s.n_steps, {}


def _client_fn(context):
    return StatsClient(context).to_client()


client_app = ClientApp(client_fn=_client_fn, mods=[secaggplus_mod])


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


dropout_client_app = ClientApp(client_fn=_client_fn, mods=[dropout_mod, secaggplus_mod])


class SumStrategy(FedAvg):
    """FedAvg whose aggregate_fit receives SecAgg+'s weighted mean and writes the readout."""

    def __init__(self, rc, **kw):
        super().__init__(**kw)
        self.rc = rc

    def aggregate_fit(self, server_round, results, failures):
        a_mean, b_mean = parameters_to_ndarrays(results[0][1].parameters)
        n = sum(fit_res.num_examples for _, fit_res in results)
        stats = RidgeStats(a_mean * n, 0.5 * (b_mean + b_mean.T) * n, n, 0)
        np.save(str(self.rc["out"]), solve(stats, [float(self.rc["lambda"])])[0])
        return None, {}


server_app = ServerApp()


@server_app.main()
def main(grid, context) -> None:
    rc = run_config(context)
    k = int(rc["num-clients"])
    strategy = SumStrategy(rc, fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=k,
                           min_available_clients=k)
    legacy = LegacyContext(context=context, config=ServerConfig(num_rounds=1), strategy=strategy)
    workflow = DefaultWorkflow(fit_workflow=SecAggPlusWorkflow(
        num_shares=k, reconstruction_threshold=max(2, k - 1), clipping_range=1.0,
        max_weight=float(rc.get("max-weight", 1000.0))))
    workflow(grid, legacy)
