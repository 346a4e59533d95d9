"""IncFed with Flower's SecAgg+ (SecAggPlusWorkflow + secaggplus_mod): the server only holds the
masked vectors and their sum; and what the SecAgg+ apps share (esnfed_flower.secagg_fedip).

Encoding: each client sends its per-step means (Ā, B̄) = (A, B)/n_steps with n_steps as the
weight. States lie in [-1, 1] and labels are one-hot, so every entry lies in [-1, 1]: SecAgg+'s
clipping range 1 never clips, and its quantization (2·clip / quantization_range per entry) is the
only error. The workflow returns the weighted mean Σ n_c·(Ā_c, B̄_c) / Σ n_c = (A, B)/n; the
server multiplies by n = Σ n_c (the step counts are the legacy FitRes' num-examples) and solves.
Flower's SecAgg+ runs on its legacy (LegacyContext, NumPyClient) API in flwr 1.42.

Distributed DP (run config ``dp-*`` with ``dp-noise: distributed``, esnfed_flower.dp): each client
sends its clipped (Ā, B̄) plus its noise share N(0, σ²/K_min) (esnfed_core.privacy.client_stats_share,
its noise from the OS CSPRNG: the server must not be able to replay it), every client with weight 1 (the
mechanism weighs users alike and releases no counts); the workflow returns the mean over the K'
clients whose vectors made the sum, the server multiplies by K' and solves from the noisy sum after
the PSD projection (esnfed_core.privacy.released_stats). K_min is the workflow's reconstruction
threshold, so any completed sum carries noise of std ≥ σ. The quantization range covers the
clipping norm plus RANGE_STDS share stds, so Flower's quantizer never clips a share (a client
whose share would reach beyond it fails instead).
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
from flwr.server.workflow.constant import MAIN_CONFIGS_RECORD
from flwr.server.workflow.constant import Key as WorkflowKey

from esnfed_core.privacy import released_stats
from esnfed_core.readout import RidgeStats
from esnfed_core.sampling import (
    FULL, SECAGG_MIN_CLIENTS, SURVIVORS_KEY, check_survivors, min_survivors, sample_size,
)
from esnfed_flower.common import (
    client_fraction, measure_mod, partition, readout_bias, run_config, secagg_threshold, solve_readout, within_range,
)
from esnfed_flower.dp import FlowerDP, flower_dp
from esnfed_flower.incfed import client_stats


def mean_stats(rc: dict, x: np.ndarray, y: np.ndarray, gb: dict | None = None) -> tuple[list, int]:
    """A client's SecAgg+ upload: its per-step means [Ā, B̄] and n_steps (the weight); with
    distributed DP its clipped means plus its noise share, weight 1."""
    stats = client_stats(rc, x, y, gb)
    dp = flower_dp(rc, "distributed")
    if dp is None:
        return encode_stats(stats)
    return within_range(dp.stats_share(stats), dp_range(rc, dp), "noisy statistics"), 1


def dp_range(rc: dict, dp: FlowerDP) -> float:
    """SecAgg+'s clipping range under distributed DP (esnfed_flower.dp.FlowerDP.clipping_range)."""
    return dp.clipping_range(int(rc["units"]) + readout_bias(rc))  # the statistics' columns


def encode_stats(s: RidgeStats) -> tuple[list, int]:
    """Statistics as SecAgg+ carries them: the per-step means [Ā, B̄] and n_steps (the weight)."""
    return [s.a / s.n_steps, s.b / s.n_steps], s.n_steps


def write_readout(rc: dict, results: list, extra: dict | None = None) -> np.ndarray:
    """From SecAgg+'s weighted mean of the statistics (every result carries it) to the readout:
    rescale by Σ n_c, solve with λ (or each λ of ``lambdas``), save to ``out`` and return it;
    ``out``.json: the clients whose vectors made the sum, of the ``num-clients`` sampled (Flower's
    own failure list counts a dropout twice), the fewest it could hold (the threshold) and ``extra``.
    Distributed DP: the weights are 1, so Σ n_c = K' and the sum is the noisy release, kept in
    ``out``.dp.npz (a, b before the PSD projection)."""
    a_mean, b_mean = parameters_to_ndarrays(results[0][1].parameters)
    n = sum(fit_res.num_examples for _, fit_res in results)
    a, b = a_mean * n, 0.5 * (b_mean + b_mean.T) * n
    if flower_dp(rc, "distributed") is None:
        stats = RidgeStats(a, b, n, 0, readout_bias(rc))
    else:
        np.savez(str(rc["out"]) + ".dp.npz", a=a, b=b)
        stats = released_stats(a, b, readout_bias(rc))
    w = solve_readout(rc, stats)
    np.save(str(rc["out"]), w)
    k = int(rc["num-clients"])
    Path(str(rc["out"]) + ".json").write_text(json.dumps({"clients": len(results), "sampled": k,
                                                          "min_clients": secagg_threshold(k), **(extra or {})}))
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

    def get_properties(self, config):
        """Its partition id and ``takes-part`` (1/0 per context, comma-separated): what the server
        samples among under ``client-fraction`` < 1 (esnfed_flower.secagg_fedip.FedIPStrategy)."""
        return {"partition-id": int(self.context.node_config["partition-id"]),
                "takes-part": ",".join(str(f) for f in self.participation())}

    def participation(self) -> list[int]:
        """Whether it has windows to train on (one context)."""
        return [int(len(self.data()[1]) > 0)]


class StatsClient(SecAggClient):
    """Uploads its per-step mean statistics with the step count as the weight."""

    def fit(self, parameters, config):
        rc, x, y = self.data()
        vec, n = mean_stats(rc, x, y)
        return vec, n, {}


