"""FedCLIP (naive, replay) with Flower's SecAgg+: the rounds of esnfed_flower.fedclip (per context,
``budget`` IP rounds then a readout round), each through SecAggPlusWorkflow as in
esnfed_flower.secagg_fedip: IP rounds send (Δg, Δb) from the broadcast (g, b), readout rounds the
per-step mean statistics (esnfed_flower.secagg); the server adds the weighted mean update to (g, b)
and solves each context's readout from the weighted mean statistics. It never holds a client's
vector.

Weights: step counts (windows × window length: the pipeline's window weights, |D_t,c| + |M_t,c|
under replay, up to the common window length). A client that sits a context out sends zeros with
weight 0 (SecAgg+ needs every sampled client's vector; zero lies on the quantization grid, so it
adds no rounding error). The result equals the plain app's to SecAgg+'s quantization (tests_flower).
Client sampling (``client-fraction`` < 1): as SecAgg+ FedIP's, each IP round among the context's
participants (their get_properties reply says at which contexts they take part), every message
with the client's own fits (``history``, ``round``) for LocalClient.at. At fraction 1 the counts are
kept too (a client that dropped out of a round replays only the fits it made); ``history`` is sent
only where it differs from LocalClient.at's default (``budget`` fits per earlier context).
"""

from __future__ import annotations

import numpy as np
from flwr.common import ndarrays_to_parameters
from flwr.server import ServerApp

from esnfed_flower.common import readout_bias, run_config
from esnfed_flower.fedclip import client_at, participation, setup
from esnfed_flower.secagg import SecAggClient, client_apps, encode_stats, run_secagg, write_readout
from esnfed_flower.secagg_fedip import FedIPStrategy, ip_update


class FedCLIPClient(SecAggClient):
    """IP phase: its local fit at (t, r), uploading (Δg, Δb); readout phase: its per-step mean
    statistics at t; zeros with weight 0 when it has nothing to train on at t."""

    def participation(self) -> list[int]:
        return participation(run_config(self.context), self.context)

    def fit(self, parameters, config):
        rc = run_config(self.context)
        cfg = {**rc, **config}
        gain, bias = parameters
        client, res = client_at(cfg, self.context, gain, bias)
        t, steps = int(cfg["context"]), client.client.contexts[0][0].shape[1]
        if cfg["phase"] == "stats":
            if not client.takes_part(t):
                m = res.units + readout_bias(rc)  # the statistics' columns
                return [np.zeros((int(rc["n-classes"]), m)), np.zeros((m, m))], 0, {}
            vec, n = encode_stats(client.stats(res, t))
            return vec, n, {}
        if not client.takes_part(t):
            return [np.zeros_like(gain), np.zeros_like(bias)], 0, {}
        return ip_update(rc, client.fit(res, t), gain, bias), client.weight(t) * steps, {}


class FedCLIPStrategy(FedIPStrategy):
    """Legacy rounds in FedCLIP's order (IP rounds: SecAgg+ FedIP's update of (g, b)); after each
    context's readout round, the model after the context is kept; after the last, ``out`` (last
    readout) and ``out``.contexts.npz."""

    def __init__(self, rc: dict):
        budget = setup(rc)[0].budget
        super().__init__({**rc, "rounds": budget})  # rounds: IP rounds per context (esnfed_flower.run)
        self.n_contexts = int(rc["n-contexts"])
        self.schedule = [(t, r, "ip" if r < budget else "stats")
                         for t in range(int(rc["n-contexts"])) for r in range(budget + 1)]
        self.kept: dict[str, list] = {"gain": [], "bias": [], "readout": []}

    def fit_config(self, server_round: int) -> dict:
        t, r, phase = self.schedule[server_round - 1]
        return {"context": t, "round": r, "phase": phase}

    def ip_context(self, server_round: int) -> int | None:
        t, _, phase = self.schedule[server_round - 1]
        return t if phase == "ip" else None

    def aggregate_fit(self, server_round, results, failures):
        if self.schedule[server_round - 1][2] == "ip":
            return self.add_update(results), {}
        self.kept["readout"].append(write_readout(self.rc, results))
        self.kept["gain"].append(self.gain)
        self.kept["bias"].append(self.bias)
        if server_round == len(self.schedule):
            np.savez(str(self.rc["out"]) + ".contexts.npz", **{k: np.stack(v) for k, v in self.kept.items()})
        return ndarrays_to_parameters([self.gain, self.bias]), {}


client_app, dropout_client_app = client_apps(lambda context: FedCLIPClient(context).to_client())
server_app = ServerApp()


@server_app.main()
def main(grid, context) -> None:
    strategy = FedCLIPStrategy(run_config(context))
    run_secagg(grid, context, strategy, rounds=len(strategy.schedule))
