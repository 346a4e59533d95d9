"""What the apps share: the run config, a client's data partition and reply, and numpy <-> ArrayRecord."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict

from esnfed_core.method import CONNECTIVITY_KEYS
from esnfed_core.readout import RidgeStats, solve
from esnfed_core.reservoir import Reservoir
from esnfed_core.sampling import FULL, sample_clients, secagg_threshold  # noqa: F401 (the apps' import)
from esnfed_core.trial import make_reservoir

RESERVOIR_KEYS = ("units", "spectral_radius", "leak", "input_scaling")
# What a client's config needs to rebuild the broadcast reservoir and compute its ridge statistics
# (a sparse reservoir's connectivity and readout-bias only when the run config has them: messages
# copy present keys).
CLIENT_KEYS = (*RESERVOIR_KEYS, *CONNECTIVITY_KEYS, "reservoir-seed", "n-classes", "batch-size", "readout-bias")


def readout_bias(cfg: Mapping[str, Any]) -> bool:
    """Whether the run's readout has the bias column (params.yaml readout.bias: ``readout-bias``
    true in the run config, absent otherwise): statistics of the augmented states [S, 1]."""
    return cfg.get("readout-bias") is True


def to_record(arrays: Mapping[str, np.ndarray]) -> ArrayRecord:
    """numpy arrays -> ArrayRecord (dtype and bits kept)."""
    return ArrayRecord({k: Array(np.ascontiguousarray(v)) for k, v in arrays.items()})


def from_record(record: ArrayRecord) -> dict[str, np.ndarray]:
    return {k: v.numpy() for k, v in record.items()}


CONFIG_ENV = "ESNFED_FLOWER_RUN"  # a JSON file of run config (run_simulation takes none)


UNSET = ""  # a key the app project declares (Flower accepts only declared keys) but leaves unset


def run_config(context: Any) -> dict[str, Any]:
    """The run config: the JSON file named by $ESNFED_FLOWER_RUN, then `flwr run`'s on top, without
    the keys left unset ("": esnfed_flower/app/pyproject.toml declares every key the apps read,
    and an absent key keeps its meaning)."""
    out: dict[str, Any] = {}
    if os.environ.get(CONFIG_ENV):
        out.update(json.loads(Path(os.environ[CONFIG_ENV]).read_text()))
    out.update({k: v for k, v in dict(context.run_config).items() if v != UNSET})
    return out


def partition(context: Any, partition_id: int) -> tuple[np.ndarray, np.ndarray]:
    """The client's windows x (W, T, U) and labels (W, T): <data-dir>/client-<id>.npz.

    A SuperNode of a real deployment sets data-dir in its node config (--node-config) to the
    folder of its own user's file; the simulation takes it from the run config.
    """
    with np.load(partition_file(context, partition_id)) as f:
        return f["x"], f["y"]


def partition_file(context: Any, partition_id: int) -> Path:
    """The node config's ``data-file`` (a SuperNode started with its own client's file, as
    `esnfed flower-export` writes its --node-config line), else <data-dir>/client-<id>.npz,
    data-dir from the node config, else from the run config."""
    if context.node_config.get("data-file"):
        return Path(str(context.node_config["data-file"]))
    data_dir = context.node_config.get("data-dir") or run_config(context)["data-dir"]
    return Path(str(data_dir)) / f"client-{partition_id}.npz"


def partition_contexts(context: Any, partition_id: int, n_contexts: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """A continual client's stream: per context t < ``n_contexts``, the windows and labels of
    <data-dir>/client-<id>.npz whose ``context`` entry is t, in file order (a context may have
    none), as esnfed_core.data.processed.UserData.of_context selects them."""
    with np.load(partition_file(context, partition_id)) as f:
        x, y, c = f["x"], f["y"], f["context"]
    return [(x[c == t], y[c == t]) for t in range(n_contexts)]


def reservoir(config: Mapping[str, Any], n_inputs: int) -> Reservoir:
    """The reservoir every client rebuilds from the broadcast config and seed (no weights sent),
    sparse when the config has a connectivity (esnfed_core.reservoir)."""
    cfg = {**{k: config[k] for k in RESERVOIR_KEYS}, **{k: config[k] for k in CONNECTIVITY_KEYS if k in config}}
    return make_reservoir(cfg, n_inputs, int(config["reservoir-seed"]))


def solve_readout(rc: Mapping[str, Any], stats: RidgeStats) -> np.ndarray:
    """The readout (C, N) at the run's ``lambda``; with ``lambdas`` (the DP runs: λ is chosen on
    the validation users afterwards, as the private pipeline's trial chooses it) one per λ (L, C, N)."""
    solver = rc.get("solver", "cholesky")
    if "lambdas" in rc:
        return solve(stats, [float(lam) for lam in rc["lambdas"]], solver)
    return solve(stats, [float(rc["lambda"])], solver)[0]


