"""Shared by the benchmark scripts: run one command in its own process and measure its wall time
and peak memory (that process alone, via os.wait4), plus the size of a folder."""

from __future__ import annotations

import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import Callable, Mapping


def run(cmd: list[str]) -> tuple[float, float]:
    """Run ``cmd``; return (wall seconds, peak RSS in MiB) of that process alone."""
    wall, peak, _ = run_usage(cmd)
    return wall, peak


def run_usage(cmd: list[str]) -> tuple[float, float, float]:
    """Run ``cmd``; return (wall seconds, peak RSS in MiB, CPU seconds: user + system) of that
    process alone (CPU time is what a shared, loaded machine distorts least)."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {err.strip()}")
    return wall, usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime  # ru_maxrss is in KiB on Linux


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())


def write_bench_params(repo: Path, root: Path, dataset: str, synthetic: dict) -> list[str]:
    """Write ``root/params.yaml``: the repository's params with ``synthetic.<dataset>`` replaced;
    return the ``--params`` arguments that point a command at it."""
    import yaml  # noqa: PLC0415 (only the benchmarks that generate data need it)

    root.mkdir(parents=True, exist_ok=True)
    params = yaml.safe_load((repo / "params.yaml").read_text())
    params["synthetic"][dataset] = synthetic
    path = root / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    return ["--params", str(path)]


def preprocess_result(manifest: dict, generated: tuple[float, float], walls: list[float],
                      peaks: list[float]) -> dict:
    """The fields every preprocess benchmark reports: windows, the generation's and the preprocess
    runs' times and peaks (median time, max peak) and the platform."""
    import platform  # noqa: PLC0415
    import statistics  # noqa: PLC0415

    import numpy as np  # noqa: PLC0415

    return {
        "windows": sum(u["windows"] for u in manifest["users"].values()),
        "synthesize_s": generated[0],
        "synthesize_peak_mib": generated[1],
        "preprocess_s": walls,
        "preprocess_median_s": statistics.median(walls),
        "preprocess_peak_mib": max(peaks),
        "python": platform.python_version(),
        "numpy": np.__version__,
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
    }


def cpu_medians(jobs: Mapping[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median CPU seconds of each job: one warm-up call each, then ``repeats`` rounds that call
    every job in turn (interleaved, so load drifts hit all of them alike)."""
    for job in jobs.values():
        job()
    cpu: dict[str, list[float]] = {k: [] for k in jobs}
    for _ in range(repeats):
        for k, job in jobs.items():
            c0 = time.process_time()
            job()
            cpu[k].append(time.process_time() - c0)
    return {k: statistics.median(v) for k, v in cpu.items()}
