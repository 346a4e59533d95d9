"""`python -m esnfed_flower.run RUN_JSON [RUN_JSON ...]`: apps in Flower's simulation engine, one
after the other in one Ray session (esnfed_flower/session.py), called by `esnfed flower`
(esnfed_stages/studies/flower.py) with the Flower environment's interpreter.

Each RUN_JSON is the apps' run config (esnfed_flower.common.run_config) plus ``app`` (incfed | fedip |
fedavg) and ``secagg`` (true: the SecAgg+ app). The app writes its readout to ``out`` (FedIP also
``out``.ip.npz); this module writes ``out``.bytes.json: what measure_mod counted per client, by
phase (FedIP's IP rounds or the statistics round) and SecAgg+ stage. Exit 1 with one line when a
RUN_JSON names no app (before any simulation) or an app wrote no readout (the later ones do not run).
"""

from __future__ import annotations

import importlib
import json
import sys
from collections import defaultdict
from functools import lru_cache
from pathlib import Path
from typing import Any

from esnfed_core.method import Method
from esnfed_core.methods import Sends, Traffic
from esnfed_flower.common import BYTES_KEY, FRACTION_KEY
from esnfed_flower.session import shared_ray, use_run

APPS = {("incfed", False): "incfed", ("fedip", False): "fedip", ("fedavg", False): "fedavg",
        ("incfed", True): "secagg", ("fedip", True): "secagg_fedip"}
# FedCLIP: one app for both strategies; ``rounds`` = the IP rounds per context (budget).
APPS.update({(f"fedclip-{s}", secagg): "secagg_fedclip" if secagg else "fedclip"
             for s in ("naive", "replay") for secagg in (False, True)})
APPS[("fedclip-joint", False)] = "fedclip_joint"  # joint: evaluation nodes, plain only


@lru_cache(maxsize=None)
def traffic(app: str) -> Traffic:
    """What the method of ``app`` (an app is named by its method id) sends, as the pipeline models it
    (esnfed_core.methods.Traffic): the phases its rounds are measured by."""
    return Method.parse(app).traffic


def phase(app: str, rnd: int, rounds: int) -> str:
    """What a round sends: FedIP's rounds 1..R update (g, b) ("ip"); the last round (every
    round of IncFed/FedAvg) is the readout's ("stats" or "readout"); FedCLIP's rounds run
    context by context, ``rounds`` IP rounds then one statistics round each; FedCLIP joint's
    group 0 asks the nodes' roles, then each round is an IP, a statistics and an evaluation group.
    Group 0 is the role query wherever it runs (joint; FedIP and FedCLIP under client sampling)."""
    if rnd == 0:
        return "role"
    t = traffic(app)
    if t.readout_every_round:  # FedCLIP joint
        return ("ip", "stats", "eval")[(rnd - 1) % 3]
    if t.per_context:  # FedCLIP
        return "ip" if (rnd - 1) % (rounds + 1) < rounds else "stats"
    if t.ip_rounds and rnd <= rounds:  # FedIP
        return "ip"
    return "readout" if t.sends == Sends.readout else "stats"


def summarise(records: list[dict[str, Any]], app: str, rounds: int, n_clients: int,
              sampled: bool = False) -> dict[str, Any]:
    """Bytes per client per round by (phase, stage), averaged over clients (joint: the nodes the
    phase reaches; ``sampled``, client sampling: the (client, round) pairs that had a message) and
    rounds, and each training client's totals (mean and max over clients)."""
    cells: dict[tuple[str, str], dict[str, Any]] = defaultdict(lambda: {"up": 0, "down": 0, "msgs": 0,
                                                                         "rounds": set(), "nodes": set(),
                                                                         "pairs": set()})
    totals: dict[int, dict[str, int]] = defaultdict(lambda: {"up": 0, "down": 0})
    for r in records:
        c = cells[(phase(app, int(r["round"]), rounds), r["stage"])]
        c["up"] += r["up"]
        c["down"] += r["down"]
        c["msgs"] += 1
        c["rounds"].add(int(r["round"]))
        c["nodes"].add(r["partition"])
        c["pairs"].add((r["partition"], int(r["round"])))
        if r["partition"] < n_clients:  # joint's evaluation nodes (the ids after) only in their rows
            totals[r["partition"]]["up"] += r["up"]
            totals[r["partition"]]["down"] += r["down"]
    rows = []
    for (ph, stage), c in sorted(cells.items()):
        # FedCLIP joint: a phase reaches either the training or the evaluation nodes, not both.
        per = (len(c["pairs"]) if sampled else
               (len(c["nodes"]) if traffic(app).readout_every_round else n_clients) * len(c["rounds"]))
        rows.append({"phase": ph, "stage": stage, "rounds": len(c["rounds"]), "messages": c["msgs"],
                     "up_per_client_round": c["up"] / per, "down_per_client_round": c["down"] / per})
    ups = [t["up"] for t in totals.values()]
    downs = [t["down"] for t in totals.values()]
    return {"rows": rows, "clients_measured": len(totals),
            "up_per_client": {"mean": sum(ups) / n_clients, "max": max(ups, default=0)},
            "down_per_client": {"mean": sum(downs) / n_clients, "max": max(downs, default=0)}}


def app_key(rc: dict[str, Any]) -> tuple[str, bool]:
    """A run config's key in APPS: (app, SecAgg+)."""
    return str(rc["app"]), bool(rc.get("secagg", False))


def simulate(path: str, rc: dict[str, Any], session_config: Path) -> int:
    """One app's simulation in the open session: its readout, then ``out``.bytes.json."""
    from flwr.simulation import run_simulation  # noqa: PLC0415

    key = app_key(rc)
    module = importlib.import_module(f"esnfed_flower.{APPS[key]}")
    use_run(session_config, rc)
    Path(str(rc[BYTES_KEY])).mkdir(parents=True, exist_ok=True)
    n = int(rc["num-clients"])
    nodes = n + int(rc.get("num-eval-clients", 0))  # joint: the validation users' nodes too
    run_simulation(module.server_app, module.client_app, num_supernodes=nodes,
                   backend_config={"client_resources": {"num_cpus": 1},
                                   "init_args": {"num_cpus": int(rc.get("cpus", 2))}})
    out = Path(str(rc["out"]))
    if not out.is_file():
        print(f"{out}: the Flower app of {path} wrote no readout (see the simulation's log above)", file=sys.stderr)
        return 1
    records = [json.loads(line) for f in sorted(Path(str(rc[BYTES_KEY])).glob("client-*.jsonl"))
               for line in f.read_text().splitlines() if line.strip()]
    summary = summarise(records, key[0], int(rc.get("rounds", 0)), n, sampled=FRACTION_KEY in rc)
    Path(str(out) + ".bytes.json").write_text(json.dumps(summary, indent=2))
    return 0


def main(paths: list[str]) -> int:
    runs = [(path, json.loads(Path(path).read_text())) for path in paths]
    for path, rc in runs:
        key = app_key(rc)
        if key not in APPS:
            print(f"{path}: no Flower app for app={key[0]!r} secagg={key[1]}", file=sys.stderr)
            return 1
    with shared_ray(max(int(rc.get("cpus", 2)) for _, rc in runs)) as session_config:
        for path, rc in runs:
            if simulate(path, rc, session_config):
                return 1
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        print("usage: python -m esnfed_flower.run RUN_JSON [RUN_JSON ...]", file=sys.stderr)
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