def wait_for_nodes(grid: Any, n: int, timeout_s: float = 120.0) -> list[int]:
    """The ids of the first ``n`` connected SuperNodes, sorted (the simulation registers them
    asynchronously; a deployment's nodes connect when they start)."""
    import time  # noqa: PLC0415

    deadline = time.monotonic() + timeout_s
    while True:
        ids = sorted(grid.get_node_ids())
        if len(ids) >= n:
            return ids
        if time.monotonic() > deadline:
            raise TimeoutError(f"only {len(ids)} of {n} SuperNodes connected in {timeout_s:.0f} s")
        time.sleep(0.2)


# Run config: params.yaml federated.client_fraction, present only when < 1 (default messages unchanged).
FRACTION_KEY = "client-fraction"


def client_fraction(rc: Mapping[str, Any]) -> float:
    """The share of the participants each IP round samples (``client-fraction``; absent: 1)."""
    return float(rc.get(FRACTION_KEY, FULL))


def sampled_nodes(participants: list[int], fraction: float, seed: int, rnd: int) -> list[int]:
    """The node ids of IP round ``rnd``: those of ``participants`` (node ids in partition order)
    that esnfed_core.sampling.sample_clients draws, as the pipeline's round draws its clients."""
    return [participants[j] for j in sample_clients(len(participants), fraction, seed, rnd)]


class Sampling:
    """The server's client sampling over a FedIP or FedCLIP run (``client-fraction`` < 1; the
    SecAgg+ apps keep one at fraction 1 too, to count the fits of clients that drop out): the
    ``nodes`` in partition order with ``flags``, for each, whether it takes part at each context
    (FedIP: one context, whether it has windows), the run's IP round index (the pipeline's, over
    all contexts) and each node's fits per context, which its messages carry so that the stateless
    client replays only the rounds it fitted."""

    def __init__(self, nodes: list[int], flags: list[list[int]], fraction: float, seed: int):
        self.nodes = list(nodes)
        self.flags = dict(zip(self.nodes, flags))
        self.fraction, self.seed, self.rounds = fraction, seed, 0
        self.fitted = {n: [0] * len(self.flags[n]) for n in self.nodes}
        self.last: tuple[int, list[int]] = (0, [])  # the last round's context and nodes

    def where(self, node: int, t: int) -> dict[str, Any]:
        """The node's own ``history`` (fits at each earlier context) and ``round`` (fits at ``t``)."""
        return {"history": ",".join(str(h) for h in self.fitted[node][:t]), "round": self.fitted[node][t]}

    def next_round(self, t: int) -> dict[int, dict[str, Any]]:
        """The next IP round's sampled nodes (partition order) among context ``t``'s participants,
        each with its ``where``; counts their fits (:meth:`only_fitted` takes back a dropout's)."""
        part = [n for n in self.nodes if self.flags[n][t]]
        if not part:
            raise RuntimeError(f"context {t}: no client has windows to train on")
        chosen = {n: self.where(n, t) for n in sampled_nodes(part, self.fraction, self.seed, self.rounds)}
        for n in chosen:
            self.fitted[n][t] += 1
        self.rounds += 1
        self.last = t, list(chosen)
        return chosen

    def only_fitted(self, nodes: Iterable[int]) -> None:
        """After the last :meth:`next_round`: of its nodes, only ``nodes`` fitted (SecAgg+: those
        whose vectors made the sum). A sampled node that dropped out did not fit, so its count
        goes back: its next round replays the fits it made, its generator unmoved by the lost one."""
        t, chosen = self.last
        kept = set(nodes)
        for n in set(chosen) - kept:
            self.fitted[n][t] -= 1
        self.last = t, [n for n in chosen if n in kept]

    def all_at(self, nodes: list[int], t: int) -> dict[int, dict[str, Any]]:
        """Every node of ``nodes`` with its ``where`` at ``t`` (the readout round)."""
        return {n: self.where(n, t) for n in nodes}


