"""IncFed as a Flower app: each ClientApp uploads its ridge statistics (A, B, n) computed with
esnfed_core.readout.ridge_stats; the ServerApp sums them in partition order and solves with
esnfed_core.readout.solve, as esnfed_core.federated.incfed does. With central DP (run config
``dp-*``, esnfed_flower.dp) the trusted server releases esnfed_core.privacy.private_stats of the
clients' statistics instead of their sum, as the private pipeline's trial does."""

from __future__ import annotations

import numpy as np
from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from esnfed_core.privacy import private_stats
from esnfed_core.readout import RidgeStats, ridge_stats
from esnfed_flower.common import (
    CLIENT_KEYS, client_reply, from_record, measure_mod, partition, readout_bias, replies_in_order, reservoir,
    run_config, solve_readout, to_record, wait_for_nodes,
)
from esnfed_flower.dp import FlowerDP, flower_dp

client_app = ClientApp(mods=[measure_mod])
server_app = ServerApp()


def client_stats(cfg: dict, x: np.ndarray, y: np.ndarray, gb: dict | None = None) -> RidgeStats:
    """A client's ridge statistics on the broadcast reservoir; ``gb``: FedIP's trained
    {"gain", "bias"} (its last round)."""
    res = reservoir(cfg, x.shape[2])
    if gb is not None:
        res = res.with_ip(gb["gain"], gb["bias"])
    return ridge_stats(res, x, y, int(cfg["n-classes"]), int(cfg["batch-size"]), readout_bias(cfg))


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    cfg = dict(msg.content["config"])
    pid = int(context.node_config["partition-id"])
    x, y = partition(context, pid)
    gb = from_record(msg.content["ip-final"]) if "ip-final" in msg.content else None
    return stats_reply(msg, client_stats(cfg, x, y, gb), pid)


def stats_reply(msg: Message, s: RidgeStats, pid: int) -> Message:
    """A client's reply to ``msg``: its statistics (A, B) and counts, and its partition id (and,
    with readout.bias, ``readout-bias`` 1: the statistics are of [S, 1])."""
    metrics = {"num-examples": s.n_windows, "n-steps": s.n_steps, **({"readout-bias": 1} if s.bias else {})}
    return client_reply(msg, pid, metrics, stats={"a": s.a, "b": s.b})


def stats_list(replies: list[Message]) -> list[RidgeStats]:
    """The replies' statistics in the given (partition) order; replies without statistics are skipped."""
    out = []
    for r in replies:
        if "stats" not in r.content:
            continue
        arr = from_record(r.content["stats"])
        m = r.content["metrics"]
        bias = "readout-bias" in m and int(m["readout-bias"]) == 1
        out.append(RidgeStats(arr["a"], arr["b"], int(m["n-steps"]), int(m["num-examples"]), bias))
    return out


def stats_sum(replies: list[Message]) -> RidgeStats | None:
    """The sum of the replies' statistics in the given (partition) order, as the pipeline's
    esnfed_core.federated.incfed sums its clients'; replies without statistics are skipped."""
    total = None
    for s in stats_list(replies):
        total = s if total is None else total + s
    return total


def release(replies: list[Message], dp: FlowerDP | None, rng: np.random.Generator | None) -> RidgeStats:
    """What the server solves from: the replies' sum, or with central DP the Gaussian mechanism of
    esnfed_core.privacy on their statistics (``rng``: the server's, shared by FedIP's releases)."""
    if dp is None:
        return stats_sum(replies)
    return private_stats(stats_list(replies), dp.spec, rng, dp.releases)


def collect_stats(grid: Grid, config: dict, ip: dict | None = None, rnd: int = 1) -> list[Message]:
    """Ask every node for its statistics; the replies in partition order (as the pipeline's
    clients). ``ip``: FedIP's trained {"gain", "bias"}, sent along with the config; ``rnd``: the
    round (the messages' group id)."""
    nodes = wait_for_nodes(grid, int(config["num-clients"]))
    content = {"config": ConfigRecord(config)}
    if ip is not None:
        content["ip-final"] = to_record(ip)
    msgs = [Message(RecordDict(dict(content)), dst_node_id=n, message_type=MessageType.TRAIN,
                    group_id=str(rnd)) for n in nodes]
    return replies_in_order(grid.send_and_receive(msgs))


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    rc = run_config(context)
    dp = flower_dp(rc, "central")
    config = {k: rc[k] for k in (*CLIENT_KEYS, "num-clients") if k in rc}
    total = release(collect_stats(grid, config), dp, dp.server_rng() if dp else None)
    np.save(str(rc["out"]), solve_readout(rc, total))
