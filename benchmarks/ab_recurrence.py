"""A/B of the reservoir recurrence: this tree's ``run_batch`` loop against the loop of an earlier
commit, interleaved in one process, CPU-time medians, each as a ratio to the bare GEMM of the
same shapes (T products (B, N) @ (N, N)); checks that both give the same bits.

    .venv/bin/python benchmarks/ab_recurrence.py --before 035566f [--repeats 15] [--threads 1]
    .venv/bin/python benchmarks/ab_recurrence.py --before HEAD --smoke   # tiny shape (a test that it runs)

One process and interleaved repeats, so the load of a shared machine hits both sides alike
(BENCHMARKS.md, "Reservoir core"). Cases: bench_reservoir.py's two shapes.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

import esnfed_core.reservoir as reservoir
from _measure import cpu_medians  # benchmarks/ is the script's folder, first on sys.path

ROOT = Path(__file__).resolve().parents[1]
CASES = [(256, 200, 6, 100), (256, 700, 8, 400)]  # windows, steps, inputs, units
SMOKE_CASES = [(8, 20, 3, 16)]


def _module_at(rev: str, folder: Path):
    """esnfed_core/reservoir.py of commit ``rev``, imported as its own module."""
    src = subprocess.run(["git", "show", f"{rev}:esnfed_core/reservoir.py"], cwd=ROOT, check=True,
                         capture_output=True, text=True).stdout
    path = folder / "reservoir_before.py"
    path.write_text(src)
    spec = importlib.util.spec_from_file_location("reservoir_before", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["reservoir_before"] = mod  # dataclasses look their module up
    spec.loader.exec_module(mod)
    return mod


def case(before, windows: int, steps: int, inputs: int, units: int, repeats: int) -> None:
    res = reservoir.build_reservoir(reservoir.ReservoirConfig(inputs, units, 0.9, 0.3, 1.0), 0)
    rng = np.random.default_rng(0)
    xt = np.ascontiguousarray(rng.standard_normal((steps, windows, inputs)).astype(np.float32))
    prev = rng.uniform(-1, 1, (windows, units)).astype(np.float32)
    gemm_out = np.empty_like(prev)
    outs = {k: np.empty((steps, windows, units), np.float32) for k in ("before", "after")}
    loops = {"before": before._recur, "after": reservoir._recur}
    jobs = {
        "bare GEMM": lambda: [np.matmul(prev, res._w_t, out=gemm_out) for _ in range(steps)],
        **{k: (lambda k=k: loops[k](res, xt, outs[k], None, None, 0, windows)) for k in loops},
    }
    for job in jobs.values():  # warm-up (then cpu_medians warms up once more)
        job()
    same = outs["before"].tobytes() == outs["after"].tobytes()
    med = cpu_medians(jobs, repeats)
    print(f"{windows} x {steps} x {inputs} x {units}: bare GEMM {med['bare GEMM'] * 1e3:.2f} ms CPU; "
          f"before {med['before'] * 1e3:.2f} ms ({med['before'] / med['bare GEMM']:.3f}x), "
          f"after {med['after'] * 1e3:.2f} ms ({med['after'] / med['bare GEMM']:.3f}x); "
          f"same bits: {same}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="the commit whose loop is the baseline")
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--threads", type=int, default=1, help="BLAS threads (the pipeline's workers: 1)")
    ap.add_argument("--smoke", action="store_true", help="one tiny shape (a test that it runs)")
    args = ap.parse_args(argv)
    threadpool_limits(args.threads)
    print(f"load average {os.getloadavg()}, BLAS threads {args.threads}, {args.repeats} repeats")
    with tempfile.TemporaryDirectory() as tmp:
        before = _module_at(args.before, Path(tmp))
        for c in SMOKE_CASES if args.smoke else CASES:
            case(before, *c, repeats=args.repeats)
    print(f"load average {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