def plain_dropout_mod(msg: Message, context: Any, call_next: Any) -> Message:
    """Simulates a device lost in a plain app's round (tests): the client whose partition id is the
    run config's ``drop-partition`` fails the train message of group ``drop-round`` (the round,
    1-based) instead of replying (SecAgg+'s twin: esnfed_flower.secagg.dropout_mod)."""
    rc = run_config(context)
    drop, in_round = rc.get("drop-partition"), rc.get("drop-round")
    if (drop is not None and int(context.node_config["partition-id"]) == int(drop)
            and str(msg.metadata.group_id) == str(in_round)):
        raise ConnectionError("simulated dropout")
    return call_next(msg, context)


def within_range(values: list[np.ndarray], limit: float, what: str) -> list[np.ndarray]:
    """``values`` when every entry lies within SecAgg+'s clipping range ``limit``; a ValueError
    naming ``what`` otherwise (Flower's quantizer would clip it silently)."""
    worst = max(float(np.max(np.abs(v))) for v in values)
    if not worst <= limit:  # NaN too
        raise ValueError(f"{what} entry {worst:.3g} exceeds the SecAgg+ clipping-range {limit:.3g}")
    return values


def client_reply(msg: Message, pid: int, metrics: Mapping[str, int],
                 **arrays: Mapping[str, np.ndarray]) -> Message:
    """A client's reply to ``msg``: each of ``arrays`` as a record of that name, then ``metrics``
    (``num-examples``: the server's weight) with the partition id (the server's order)."""
    content = {name: to_record(a) for name, a in arrays.items()}
    content["metrics"] = MetricRecord({**metrics, "partition-id": pid})
    return Message(RecordDict(content), reply_to=msg)


def replies_in_order(replies: Any, where: str = "") -> list[Any]:
    """Replies with content, sorted by the partition id they report; an error reply raises,
    naming ``where`` (e.g. "round 2") when given: the plain apps need every reply (no dropouts)."""
    out = []
    for r in replies:
        if not r.has_content():
            if where:
                reason = (str(getattr(r.error, "reason", r.error)).strip().splitlines() or ["?"])[-1]
                raise RuntimeError(f"{where}: node {r.metadata.src_node_id} sent no reply ({reason}); the plain "
                                   f"apps need every sampled client's reply (a dropout stops the run)")
            raise RuntimeError(f"a client failed: {r.error}")
        out.append((int(r.content["metrics"]["partition-id"]), r))
    return [r for _, r in sorted(out, key=lambda t: t[0])]


BYTES_KEY = "bytes-dir"  # run config: where measure_mod writes what each client sent and received


def wire_bytes(msg: Any) -> int:
    """The bytes Flower transfers for a message: its object tree deflated as the SuperLink and
    SuperNodes push and pull it (Message -> RecordDict -> records -> arrays), headers included;
    gRPC framing and the object-tree index are left out."""
    from flwr.supercore.inflatable.inflatable_object import get_all_nested_objects  # noqa: PLC0415

    return int(sum(len(o.deflate()) for o in get_all_nested_objects(msg).values()))


def secagg_stage(msg: Any) -> str:
    """The SecAgg+ stage a message belongs to ("setup", "share_keys", "collect_masked_vectors",
    "unmask"); outside SecAgg+, "plain" for a train message, else its message type (e.g. the
    legacy workflow's one "get_parameters" request to a single client)."""
    from flwr.common.secure_aggregation.secaggplus_constants import RECORD_KEY_CONFIGS, Key  # noqa: PLC0415

    cfg = msg.content.config_records.get(RECORD_KEY_CONFIGS) if msg.has_content() else None
    if cfg is not None and Key.STAGE in cfg:
        return str(cfg[Key.STAGE])
    kind = str(msg.metadata.message_type)
    return "plain" if kind == "train" else kind


def measure_mod(msg: Any, context: Any, call_next: Any) -> Any:
    """A client mod (outermost) that appends, for every message, the bytes received (down) and
    replied (up), its round (group id) and SecAgg+ stage to <bytes-dir>/client-<id>.jsonl;
    nothing when the run config has no bytes-dir."""
    out = run_config(context).get(BYTES_KEY)
    if not out:
        return call_next(msg, context)
    # Before call_next: secaggplus_mod takes its records out of the message it is given.
    rec = {"partition": int(context.node_config["partition-id"]), "round": msg.metadata.group_id,
           "stage": secagg_stage(msg), "down": wire_bytes(msg)}
    reply = call_next(msg, context)
    rec["up"] = wire_bytes(reply)
    with open(Path(str(out)) / f"client-{rec['partition']}.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps(rec) + "\n")
    return reply