def dropout_mod(msg, context, call_next):
    """Simulates a device lost after sharing its keys: the client whose partition id is the run
    config's ``drop-partition`` (one id, or several comma-separated) fails at SecAgg+'s
    collect-masked-vectors stage (tests), before it fits; in every round, or only in the legacy
    round ``drop-round`` (1-based, the message's group)."""
    from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key, Stage

    configs = msg.content.config_records.get(RECORD_KEY_CONFIGS)
    rc = run_config(context)
    drop, in_round = rc.get("drop-partition"), rc.get("drop-round")
    if (drop is not None and configs is not None and configs.get(Key.STAGE) == Stage.COLLECT_MASKED_VECTORS
            and int(context.node_config["partition-id"]) in {int(p) for p in str(drop).split(",")}
            and (in_round is None or str(msg.metadata.group_id) == str(int(in_round)))):
        raise ConnectionError("simulated dropout after key sharing")
    return call_next(msg, context)


def client_apps(client_fn) -> tuple[ClientApp, ClientApp]:
    """The SecAgg+ ClientApp of ``client_fn`` (bytes measured outermost) and its dropout twin."""
    return (ClientApp(client_fn=client_fn, mods=[measure_mod, secaggplus_mod]),
            ClientApp(client_fn=client_fn, mods=[measure_mod, dropout_mod, secaggplus_mod]))


def run_secagg(grid, context, strategy, rounds: int) -> None:
    """Run ``rounds`` legacy rounds of ``strategy`` with every fit through SecAgg+: shares and
    threshold for all ``num-clients`` (one may drop), ``clipping-range`` (default 1) and
    ``max-weight`` (default Flower's 1000; set it to the largest step count) from the run config;
    distributed DP: the range of its shares and weight 1. Before any round: a ValueError naming
    ``secagg-min-survivors`` when a round of all K clients, or of the m = max(1, ⌊f·K⌋) a sampled
    round goes to, could complete with fewer survivors than it (esnfed_core.sampling.check_survivors;
    absent: 5, the deployment bound); each sampled round is checked again as size_round sizes it."""
    rc = run_config(context)
    k = int(rc["num-clients"])
    least = min_survivors(rc.get(SURVIVORS_KEY))
    check_survivors(k, least)
    if client_fraction(rc) != FULL:
        check_survivors(sample_size(k, client_fraction(rc)), least)
    dp = flower_dp(rc, "distributed")
    clip, max_weight = float(rc.get("clipping-range", 1.0)), float(rc.get("max-weight", 1000.0))
    if dp is not None:
        clip, max_weight = dp_range(rc, dp), 1.0
    legacy = LegacyContext(context=context, config=ServerConfig(num_rounds=rounds), strategy=strategy)
    fit = CompleteOrFail(num_shares=k, reconstruction_threshold=secagg_threshold(k), clipping_range=clip,
                         max_weight=max_weight)
    fit.min_survivors = least  # size_round's bound for a sampled round
    strategy.secagg = fit  # a sampling strategy sizes each round's shares and threshold (FedIPStrategy)
    DefaultWorkflow(fit_workflow=fit)(grid, legacy)


class CompleteOrFail(SecAggPlusWorkflow):
    """SecAggPlusWorkflow whose round either completes or fails in one line naming it. Flower's
    halts a round when fewer clients than its reconstruction threshold are left at a stage (e.g.
    two dropouts in a round of 3, threshold 2): it logs "Secure aggregation halted." and the legacy
    workflow goes on to the next round without the strategy's aggregate_fit, so the round would be
    skipped silently (FedIP/FedCLIP: (g, b) not updated, every sampled client's fit counted; the
    statistics round: no readout). The pipeline's trial has no such round, so the run stops."""

    def _ok(self, stage: str, ok: bool, context, state) -> bool:
        if not ok:
            rnd = context.state.config_records[MAIN_CONFIGS_RECORD][WorkflowKey.CURRENT_ROUND]
            raise RuntimeError(f"round {rnd}: SecAgg+ cannot complete it: {len(state.active_node_ids)} of its "
                               f"{len(state.sampled_node_ids)} clients left at the {stage} stage, below the "
                               f"reconstruction threshold {state.threshold} (clients dropped out)")
        return ok

    def setup_stage(self, grid, context, state) -> bool:
        return self._ok("setup", super().setup_stage(grid, context, state), context, state)

    def share_keys_stage(self, grid, context, state) -> bool:
        return self._ok("share keys", super().share_keys_stage(grid, context, state), context, state)

    def collect_masked_vectors_stage(self, grid, context, state) -> bool:
        return self._ok("masked vector", super().collect_masked_vectors_stage(grid, context, state), context, state)

    def unmask_stage(self, grid, context, state) -> bool:
        return self._ok("unmask", super().unmask_stage(grid, context, state), context, state)


def size_round(fit: SecAggPlusWorkflow, k: int) -> None:
    """Shares and threshold of the next SecAgg+ round for its ``k`` clients, as run_secagg's for
    all (k shares, threshold max(2, k − 1)); the workflow reads them after configure_fit. A
    ValueError naming client-fraction when ``k`` is below SecAgg+'s minimum, or naming
    secagg-min-survivors when its threshold is below run_secagg's bound (FedCLIP: a context's
    participants may be fewer than the m run_secagg checked)."""
    if k < SECAGG_MIN_CLIENTS:
        raise ValueError(f"client-fraction: SecAgg+ needs at least {SECAGG_MIN_CLIENTS} clients per round, "
                         f"a round samples {k}")
    check_survivors(k, getattr(fit, "min_survivors", min_survivors()))
    fit.num_shares, fit.reconstruction_threshold = k, secagg_threshold(k)


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
