"""Cost against the number of clients: the same total of windows split over 10, 100, 1,000 and
10,000 clients, through the CLI as a user runs it (each command in its own process).

    .venv/bin/python benchmarks/bench_clients.py                       # ~10 min on 2 busy cores
    .venv/bin/python benchmarks/bench_clients.py --smoke               # seconds: 4 and 8 clients

For each client count: a CSV is generated (``--windows`` windows of ``--steps`` rows in all, each
client's windows in two contexts), then ``esnfed import``, ``esnfed partition`` (validation and
test 20 % of the clients each) and, for each method of ``--methods``, ``select --pct all`` ->
``retrain`` -> ``assess`` at a tiny budget (1 trial, 1 retrain, ``--units`` units, FedIP one round
of one epoch). Each command runs alone in its own process with in-process trials (``runner:
sequential``, so the process's peak RSS is the stage's), measured by ``os.wait4``: wall seconds
CPU seconds (user + system) and peak RSS. Prints one Markdown table (a row per stage, a column per client count; each cell
CPU seconds, wall seconds in brackets, and peak RSS), the command, and the records as JSON on its
last line.

``--fraction F`` also runs each federated method under client sampling
(``federated.client_fraction: F``, a ``Method`` suffix ``@F`` in the table).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
import tempfile
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _measure import run_usage  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
ESNFED = [sys.executable, "-m", "esnfed_cli"]
CONTEXTS = ("c0", "c1")
CLASSES = ("a", "b", "c")


def write_csv(path: Path, clients: int, windows: int, steps: int, seed: int = 0) -> int:
    """``windows`` windows of ``steps`` one-second rows in all over ``clients`` clients, each client's
    half in context c0 then half in c1; three features whose mean follows the label (runs of
    ``steps // 2`` rows). Returns the windows per client."""
    per = windows // clients
    if per < 2 or per % 2:
        raise SystemExit(f"--windows {windows} over {clients} clients: need an even number >= 2 per client")
    rows = per * steps
    rng = np.random.default_rng(seed)
    t = np.arange(rows)
    ctx = np.where(t < rows // 2, 0, 1)
    with open(path, "w") as f:
        f.write("user,t,label,context,x0,x1,x2\n")
        for c in range(clients):
            label = rng.integers(0, len(CLASSES), rows // max(1, steps // 2) + 1).repeat(max(1, steps // 2))[:rows]
            x = label[:, None] * np.array([1.0, -0.5, 0.25]) + 0.8 * rng.standard_normal((rows, 3))
            lines = [f"u{c},{t[i]},{CLASSES[label[i]]},{CONTEXTS[ctx[i]]},{x[i, 0]:.3f},{x[i, 1]:.3f},{x[i, 2]:.3f}\n"
                     for i in range(rows)]
            f.writelines(lines)
    return per


def write_params(root: Path, source: Path, steps: int, units: int, fraction: float | None) -> Path:
    """The repository's params with the dataset ``example`` read from ``source`` alone and a tiny budget."""
    from esnfed_stages.params.schema import embedded_read  # noqa: PLC0415

    p = yaml.safe_load((REPO / "params.yaml").read_text())
    p["imports"]["example"] = {"source": str(source), "user": "user", "time": "t", "time_unit": "s", "label": "label",
                               "context": "context", "contexts": list(CONTEXTS), "classes": list(CLASSES),
                               "features": ["x0", "x1", "x2"], "rate": 1, "window": steps}
    p["imported"] = {"example": str(source)}
    p["datasets"], p["continual_datasets"], p["study_datasets"] = ["example"], ["example"], []
    p["partition"]["example"] = {"fractions": {"validation": 0.2, "test": 0.2}, "seed": 0}
    p["assess"]["activation_datasets"] = []
    p["embedded"] = embedded_read(p)
    p["budget"] = "default"
    budget = p["budgets"]["default"]
    budget.update(trials=1, retrains=1)
    budget["space"]["example"]["units"] = [units]
    budget["space"]["fedip"].update(rounds=[1], local_epochs=[1])
    budget["space"]["ip"].update(rounds=[1])
    p["continual"]["joint"]["max_rounds"] = 2
    p["runner"] = {**p["runner"], "backend": "sequential", "n_jobs": 1, "blas_threads": 1}
    if fraction is not None:
        p["federated"]["client_fraction"] = fraction
    path = root / "params.yaml"
    path.write_text(yaml.safe_dump(p, sort_keys=False))
    return path


def stages(root: Path, params: Path, methods: list[str]) -> list[tuple[str, list[str]]]:
    """(label, argv) of every command, in order."""
    data = root / "data"
    common = ["--params", str(params)]
    exp = ["--dataset", "example", *common, "--data-dir", str(data), "--runs-dir", str(root / "runs")]
    out = [("import", ["import", "--dataset", "example", "--out", str(data / "processed"), *common]),
           ("partition", ["partition", "--dataset", "example", *common, "--processed-dir", str(data / "processed"),
                          "--out", str(data / "partitions")])]
    for m in methods:
        algo, _, strategy = m.partition("-")
        args = ["--algo", algo, *(["--strategy", strategy] if strategy else [])]
        out += [(f"{m} select", ["select", *args, "--pct", "all", *exp]),
                (f"{m} retrain", ["retrain", *args, *exp]),
                (f"{m} assess", ["assess", *args, *exp])]
    return out


def bench(clients: int, args, scratch: Path) -> dict:
    root = scratch / f"clients-{clients}"
    root.mkdir(parents=True)
    csv = root / "table.csv"
    per = write_csv(csv, clients, args.windows, args.steps)
    params = write_params(root, csv, args.steps, args.units, args.fraction)
    env = {"PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    os.environ.update(env)
    record = {"clients": clients, "windows_per_client": per, "csv_mb": csv.stat().st_size / 1e6, "stages": {}}
    for label, argv in stages(root, params, args.methods):
        wall, peak, cpu = run_usage([*ESNFED, *argv])
        record["stages"][label] = {"s": wall, "cpu_s": cpu, "peak_mib": peak}
        print(f"  {clients:>6} clients  {label:<16} {wall:8.2f} s  {cpu:8.2f} CPU s  {peak:7.0f} MiB", file=sys.stderr,
              flush=True)
    comm = root / "runs" / "assess" / "example"
    record["communication"] = {m: _communication(comm / f"{m}.json") for m in args.methods}
    if not args.keep:
        shutil.rmtree(root)
    return record


def _communication(path: Path) -> dict | None:
    """Up/down floats of the 100 % share (all its clients), as assess recorded them."""
    if not path.is_file():
        return None
    comm = json.loads(path.read_text())["pcts"]["100"]["communication"]
    return None if comm is None else {"up_floats": comm["up_floats"], "down_floats": comm["down_floats"]}


def table(records: list[dict]) -> str:
    head = "| stage | " + " | ".join(f"{r['clients']:,} clients ({r['windows_per_client']:,} w each)" for r in records) + " |"
    lines = [head, "|---|" + "---|" * len(records)]
    for label in records[0]["stages"]:
        cells = [f"{r['stages'][label]['cpu_s']:.1f} s ({r['stages'][label]['s']:.1f} s), "
                 f"{r['stages'][label]['peak_mib']:.0f} MiB" for r in records]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    for m in records[0]["communication"]:
        cells = ["-" if (c := r["communication"][m]) is None else f"{c['up_floats']:,} / {c['down_floats']:,}"
                 for r in records]
        lines.append(f"| {m} floats up / down (100 % share) | " + " | ".join(cells) + " |")
    cpu = [sum(s["cpu_s"] for s in r["stages"].values()) for r in records]
    wall = [sum(s["s"] for s in r["stages"].values()) for r in records]
    lines.append("| **total** | " + " | ".join(f"**{c:.1f} s** ({w:.1f} s)" for c, w in zip(cpu, wall)) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--clients", default="10,100,1000,10000", help="comma-separated client counts")
    ap.add_argument("--windows", type=int, default=20_000, help="windows in all, the same for every count")
    ap.add_argument("--steps", type=int, default=10, help="rows (= steps at 1 Hz) per window")
    ap.add_argument("--units", type=int, default=16, help="reservoir units")
    ap.add_argument("--methods", default="incfed,fedavg,fedip", help="comma-separated (continual: fedclip-naive)")
    ap.add_argument("--fraction", type=float, default=None, help="federated.client_fraction for every method")
    ap.add_argument("--root", type=Path, default=None, help="scratch folder (default: a temporary one)")
    ap.add_argument("--keep", action="store_true", help="keep each count's folder")
    ap.add_argument("--smoke", action="store_true", help="4 and 8 clients of 16 windows: seconds")
    args = ap.parse_args(argv)
    if args.smoke:
        args.clients, args.windows, args.steps, args.units = "4,8", 32, 4, 4
    args.methods = args.methods.split(",")
    counts = [int(c) for c in args.clients.split(",")]
    scratch = args.root or Path(tempfile.mkdtemp(prefix="bench-clients-"))
    records = [bench(n, args, scratch) for n in counts]
    if args.root is None and not args.keep:
        shutil.rmtree(scratch, ignore_errors=True)
    given = " ".join(a for a in (argv if argv is not None else sys.argv[1:]))
    print(table(records))
    print(f"\nCommand: `.venv/bin/python benchmarks/bench_clients.py {given}`".rstrip() + f"; {args.windows:,} windows "
          f"of {args.steps} steps in all, {args.units} units; Python {platform.python_version()}, "
          f"numpy {np.__version__}, {os.cpu_count()} CPUs")
    print(json.dumps({"records": records}))


if __name__ == "__main__":
    main()
