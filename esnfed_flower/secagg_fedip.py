"""FedIP with Flower's SecAgg+: each of the R rounds sends every client's update (Δg, Δb) =
(g_c − g, b_c − b) through SecAggPlusWorkflow, weighted by its step count; the server adds the
weighted mean update to the broadcast (g, b). Round R + 1 is SecAgg+ IncFed on the trained
reservoir (esnfed_flower.secagg's per-step means). The server never holds a client's (g_c, b_c).

Client sampling (run config ``client-fraction`` < 1): before the first round the server asks every
client its partition id and whether it has windows (legacy get_properties, group 0); each IP round
then goes to the clients esnfed_core.sampling.sample_clients draws among those (the pipeline's
sets), with its shares and threshold sized to them (k shares, threshold max(2, k − 1); at least
SECAGG_MIN_CLIENTS, else one line naming client-fraction), and each client's ``round`` is its own
count of earlier fits (esnfed_flower.common.Sampling). The statistics round goes to every client.
At fraction 1 every IP round goes to every client (no query) and the counts are kept all the same:
a client that drops out of a round (SecAgg+ leaves it out of the sum) does not count its fit, so
when it comes back it replays the fits it made; without dropouts ``round`` is the round index, as
before.

Weights: n_steps = windows × window length in both phases (one max-weight covers both; every
window has the same length, so step weights give the pipeline's window-weighted mean).
Range: an update entry beyond the clipping range (default 1) would be clipped, so the client
fails loudly instead; IP moves (g, b) by far less per round (eta · local epochs).
Error: stochastic rounding to 2·clip/2^22 per entry of n_c/max-weight · Δ_c, i.e. at most
K·2·clip/2^22 · max-weight/Σ n_c on the mean update per round (≈ 1e-6 for the tests' data).
Distributed DP (esnfed_flower.secagg): each client's update clipped to ip_clip plus its noise share
N(0, σ_ip²/K_min) (esnfed_core.privacy.client_update_share), weight 1, so the server adds the mean
of the noisy clipped updates; the statistics round as SecAgg+ IncFed's. With client sampling each IP
round goes to the public m = max(1, ⌊f·K⌋) clients (every client must hold windows, as the private
trial's rounds draw over all K: one line naming client-fraction otherwise), each share is sized for
that round's threshold K_min(m) = max(2, m − 1) (esnfed_flower.dp.FlowerDP.ip_min_clients), so any
sum SecAgg+ completes carries std ≥ σ_ip, and the server adds the noisy sum divided by m (the
central path's public divisor, esnfed_core.private_trial.sampled_denominator), not the survivors'
mean; ``out``.json then adds each IP round's survivors (``ip_clients``), m (``ip_sampled``) and
K_min(m) (``ip_min_clients``). No amplification
(esnfed_flower.dp.flower_dp refuses it: the server knows whom it sampled).
"""

from __future__ import annotations

import numpy as np
from flwr.common import FitIns, GetPropertiesIns, ndarrays_to_parameters, parameters_to_ndarrays
from flwr.server import ServerApp
from flwr.server.strategy import FedAvg

from esnfed_core.sampling import sample_size
from esnfed_flower.common import FULL, Sampling, client_fraction, reservoir, run_config, within_range
from esnfed_flower.dp import flower_dp
from esnfed_flower.fedip import local_ip, refuse_empty
from esnfed_flower.secagg import (
    SecAggClient, all_clients, client_apps, dp_range, mean_stats, run_secagg, size_round, write_readout,
)


class FedIPClient(SecAggClient):
    """IP phase: its local epochs from the broadcast (g, b), uploading (Δg, Δb); stats phase:
    its per-step mean statistics on the trained reservoir."""

    def fit(self, parameters, config):
        rc, x, y = self.data()
        gain, bias = parameters
        if config["phase"] == "stats":
            vec, n = mean_stats(rc, x, y, {"gain": gain, "bias": bias})
            return vec, n, {}
        res = local_ip(rc, x, gain, bias, int(config["round"]))
        dp = flower_dp(rc, "distributed")
        if dp is not None:  # its generator fresh from the OS: the server must not know it
            noisy = dp.update_share([res.gain - gain, res.bias - bias])
            return within_range(noisy, dp_range(rc, dp), "noisy FedIP update"), 1, {}
        return ip_update(rc, res, gain, bias), int(x.shape[0] * x.shape[1]), {}


def ip_update(rc: dict, res, gain: np.ndarray, bias: np.ndarray) -> list[np.ndarray]:
    """A client's SecAgg+ IP upload: (Δg, Δb) from the broadcast (g, b) to its fitted ``res``;
    an entry beyond the clipping range fails loudly (SecAgg+ would clip it)."""
    return within_range([res.gain - gain, res.bias - bias], float(rc.get("clipping-range", 1.0)), "FedIP update")


