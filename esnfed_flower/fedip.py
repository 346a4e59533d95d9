"""FedIP as a Flower app: R rounds in which every ClientApp runs ``local-epochs`` IP epochs
(esnfed_core.plasticity.ip_epoch) from the broadcast (g, b) and uploads its own; the ServerApp
averages with esnfed_core.federated.weighted_average in partition order, then runs the IncFed
round of esnfed_flower.incfed on the trained reservoir. With central DP (esnfed_flower.dp) each
round is esnfed_core.privacy's fedip_aggregate (clipped updates plus noise) and the IncFed round its
private_stats, all drawn from one server generator, as the private pipeline's trial draws them.

ClientApps are stateless (Flower's convention): a client's shuffling generator is rebuilt from
the seed and advanced past the permutations of its earlier epochs, so it draws exactly what the
pipeline's long-lived generator draws (esnfed_core.federated.fedip).

Client sampling (run config ``client-fraction`` < 1, params.yaml federated.client_fraction): the
server first asks every node its partition id and window count (group 0, ``role``), then sends
round r only to the nodes esnfed_core.sampling.sample_clients draws among those with windows, in
partition order (the pipeline's sets), and averages their replies. A client's ``round`` is then the
number of rounds it fitted before (the server counts them), so its generator skips only the
permutations it drew: a client left out of a round does not fit, as in the pipeline. Under central
DP the sampled round's private average divides by the public m = max(1, ⌊f·K⌋) of the K clients
(each must have windows), with z of the run config's accounting (``dp-amplification``,
esnfed_flower.dp): the private trial's sampled rounds, draw for draw. No dropouts: a round missing a
reply stops the run in one line naming it (``dropout_client_app``: tests, a client lost in a round).
"""

from __future__ import annotations

import numpy as np
from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from esnfed_core.federated import weighted_average
from esnfed_core.plasticity import IPConfig, ip_epoch
from esnfed_core.privacy import fedip_aggregate
from esnfed_core.reservoir import Reservoir
from esnfed_core.sampling import sample_size
from esnfed_flower.common import (
    CLIENT_KEYS, FULL, Sampling, client_fraction, client_reply, from_record, measure_mod, partition,
    plain_dropout_mod, replies_in_order, reservoir, run_config, solve_readout, to_record, wait_for_nodes,
)
from esnfed_flower.dp import flower_dp
from esnfed_flower.incfed import collect_stats, release
from esnfed_flower.incfed import train as incfed_train

client_app = ClientApp(mods=[measure_mod])
dropout_client_app = ClientApp(mods=[measure_mod, plain_dropout_mod])  # tests: a client lost in a round
server_app = ServerApp()
IP_KEYS = ("sigma", "mu", "eta", "ip-batch-size", "ip-normalize-step")


def ip_config(cfg: dict) -> IPConfig:
    """The IP rule of the run config (params.yaml plasticity and the config's σ)."""
    return IPConfig(sigma=float(cfg["sigma"]), mu=float(cfg["mu"]), eta=float(cfg["eta"]),
                    batch_size=int(cfg["ip-batch-size"]),
                    normalize_step=bool(cfg.get("ip-normalize-step", True)))


def local_ip(cfg: dict, x: np.ndarray, gain: np.ndarray, bias: np.ndarray, rnd: int) -> Reservoir:
    """Local fit ``rnd`` (0-based: the rounds this client fitted before; every earlier round unless
    the server samples) of a client's IP epochs from the broadcast (g, b): the reservoir after
    ``local-epochs`` ip_epoch calls, the shuffling generator rebuilt from ``ip-seed`` and advanced
    past the permutations of its earlier fits' epochs."""
    res = reservoir(cfg, x.shape[2]).with_ip(gain, bias)
    ip = ip_config(cfg)
    rng = np.random.default_rng(int(cfg["ip-seed"]))
    epochs = int(cfg["local-epochs"])
    for _ in range(rnd * epochs):  # the permutations of the earlier rounds' epochs
        rng.permutation(len(x))
    for _ in range(epochs):
        res = ip_epoch(res, x, ip, rng)
    return res


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    cfg = dict(msg.content["config"])
    pid = int(context.node_config["partition-id"])
    if cfg.get("phase") == "role":  # client sampling: the server's partition order
        return client_reply(msg, pid, {"windows": len(partition(context, pid)[0])})
    if "ip" not in msg.content:  # the final IncFed round
        return incfed_train(msg, context)
    x, _ = partition(context, pid)
    gb = from_record(msg.content["ip"])
    res = local_ip(cfg, x, gb["gain"], gb["bias"], int(cfg["round"]))
    return client_reply(msg, pid, {"num-examples": len(x)}, ip={"gain": res.gain, "bias": res.bias})


