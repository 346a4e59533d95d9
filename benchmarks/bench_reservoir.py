"""Benchmark of the reservoir core: state throughput of run_batch against the bare matrix products
it is built on, reservoirpy's Reservoir, and the cost of accumulating the ridge statistics.

Run: .venv/bin/python benchmarks/bench_reservoir.py [--repeats 7] [--json out.json] [--quick]
All timings are interleaved across repeats and reported as medians; the machine may be shared, so
the ratios (measured in the same run) matter more than absolute times.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np
import scipy
from threadpoolctl import threadpool_info, threadpool_limits

import esnfed_core.reservoir as reservoir
from esnfed_core.readout import StatsAccumulator
from esnfed_core.reservoir import ReservoirConfig, build_reservoir, run_batch

CASES = [
    # name, windows, steps, inputs, units, windows given to reservoirpy (one at a time)
    ("WESAD-like", 256, 700, 8, 400, 8),
    ("HHAR-like", 256, 200, 6, 100, 32),
]
QUICK_CASES = [("quick", 64, 50, 4, 64, 4)]
N_CLASSES = 4


def _time(fn) -> tuple[float, float]:
    """Wall time and this process's CPU time (all threads) of one call."""
    t0, c0 = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - t0, time.process_time() - c0


def _bare_gemm(w_t: np.ndarray, prev: np.ndarray, out: np.ndarray, steps: int) -> None:
    for _ in range(steps):
        np.matmul(prev, w_t, out=out)


def _reservoirpy_states(res, x: np.ndarray) -> None:
    from reservoirpy.nodes import Reservoir as RpyReservoir

    node = RpyReservoir(
        units=res.units, lr=res.leak, W=res.w.astype(np.float64), Win=res.w_in.astype(np.float64),
        bias=0.0, activation="tanh", input_dim=res.n_inputs,
    )
    for window in x.astype(np.float64):
        if node.initialized:
            node.reset()
        node.run(window)


def _single_thread_run(res, x, out) -> None:
    saved = reservoir._MAX_THREADS
    reservoir._MAX_THREADS = 1
    try:
        run_batch(res, x, out=out)
    finally:
        reservoir._MAX_THREADS = saved