class FedIPStrategy(FedAvg):
    """Rounds 1..R: (g, b) += SecAgg+'s weighted mean update; round R + 1: the readout
    (write_readout) and the trained (g, b) to ``out``.ip.npz."""

    secagg = None  # run_secagg's SecAggPlusWorkflow (sized per round when sampling)

    def __init__(self, rc: dict):
        res = reservoir(rc, int(rc["n-inputs"]))
        self.rc, self.rounds, self.n_contexts = rc, int(rc["rounds"]), 1  # FedCLIP: its contexts
        self.gain, self.bias = res.gain, res.bias
        self.fraction, self.sample = client_fraction(rc), None
        # Distributed DP, sampled: the public m each round's noisy sum is divided by; each IP round's survivors
        self.public_m = None
        if self.fraction != FULL and flower_dp(rc, "distributed") is not None:
            self.public_m, self.ip_clients = sample_size(int(rc["num-clients"]), self.fraction), []
        super().__init__(**all_clients(rc), initial_parameters=ndarrays_to_parameters([res.gain, res.bias]),
                         on_fit_config_fn=self.fit_config)

    def fit_config(self, server_round: int) -> dict:
        return {"round": server_round - 1, "phase": "ip" if server_round <= self.rounds else "stats"}

    def ip_context(self, server_round: int) -> int | None:
        """The context of ``server_round`` when it is an IP round (FedIP: 0), None otherwise."""
        return 0 if server_round <= self.rounds else None

    def configure_fit(self, server_round, parameters, client_manager):
        """Every client, or with ``client-fraction`` < 1 an IP round's sampled clients (the SecAgg+
        round sized to the clients it goes to); each IP message with the client's own fits as
        ``round`` (FedCLIP also ``history``: :meth:`own_fits`), so that a client which dropped out
        of a round replays only the fits it made (at fraction 1 too)."""
        if self.sample is None:
            self.sample = self.sampling(client_manager)
        proxies = {p.node_id: p for p in client_manager.all().values()}
        t = self.ip_context(server_round)
        chosen = {n: {} for n in self.sample.nodes} if t is None else self.sample.next_round(t)
        if self.fraction != FULL:
            size_round(self.secagg, len(chosen))
        config = self.fit_config(server_round)
        return [(proxies[n], FitIns(parameters, {**config, **self.own_fits(where)})) for n, where in chosen.items()]

    def own_fits(self, where: dict) -> dict:
        """A node's ``where`` as its message carries it: at fraction 1 without ``history`` while it
        fitted every IP round at each earlier context (``rounds`` each: the client's default,
        LocalClient.at), so a run without dropouts sends the messages it sent before."""
        fits = [int(h) for h in str(where.get("history", "")).split(",") if h]
        if self.fraction == FULL and all(h == self.rounds for h in fits):
            return {k: v for k, v in where.items() if k != "history"}
        return where

    def sampling(self, client_manager) -> Sampling:
        """The run's Sampling: with ``client-fraction`` < 1 over every client's partition id and
        participation (get_properties, group 0), in partition order; at fraction 1 over every
        node, each taking part at every context (FedAvg's rounds: all clients, one with nothing to
        train on sends zeros), with no query, so every round goes to all and counts their fits."""
        # The legacy workflow registers the grid's nodes with the client manager when one of its
        # num_available/all/sample is called, otherwise only every 5 s: wait_for alone would sleep
        # those 5 s (a SecAgg+ FedIP simulation of 4 clients took 8 s instead of 3).
        client_manager.num_available()
        client_manager.wait_for(int(self.rc["num-clients"]))
        if self.fraction == FULL:
            nodes = sorted(p.node_id for p in client_manager.all().values())
            return Sampling(nodes, [[1] * self.n_contexts] * len(nodes), FULL, int(self.rc["ip-seed"]))
        # group_id "0", not 0: the proxy drops a falsy group id (measure_mod records the group as the round)
        props = sorted(((p.node_id, p.get_properties(GetPropertiesIns({}), timeout=None, group_id="0").properties)
                        for p in client_manager.all().values()), key=lambda item: int(item[1]["partition-id"]))
        if self.public_m is not None:  # DP: the rounds draw over every client (the public m is of all K)
            refuse_empty([int(p["partition-id"]) for _, p in props if not int(str(p["takes-part"]).split(",")[0])])
        return Sampling([n for n, _ in props], [[int(v) for v in str(p["takes-part"]).split(",")] for _, p in props],
                        self.fraction, int(self.rc["ip-seed"]))

    def aggregate_fit(self, server_round, results, failures):
        if server_round > self.rounds:
            write_readout(self.rc, results, {} if self.public_m is None else {
                "ip_clients": self.ip_clients, "ip_sampled": self.public_m,
                "ip_min_clients": flower_dp(self.rc, "distributed").ip_min_clients})
            np.savez(str(self.rc["out"]) + ".ip.npz", gain=self.gain, bias=self.bias)
            return None, {}
        return self.add_update(results), {}

    def add_update(self, results):
        """(g, b) += SecAgg+'s weighted mean update (every result carries it); the new (g, b) as
        the next round's parameters. Only the clients whose vectors made the sum (``results``)
        count a fit: one that dropped out replays none for this round. Distributed DP, sampled: the
        mean of the K' survivors' noisy clipped updates times K' (weights 1: their noisy sum) over
        the public m."""
        self.sample.only_fitted(proxy.node_id for proxy, _ in results)
        dg, db = parameters_to_ndarrays(results[0][1].parameters)
        if self.public_m is not None:
            self.ip_clients.append(len(results))
            dg, db = dg * len(results) / self.public_m, db * len(results) / self.public_m
        self.gain = (self.gain + dg).astype(self.gain.dtype)
        self.bias = (self.bias + db).astype(self.bias.dtype)
        return ndarrays_to_parameters([self.gain, self.bias])


client_app, dropout_client_app = client_apps(lambda context: FedIPClient(context).to_client())
server_app = ServerApp()


@server_app.main()
def main(grid, context) -> None:
    rc = run_config(context)
    run_secagg(grid, context, FedIPStrategy(rc), rounds=int(rc["rounds"]) + 1)