dropout_client_app.train()(train)


def with_windows(grid: Grid, nodes: list[int], config: dict, every: bool = False) -> list[int]:
    """The ids of the nodes with windows in partition order (group 0, phase ``role``): the
    clients the pipeline's FedIP samples its rounds from. ``every`` (DP-FedIP: the rounds draw
    over every training client, so the public m is of all of them): a node without windows is a
    ValueError naming its partition, the pipeline's refusal (esnfed_core.private_trial.sampled_denominator)."""
    msgs = [Message(RecordDict({"config": ConfigRecord({**config, "phase": "role"})}), dst_node_id=n,
                    message_type=MessageType.TRAIN, group_id="0") for n in nodes]
    replies = replies_in_order(grid.send_and_receive(msgs))
    if every:
        refuse_empty([int(r.content["metrics"]["partition-id"]) for r in replies
                      if int(r.content["metrics"]["windows"]) == 0])
    return [int(r.metadata.src_node_id) for r in replies if int(r.content["metrics"]["windows"]) > 0]


def refuse_empty(empty: list[int]) -> None:
    """A ValueError naming client-fraction and the first of the partitions ``empty`` (those without
    windows) when there is one: DP-FedIP's sampled rounds draw over every training client (plain
    and SecAgg+ apps), as the pipeline's trial refuses (esnfed_core.private_trial.sampled_denominator)."""
    if empty:
        raise ValueError(f"client-fraction: DP-FedIP samples over every training client, but partition "
                         f"{empty[0]} has no windows; set it to 1")


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    rc = run_config(context)
    dp = flower_dp(rc, "central")
    rng = dp.server_rng() if dp else None  # one generator for the R rounds and the IncFed release
    private = fedip_aggregate(dp.spec, rng, dp.releases) if dp else None
    config = {k: rc[k] for k in (*CLIENT_KEYS, "num-clients", "ip-seed", "local-epochs", *IP_KEYS) if k in rc}
    res = reservoir(config, int(rc["n-inputs"]))
    nodes = wait_for_nodes(grid, int(rc["num-clients"]))
    sample = None
    if client_fraction(rc) != FULL:
        with_x = with_windows(grid, nodes, config, every=dp is not None)
        sample = Sampling(with_x, [[1]] * len(with_x), client_fraction(rc), int(rc["ip-seed"]))
        if dp is not None:  # divide by the public m, as esnfed_core.private_trial.sampled_denominator
            private = fedip_aggregate(dp.spec, rng, dp.releases, clients=sample_size(len(nodes), client_fraction(rc)))
    for rnd in range(int(rc["rounds"])):
        down = to_record({"gain": res.gain, "bias": res.bias})
        # Sampling: the round's nodes, each with its own fits so far as its round
        chosen = {n: {"round": rnd} for n in nodes} if sample is None else sample.next_round(0)
        msgs = [Message(RecordDict({"config": ConfigRecord({**config, **where}), "ip": down}),
                        dst_node_id=n, message_type=MessageType.TRAIN, group_id=str(rnd + 1))
                for n, where in chosen.items()]
        replies = replies_in_order(grid.send_and_receive(msgs), f"round {rnd + 1}")
        ups = [from_record(r.content["ip"]) for r in replies]
        weights = [int(r.content["metrics"]["num-examples"]) for r in replies]
        gains, biases = [u["gain"] for u in ups], [u["bias"] for u in ups]
        if private is not None:  # as esnfed_core.plasticity.fedip_round calls it
            res = res.with_ip(*private(res, gains, biases, weights))
        else:
            res = res.with_ip(weighted_average(gains, weights), weighted_average(biases, weights))
    # The IncFed round on the trained reservoir: clients rebuild it from the config and (g, b).
    replies = collect_stats(grid, config, {"gain": res.gain, "bias": res.bias}, int(rc["rounds"]) + 1)
    np.save(str(rc["out"]), solve_readout(rc, release(replies, dp, rng)))
    np.savez(str(rc["out"]) + ".ip.npz", gain=res.gain, bias=res.bias)
