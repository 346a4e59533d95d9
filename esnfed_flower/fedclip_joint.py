"""FedCLIP joint as a Flower app: per context t, (g, b) reset to (1, 0), then rounds of {an IP round
on D_0..D_t, an IncFed statistics round, an evaluation round on the validation users}, early
stopping as esnfed_core.continual.Joint (the pipeline's JointStopping on pooled_accuracy).

SuperNodes: partition ids 0..num-clients-1 are the training users (data files as FedCLIP's,
esnfed_flower/fedclip.py), the next num-eval-clients are the validation users (evaluation nodes,
<data-dir>/client-<id>.npz with x, y and each window's context). The server first asks every node
its partition id (group 0, phase "role"); then per round k = 1, 2, ... over all contexts:
group 3k-2 ("ip"): (g, b) to the training nodes, their local fits averaged in partition order;
group 3k-1 ("stats"): their ridge statistics summed in partition order and solved at λ;
group 3k ("eval"): (g, b) and the candidate readout to the evaluation nodes, each replies its correct
and total time steps on its windows of contexts 0..t (esnfed_core.readout.evaluate, as the
pipeline's engine.counts). The server sums the integers (exact), so the accuracy of each round, the
stopping and the kept model are the pipeline's. Training ClientApps are stateless: the config's
``history`` (the IP rounds run at each earlier context, comma-separated) lets
esnfed_core.continual.LocalClient.at replay their shuffle generators. Client sampling (run config
``client-fraction`` < 1): the role replies of the training nodes also say at which contexts they
take part, each IP round goes to the sampled ones only, and every training message carries the
node's own fits (esnfed_flower.common.Sampling), as in the naive and replay app.

Outputs: ``out`` (the last readout, .npy) and ``out``.contexts.npz: gain, bias (T, N) and readout
(T, C, N) of the kept model per context, ip_rounds (T,) (rounds up to the best), rounds (T,) (rounds
run), trace (Σ rounds,): every round's validation accuracy, context after context, and capped (T,):
whether max-joint-rounds (absent: no cap, PROTOCOL §5), not early stopping, ended the context.
"""

from __future__ import annotations

import numpy as np
from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from esnfed_core.continual import NUMPY_ENGINE, JointStopping, pooled_accuracy
from esnfed_core.readout import solve
from esnfed_flower.common import (
    client_reply, from_record, measure_mod, partition_contexts, reservoir, run_config, to_record, wait_for_nodes,
)
from esnfed_flower.common import FULL, Sampling, client_fraction
from esnfed_flower.fedclip import CONFIG_KEYS, _round, from_roles, ip_round, reply, role_reply, setup
from esnfed_flower.incfed import stats_sum

client_app = ClientApp(mods=[measure_mod])
server_app = ServerApp()
STRATEGIES = ("joint",)


@client_app.train()
def train(msg: Message, context: Context) -> Message:
    cfg = dict(msg.content["config"])
    pid = int(context.node_config["partition-id"])
    if cfg["phase"] == "role":
        return role_reply(msg, context, STRATEGIES)
    if cfg["phase"] != "eval":
        return reply(msg, context, STRATEGIES)
    # An evaluation node: correct and total steps of the candidate on its contexts 0..t.
    contexts = partition_contexts(context, pid, int(cfg["n-contexts"]))
    gb = from_record(msg.content["ip"])
    res = reservoir(cfg, contexts[0][0].shape[2]).with_ip(gb["gain"], gb["bias"])
    w = from_record(msg.content["readout"])["readout"]
    correct = total = 0
    for x, y in contexts[: int(cfg["context"]) + 1]:
        if len(x):
            c = NUMPY_ENGINE.counts(res, x, y, w)
            correct, total = correct + int(c.correct[0]), total + int(c.total)
    return client_reply(msg, pid, {"correct": correct, "total": total})


def _roles(grid: Grid, nodes: list[int], config: dict, res, n_train: int
           ) -> tuple[list[int], list[int], Sampling | None]:
    """(training node ids, evaluation node ids), each in partition order, and with client
    sampling the training nodes' Sampling."""
    replies = _round(grid, nodes, config, res, 0, context=0, round=0, phase="role")
    training = [r for r in replies if int(r.content["metrics"]["partition-id"]) < n_train]
    ids = [int(r.metadata.src_node_id) for r in replies]
    pids = [int(r.content["metrics"]["partition-id"]) for r in replies]
    fraction = client_fraction(config)
    sample = None if fraction == FULL else from_roles(training, fraction, int(config["ip-seed"]))
    return [n for n, p in zip(ids, pids) if p < n_train], [n for n, p in zip(ids, pids) if p >= n_train], sample


@server_app.main()
def main(grid: Grid, context: Context) -> None:
    rc = run_config(context)
    config = {k: rc[k] for k in CONFIG_KEYS if rc.get(k) is not None}  # patience None: the default
    strategy, cc = setup(config, STRATEGIES)
    patience = strategy.patience_for(True)
    res = reservoir(config, int(rc["n-inputs"]))
    n_train, n_eval = int(rc["num-clients"]), int(rc["num-eval-clients"])
    train_nodes, eval_nodes, sample = _roles(grid, wait_for_nodes(grid, n_train + n_eval), config, res, n_train)
    if len(train_nodes) != n_train or len(eval_nodes) != n_eval:
        raise RuntimeError(f"expected {n_train} training and {n_eval} evaluation nodes, "
                           f"got {len(train_nodes)} and {len(eval_nodes)}")
    group, history, kept, traces, capped = 0, [], [], [], []
    for t in range(int(rc["n-contexts"])):
        cand = res.with_ip(np.ones(res.units), np.zeros(res.units))
        stop, best = JointStopping(patience), None
        where = {"context": t, "history": ",".join(str(h) for h in history)}
        for r in strategy.rounds():  # as Joint.train_context: without end unless max-joint-rounds is set
            cand = ip_round(grid, train_nodes, config, cand, group + 1, sample, round=r, **where)
            total = stats_sum(_round(grid, train_nodes, config, cand, group + 2,
                                     per_node=sample and sample.all_at(train_nodes, t), round=r, phase="stats",
                                     **where))
            w = solve(total, [cc.lam], cc.solver)[0]
            evals = _round(grid, eval_nodes, config, cand, group + 3, extra={"readout": to_record({"readout": w})},
                           round=r, phase="eval", **where)
            group += 3
            counts = [e.content["metrics"] for e in evals]
            if stop.update(pooled_accuracy(sum(int(m["correct"]) for m in counts),
                                           sum(int(m["total"]) for m in counts))):
                best = (cand, w, r + 1)
            if stop.done:
                break
        history.append(len(stop.trace))  # every round run, not only up to the best
        traces.extend(stop.trace)
        capped.append(not stop.done)  # max-joint-rounds, not early stopping, ended the context
        kept.append(best)
    np.savez(str(rc["out"]) + ".contexts.npz", gain=np.stack([b[0].gain for b in kept]),
             bias=np.stack([b[0].bias for b in kept]), readout=np.stack([b[1] for b in kept]),
             ip_rounds=np.array([b[2] for b in kept]), rounds=np.array(history), trace=np.array(traces),
             capped=np.array(capped))
    np.save(str(rc["out"]), kept[-1][1])
