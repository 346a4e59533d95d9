"""FedCLIP (naive and replay) as a Flower app: per context t, ``budget`` FedIP rounds and an IncFed
readout round, as esnfed_core.continual.run_continual.

IP round r of context t: the ServerApp broadcasts (g, b) with (t, r); every ClientApp that takes
part at t (it has windows to train on: D_t, replay D_t ∪ M_t) runs its local fit and uploads
(g_c, b_c) with its FedAvg weight (|D_t,c|, replay |D_t,c| + |M_t,c|); the others reply with no
vector and sit the context out. The server averages with esnfed_core.aggregate.weighted_average in
partition order, as the pipeline's fedip_round. Readout round of context t: the participants upload
their ridge statistics on the trained reservoir; the server sums them in partition order and solves
at λ (esnfed_core.readout.solve), as esnfed_core.federated.incfed. The server keeps the model after
each context: ``out`` (the last readout, .npy) and ``out``.contexts.npz (gain, bias (T, N),
readout (T, C, N)).

ClientApps are stateless (Flower's convention): each message rebuilds the client at (t, r) with
esnfed_core.continual.LocalClient.at (its shuffle generator and replay buffer replayed from the
seed through the earlier contexts and rounds); its data is its stream, <data-dir>/client-<id>.npz
with x, y and each window's context (esnfed_flower.common.partition_contexts).

Client sampling (run config ``client-fraction`` < 1, params.yaml federated.client_fraction): the
server first asks every node its partition id and the contexts it takes part in (group 0, phase
``role``); IP round k of the run (over all contexts) then goes only to the participants of its
context that esnfed_core.sampling.sample_clients draws for k, in partition order (the pipeline's
sets), and the server averages their replies; the readout round still goes to every node. A client
left out of a round does not fit, so its generator must not move: each message carries that
node's own count of earlier fits (``history``: per earlier context, ``round``: at this one), which
only the server knows (it samples among the participants, whose data the client does not see);
LocalClient.at replays exactly those fits. Sending the counts keeps the client free of the
sampling rule and of the other clients' participation, which recomputing the sets would need.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from flwr.app import ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from esnfed_core.aggregate import weighted_average
from esnfed_core.continual import JOINT_MAX_ROUNDS, ContinualConfig, LocalClient, make_strategy
from esnfed_core.method import CONNECTIVITY_KEYS
from esnfed_core.readout import solve
from esnfed_core.reservoir import Reservoir
from esnfed_flower.common import (
    FRACTION_KEY, FULL, RESERVOIR_KEYS, Sampling, client_fraction, client_reply, from_record, measure_mod,
    partition_contexts, readout_bias, replies_in_order, reservoir, run_config, to_record, wait_for_nodes,
)
from esnfed_flower.fedip import IP_KEYS, ip_config
from esnfed_flower.incfed import stats_reply, stats_sum

client_app = ClientApp(mods=[measure_mod])
server_app = ServerApp()
STRATEGIES = ("naive", "replay")
# What every message's config carries (the server's run config, without paths).
CONFIG_KEYS = (*RESERVOIR_KEYS, *CONNECTIVITY_KEYS, "reservoir-seed", "n-classes", "n-contexts", "strategy",
               "budget", "replay-fraction", "replay-batch", "replay-shuffle", "replay-policy", "ip-seed", "local-epochs", "lambda",
               "solver", *IP_KEYS)
CONFIG_KEYS += ("patience", "max-joint-rounds")  # joint (esnfed_flower/fedclip_joint.py)
CONFIG_KEYS += ("readout-bias",)  # readout.bias, only when on (messages copy present keys)
CONFIG_KEYS += (FRACTION_KEY,)  # federated.client_fraction, only when < 1


def setup(cfg: dict[str, Any], strategies: tuple[str, ...] = STRATEGIES) -> tuple[Any, ContinualConfig]:
    """The run's strategy and ContinualConfig from the message config (as esnfed_core.trial
    builds them for a FedCLIP trial); joint: esnfed_flower/fedclip_joint.py."""
    if cfg["strategy"] not in strategies:
        raise ValueError(f"strategy: the app runs {' | '.join(strategies)}, got {cfg['strategy']!r}")
    patience, cap = cfg.get("patience"), cfg.get("max-joint-rounds")  # absent (None): the default, no cap
    strategy = make_strategy(str(cfg["strategy"]), budget=int(cfg.get("budget", 0)),
                             replay_fraction=float(cfg.get("replay-fraction", 0.05)),
                             replay_batch=int(cfg.get("replay-batch", 32)),
                             replay_shuffle=bool(cfg.get("replay-shuffle", False)),
                             replay_policy=str(cfg.get("replay-policy", "uniform")),
                             patience=None if patience is None else int(patience),
                             max_joint_rounds=JOINT_MAX_ROUNDS if cap is None else int(cap))
    config = ContinualConfig(True, ip_config(cfg), int(cfg["n-classes"]), local_epochs=int(cfg["local-epochs"]),
                             lam=float(cfg["lambda"]), seed=int(cfg["ip-seed"]),
                             solver=str(cfg.get("solver", "cholesky")), bias=readout_bias(cfg))
    return strategy, config


def client_at(cfg: dict[str, Any], context: Context, gain: np.ndarray, bias: np.ndarray,
              strategies: tuple[str, ...] = STRATEGIES) -> tuple[LocalClient, Reservoir]:
    """This node's client rebuilt at the message's (context, round) from its stream (joint: with
    the rounds run at each earlier context, the config's ``history``), and the broadcast reservoir
    (rebuilt from the config, with the sent (g, b))."""
    contexts = partition_contexts(context, int(context.node_config["partition-id"]), int(cfg["n-contexts"]))
    strategy, config = setup(cfg, strategies)
    # The readout round needs the buffer at t, not the shuffles: rebuilt at round 0.
    rnd = int(cfg["round"]) if cfg["phase"] == "ip" else 0
    history = [int(h) for h in str(cfg["history"]).split(",") if h] if "history" in cfg else None
    client = LocalClient.at(strategy, config, contexts, int(cfg["context"]), rnd, history=history)
    return client, reservoir(cfg, contexts[0][0].shape[2]).with_ip(gain, bias)


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    return reply(msg, context)


def reply(msg: Message, context: Context, strategies: tuple[str, ...] = STRATEGIES) -> Message:
    """A training node's reply to an IP ("ip"), statistics ("stats") or role ("role") message."""
    cfg = dict(msg.content["config"])
    pid = int(context.node_config["partition-id"])
    t, phase = int(cfg["context"]), str(cfg["phase"])
    if phase == "role":
        return role_reply(msg, context, strategies)
    gb = from_record(msg.content["ip"])
    client, res = client_at(cfg, context, gb["gain"], gb["bias"], strategies)
    if not client.takes_part(t):  # no windows to train on at t: sits the context out
        return client_reply(msg, pid, {"num-examples": 0})
    if phase == "stats":
        return stats_reply(msg, client.stats(res, t), pid)
    fitted = client.fit(res, t)
    return client_reply(msg, pid, {"num-examples": client.weight(t)}, ip={"gain": fitted.gain, "bias": fitted.bias})


def role_reply(msg: Message, context: Context, strategies: tuple[str, ...] = STRATEGIES) -> Message:
    """A node's reply to the role query (group 0): its partition id; with client sampling also
    ``takes-part``, whether it has windows to train on at each context (1/0: the participants the
    server samples among; a replay buffer's size, hence this, does not depend on the shuffles)."""
    cfg = dict(msg.content["config"])
    pid = int(context.node_config["partition-id"])
    if client_fraction(cfg) == FULL:
        return client_reply(msg, pid, {})
    return client_reply(msg, pid, {"takes-part": participation(cfg, context, strategies)})


def participation(cfg: dict[str, Any], context: Context, strategies: tuple[str, ...] = STRATEGIES) -> list[int]:
    """Whether this node has windows to train on at each context (1/0; replay: D_t ∪ M_t)."""
    contexts = partition_contexts(context, int(context.node_config["partition-id"]), int(cfg["n-contexts"]))
    strategy, config = setup(cfg, strategies)
    return [int(LocalClient.at(strategy, config, contexts, t, 0, history=[0] * t).takes_part(t))
            for t in range(len(contexts))]


def sampling(grid: Grid, nodes: list[int], config: dict, res: Reservoir) -> Sampling | None:
    """With ``client-fraction`` < 1, the role query to ``nodes`` (group 0) and the run's Sampling;
    None otherwise (no query: the default messages stay as they were)."""
    fraction = client_fraction(config)
    if fraction == FULL:
        return None
    return from_roles(_round(grid, nodes, config, res, 0, context=0, round=0, phase="role"), fraction,
                      int(config["ip-seed"]))


def from_roles(roles: list[Message], fraction: float, seed: int) -> Sampling:
    """The Sampling of the role replies ``roles`` (partition order; ``takes-part`` each)."""
    return Sampling([int(r.metadata.src_node_id) for r in roles],
                    [[int(v) for v in r.content["metrics"]["takes-part"]] for r in roles], fraction, seed)


def _round(grid: Grid, nodes: list[int], config: dict, res: Reservoir, group: int, extra: dict | None = None,
           per_node: dict[int, dict[str, Any]] | None = None, **where: Any) -> list[Message]:
    """Send (g, b), the ``extra`` records and the config with ``where`` (context, round, phase)
    and the node's ``per_node`` entries to every node of ``nodes``; the replies in partition order."""
    down = to_record({"gain": res.gain, "bias": res.bias})
    own = per_node or {}
    msgs = [Message(RecordDict({"config": ConfigRecord({**config, **where, **own.get(n, {})}), "ip": down,
                                **(extra or {})}),
                    dst_node_id=n,
                    message_type=MessageType.TRAIN, group_id=str(group)) for n in nodes]
    return replies_in_order(grid.send_and_receive(msgs))


def ip_round(grid: Grid, nodes: list[int], config: dict, res: Reservoir, group: int,
             sample: Sampling | None = None, **where: Any) -> Reservoir:
    """One FedIP round of context ``where["context"]``: the participants' fits from ``res``
    averaged in partition order with their FedAvg weights (the pipeline's fedip_round); with
    ``sample``, only the round's sampled participants are sent it."""
    per_node = None
    if sample is not None:
        per_node = sample.next_round(int(where["context"]))
        nodes = list(per_node)
    ups = [u for u in _round(grid, nodes, config, res, group, per_node=per_node, phase="ip", **where)
           if "ip" in u.content]
    if not ups or (per_node is not None and len(ups) != len(per_node)):
        raise RuntimeError(f"context {where['context']}: no client has windows to train on"
                           if not ups else f"context {where['context']}: a sampled client sent no update")
    vecs = [from_record(u.content["ip"]) for u in ups]
    weights = [int(u.content["metrics"]["num-examples"]) for u in ups]
    return res.with_ip(weighted_average([v["gain"] for v in vecs], weights),
                       weighted_average([v["bias"] for v in vecs], weights))


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    rc = run_config(context)
    config = {k: rc[k] for k in CONFIG_KEYS if k in rc}
    strategy, cc = setup(config)
    res = reservoir(config, int(rc["n-inputs"]))
    nodes = wait_for_nodes(grid, int(rc["num-clients"]))
    sample = sampling(grid, nodes, config, res)
    group = 0  # the messages' group id: rounds numbered 1, 2, ... over all contexts
    gains, biases, readouts = [], [], []
    for t in range(int(rc["n-contexts"])):
        for r in range(strategy.budget):
            group += 1
            res = ip_round(grid, nodes, config, res, group, sample, context=t, round=r)
        group += 1
        total = stats_sum(_round(grid, nodes, config, res, group, per_node=sample and sample.all_at(nodes, t),
                                 context=t, round=strategy.budget, phase="stats"))
        if total is None:
            raise RuntimeError(f"context {t}: no client has windows to train on")
        gains.append(res.gain)
        biases.append(res.bias)
        readouts.append(solve(total, [cc.lam], cc.solver)[0])
    np.savez(str(rc["out"]) + ".contexts.npz", gain=np.stack(gains), bias=np.stack(biases),
             readout=np.stack(readouts))
    np.save(str(rc["out"]), readouts[-1])