def bench_case(name, windows, steps, inputs, units, rpy_windows, repeats, seed=0) -> dict:
    res = build_reservoir(ReservoirConfig(inputs, units, 0.9, 0.3, 1.0), seed)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((windows, steps, inputs)).astype(np.float32)
    labels = rng.integers(0, N_CLASSES, size=(windows, steps)).astype(np.int8)
    states = np.empty((steps, windows, units), np.float32)
    single = np.empty_like(states)
    prev = rng.uniform(-1, 1, (windows, units)).astype(np.float32)
    gemm_out = np.empty_like(prev)
    w_t = np.ascontiguousarray(res.w.T)

    def accumulate():
        StatsAccumulator(units, N_CLASSES).add(states, labels)

    jobs = {
        "run_batch": lambda: run_batch(res, x, out=states),
        "run_batch_1thread": lambda: _single_thread_run(res, x, single),
        "bare_gemm": lambda: _bare_gemm(w_t, prev, gemm_out, steps),
        "stats_add": accumulate,
        "reservoirpy": lambda: _reservoirpy_states(res, x[:rpy_windows]),
    }
    for job in jobs.values():  # warm-up: imports, page faults, BLAS thread start
        job()
    times: dict[str, list[float]] = {k: [] for k in jobs}
    cpu: dict[str, list[float]] = {k: [] for k in jobs}
    rpy_repeats = max(3, repeats // 2)
    for r in range(repeats):
        for key, job in jobs.items():
            if key == "reservoirpy" and r >= rpy_repeats:
                continue
            wall, used = _time(job)
            times[key].append(wall)
            cpu[key].append(used)
    med = {k: statistics.median(v) for k, v in times.items()}
    best = {k: min(v) for k, v in times.items()}
    # CPU time: steadier than wall time on a shared machine when everything runs on one thread
    # (--threads 1); with several BLAS threads it also counts their spinning.
    med_cpu = {k: statistics.median(v) for k, v in cpu.items()}
    work = windows * steps
    ours = work / med["run_batch"]
    theirs = rpy_windows * steps / med["reservoirpy"]
    return {
        "case": name, "windows": windows, "steps": steps, "inputs": inputs, "units": units,
        "repeats": repeats, "reservoirpy_windows": rpy_windows, "reservoirpy_repeats": rpy_repeats,
        "median_s": med,
        "min_s": best,
        "median_cpu_s": med_cpu,
        "cpu_ratios": {
            "recurrence_over_bare_gemm": med_cpu["run_batch"] / med_cpu["bare_gemm"],
            "speedup_over_reservoirpy": (work / med_cpu["run_batch"])
            / (rpy_windows * steps / med_cpu["reservoirpy"]),
            "stats_add_over_recurrence": med_cpu["stats_add"] / med_cpu["run_batch"],
        },
        # The same ratios from the fastest repeat of each job: less affected by other processes.
        "min_ratios": {
            "recurrence_over_bare_gemm": best["run_batch"] / best["bare_gemm"],
            "speedup_over_reservoirpy": (work / best["run_batch"])
            / (rpy_windows * steps / best["reservoirpy"]),
            "stats_add_over_recurrence": best["stats_add"] / best["run_batch"],
        },
        "throughput_window_steps_per_s": {
            "run_batch": ours, "run_batch_1thread": work / med["run_batch_1thread"],
            "reservoirpy": theirs,
        },
        "ratio_recurrence_over_bare_gemm": med["run_batch"] / med["bare_gemm"],
        "ratio_1thread_over_bare_gemm": med["run_batch_1thread"] / med["bare_gemm"],
        "speedup_over_reservoirpy": ours / theirs,
        # What the bare products alone would give: no recurrence can beat this bound.
        "bare_gemm_speedup_over_reservoirpy": (work / med["bare_gemm"]) / theirs,
        "ratio_stats_add_over_recurrence": med["stats_add"] / med["run_batch"],
        "all_s": times,
        "all_cpu_s": cpu,
    }


def environment() -> dict:
    blas = [
        {k: lib.get(k) for k in ("filepath", "version", "architecture", "num_threads")}
        for lib in threadpool_info() if lib.get("user_api") == "blas"
    ]
    try:
        import reservoirpy

        rpy = reservoirpy.__version__
    except ImportError:  # pragma: no cover - test extra not installed
        rpy = None
    cpu = next(
        (line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
        platform.processor(),
    ) if os.path.exists("/proc/cpuinfo") else platform.processor()
    return {
        "python": sys.version.split()[0], "numpy": np.__version__, "scipy": scipy.__version__,
        "reservoirpy": rpy, "blas": blas, "cpu": cpu, "cpus": os.cpu_count(),
        "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE"),
        "OPENBLAS_L2_SIZE": os.environ.get("OPENBLAS_L2_SIZE"),
        "loadavg": os.getloadavg(),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="timed repetitions per measurement")
    parser.add_argument("--json", help="also write the results to this JSON file")
    parser.add_argument("--quick", action="store_true", help="tiny shapes (a smoke run)")
    parser.add_argument("--threads", type=int, help="limit BLAS (and so run_batch) to N threads")
    args = parser.parse_args(argv)
    if args.threads:
        threadpool_limits(args.threads)  # for the whole run, like OPENBLAS_NUM_THREADS
    env = environment()
    print(f"numpy {env['numpy']}, scipy {env['scipy']}, reservoirpy {env['reservoirpy']}, "
          f"python {env['python']}, {env['cpus']} CPUs ({env['cpu']})")
    for lib in env["blas"]:
        print(f"BLAS {lib['version']} {lib['architecture']} threads={lib['num_threads']} {lib['filepath']}")
    print(f"OPENBLAS_CORETYPE={env['OPENBLAS_CORETYPE']} OPENBLAS_L2_SIZE={env['OPENBLAS_L2_SIZE']} "
          f"load average {env['loadavg']}")
    results = []
    for case in QUICK_CASES if args.quick else CASES:
        r = bench_case(*case, repeats=args.repeats)
        results.append(r)
        tp, med = r["throughput_window_steps_per_s"], r["median_s"]
        print(
            f"\n{r['case']}: {r['windows']} windows x {r['steps']} steps x {r['inputs']} inputs x "
            f"{r['units']} units, median of {r['repeats']}\n"
            f"  run_batch            {med['run_batch']:.4f} s  {tp['run_batch']:.3e} window-steps/s\n"
            f"  run_batch 1 thread   {med['run_batch_1thread']:.4f} s  "
            f"({r['ratio_1thread_over_bare_gemm']:.2f}x bare GEMM)\n"
            f"  bare GEMM x@W^T      {med['bare_gemm']:.4f} s  "
            f"-> recurrence / bare GEMM = {r['ratio_recurrence_over_bare_gemm']:.2f}\n"
            f"  reservoirpy          {med['reservoirpy']:.4f} s for {r['reservoirpy_windows']} windows "
            f"(median of {r['reservoirpy_repeats']})  {tp['reservoirpy']:.3e} window-steps/s "
            f"-> speed-up {r['speedup_over_reservoirpy']:.1f}x "
            f"(bare GEMM alone: {r['bare_gemm_speedup_over_reservoirpy']:.1f}x)\n"
            f"  StatsAccumulator.add {med['stats_add']:.4f} s  "
            f"-> stats / recurrence = {r['ratio_stats_add_over_recurrence']:.2f}\n"
            f"  from the fastest repeats: recurrence / bare GEMM = "
            f"{r['min_ratios']['recurrence_over_bare_gemm']:.2f}, speed-up "
            f"{r['min_ratios']['speedup_over_reservoirpy']:.1f}x, stats / recurrence = "
            f"{r['min_ratios']['stats_add_over_recurrence']:.2f}\n"
            f"  in CPU time (medians): recurrence / bare GEMM = "
            f"{r['cpu_ratios']['recurrence_over_bare_gemm']:.2f}, speed-up "
            f"{r['cpu_ratios']['speedup_over_reservoirpy']:.1f}x, stats / recurrence = "
            f"{r['cpu_ratios']['stats_add_over_recurrence']:.2f}"
        )
    env["loadavg_after"] = os.getloadavg()
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"environment": env, "results": results}, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
