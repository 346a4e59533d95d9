"""FedAvg of readouts as a Flower app: each ClientApp solves its own readout with the broadcast λ
(esnfed_core.readout.solve on its ridge_stats, as esnfed_core.federated.Client.fit_readout); the
ServerApp averages them by window count with esnfed_core.aggregate.weighted_average in partition
order, as esnfed_core.federated.fedavg does. With central DP (run config ``dp-*``,
esnfed_flower.dp) the trusted server releases esnfed_core.privacy.fedavg_aggregate of the same
readouts instead (each clipped to ``dp-fedavg-clip``, N(0, (z·C_avg)²) on the sum, divided by K),
drawn from the private trial's generator: the private FedAvg trial's readout, bit for bit."""

from __future__ import annotations

import numpy as np
from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from esnfed_core.aggregate import weighted_average
from esnfed_core.privacy import fedavg_aggregate
from esnfed_core.readout import solve
from esnfed_flower.common import (
    CLIENT_KEYS, client_reply, from_record, measure_mod, partition, replies_in_order, run_config, wait_for_nodes,
)
from esnfed_flower.dp import flower_dp
from esnfed_flower.incfed import client_stats

client_app = ClientApp(mods=[measure_mod])
server_app = ServerApp()


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    cfg = dict(msg.content["config"])
    pid = int(context.node_config["partition-id"])
    x, y = partition(context, pid)
    w = solve(client_stats(cfg, x, y), float(cfg["lambda"]), str(cfg.get("solver", "cholesky")))
    return client_reply(msg, pid, {"num-examples": len(x)}, readout={"w": w})


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    rc = run_config(context)
    dp = flower_dp(rc, "central")  # None without DP or at ε = ∞: the plain mean
    # DP-FedAvg releases one readout at the run's λ (esnfed_core.private_trial: one release)
    aggregate = fedavg_aggregate(dp.spec, dp.server_rng(), dp.releases) if dp else weighted_average
    config = {k: rc[k] for k in (*CLIENT_KEYS, "lambda", "solver") if k in rc}
    nodes = wait_for_nodes(grid, int(rc["num-clients"]))
    msgs = [Message(RecordDict({"config": ConfigRecord(config)}), dst_node_id=n,
                    message_type=MessageType.TRAIN, group_id="1") for n in nodes]
    replies = replies_in_order(grid.send_and_receive(msgs))
    ws = [from_record(r.content["readout"])["w"] for r in replies]
    weights = [int(r.content["metrics"]["num-examples"]) for r in replies]
    np.save(str(rc["out"]), aggregate(ws, weights))
