"""Shared by the benchmark scripts: run one command in its own process and measure its wall time
and peak memory (that process alone, via os.wait4), plus the size of a folder."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path


def run(cmd: list[str]) -> tuple[float, float]:
    """Run ``cmd``; return (wall seconds, peak RSS in MiB) of that process alone."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {err.strip()}")
    return wall, usage.ru_maxrss / 1024  # ru_maxrss is in KiB on Linux


def folder_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())
