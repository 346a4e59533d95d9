"""Benchmark of intrinsic plasticity: one IP epoch vs a plain state pass, and a FedIP round.

Run: .venv/bin/python benchmarks/bench_plasticity.py [--windows N] [--repeats 7] [--threads 1]
Prints Markdown rows for BENCHMARKS.md (median wall and CPU times, their ratios, versions, command).
Timings are interleaved (plain, IP, ... in each repeat) so that load from other processes on
the machine affects all of them alike; one BLAS thread by default for the same reason.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time

import numpy as np
import scipy
from threadpoolctl import threadpool_limits

from esnfed_core.federated import fedip
from esnfed_core.plasticity import IPConfig, ip_epoch, ip_step
from esnfed_core.reservoir import ReservoirConfig, build_reservoir, iter_states

# name: (steps, inputs, units, default windows) — WESAD chest windows at 700 Hz (400 units, the
# largest searched) and HHAR windows at 100 Hz (100 units).
SHAPES = {"wesad": (700, 8, 400, 300), "hhar": (200, 6, 100, 1000)}


def _plain_pass(res, x, batch_size):
    for _ in iter_states(res, x, batch_size):
        pass


def _times(fns: dict, repeats: int) -> tuple[dict, dict]:
    """Median wall time and median CPU time of each function, calls interleaved per repeat.

    With one BLAS thread the process's CPU time is the work done; unlike wall time it hardly
    moves when other processes load the machine.
    """
    wall = {k: [] for k in fns}
    cpu = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            w0, c0 = time.perf_counter(), time.process_time()
            fn()
            cpu[k].append(time.process_time() - c0)
            wall[k].append(time.perf_counter() - w0)
    return ({k: float(np.median(v)) for k, v in wall.items()},
            {k: float(np.median(v)) for k, v in cpu.items()})


def bench_shape(name: str, windows: int | None, repeats: int, clients: int) -> list[str]:
    steps, inputs, units, default_windows = SHAPES[name]
    windows = windows or default_windows
    rng = np.random.default_rng(0)
    x = rng.standard_normal((windows, steps, inputs)).astype(np.float32)
    cfg = IPConfig(sigma=0.3)
    res = build_reservoir(ReservoirConfig(inputs, units, 0.9, 0.3, 0.8), 0)
    res = ip_step(res, x[:100], cfg)  # g, b away from (1, 0): every pass applies them
    parts = np.array_split(x, clients)
    t, cpu = _times(
        {
            "plain100": lambda: _plain_pass(res, x, 100),
            "plain256": lambda: _plain_pass(res, x, 256),
            "ip": lambda: ip_epoch(res, x, cfg, np.random.default_rng(1)),
            "client_epochs": lambda: [ip_epoch(res, p, cfg, np.random.default_rng(1)) for p in parts],
            "fedip_round": lambda: fedip(res, parts, cfg, rounds=1, local_epochs=1, seed=1),
        },
        repeats,
    )
    shape = f"{windows}×{steps}×{inputs}, {units} units"

    def row(label, key, note=""):
        return (f"| {label} | {t[key]:.3f} s | {cpu[key]:.3f} s | {t[key] / t['plain100']:.2f} | "
                f"{cpu[key] / cpu['plain100']:.2f} | {cpu[key] / cpu['plain256']:.2f} |{note}")

    return [
        f"| **{name}** ({shape}) | | | | | | |",
        row("plain state pass, batch 100", "plain100"),
        row("plain state pass, batch 256", "plain256"),
        row("**IP epoch** (batches of 100)", "ip"),
        row(f"{clients} clients' local IP epochs, summed", "client_epochs"),
        row(f"**one FedIP round** over those {clients} clients", "fedip_round",
            f" round / summed epochs: wall {t['fedip_round'] / t['client_epochs']:.3f}, "
            f"CPU **{cpu['fedip_round'] / cpu['client_epochs']:.3f}** |"),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", type=int, default=None, help="windows per shape (default: per shape)")
    ap.add_argument("--repeats", type=int, default=7, help="timed repeats (median reported)")
    ap.add_argument("--threads", type=int, default=1, help="BLAS threads")
    ap.add_argument("--clients", type=int, default=4, help="FedIP clients (windows split evenly)")
    ap.add_argument("--shapes", nargs="*", default=list(SHAPES), choices=list(SHAPES))
    args = ap.parse_args()
    rows = []
    with threadpool_limits(args.threads):
        for name in args.shapes:
            rows += bench_shape(name, args.windows, args.repeats, args.clients)
    print("| what | wall (median) | CPU (median) | wall ÷ plain 100 | CPU ÷ plain 100 | CPU ÷ plain 256 | |")
    print("|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print()
    print(f"Command: `.venv/bin/python {' '.join(['benchmarks/bench_plasticity.py', *sys.argv[1:]])}`; "
          f"Python {platform.python_version()}, numpy {np.__version__}, scipy {scipy.__version__}, "
          f"{platform.machine()}, {args.threads} BLAS thread(s), {args.repeats} repeats.")


if __name__ == "__main__":
    main()
