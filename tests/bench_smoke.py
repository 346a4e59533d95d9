"""Shared by the benchmark smoke tests: run a script of benchmarks/ in --smoke mode in its own
process and read back the JSON lines it wrote."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def smoke(script: str, out: Path, *args: str, timeout: int = 600) -> tuple[list[dict], str]:
    """(records of ``out``, stdout) of ``benchmarks/<script> --smoke --out <out> *args``; asserts exit 0."""
    proc = subprocess.run([sys.executable, str(BENCHMARKS / script), "--smoke", "--out", str(out), *args],
                          capture_output=True, text=True, timeout=timeout, cwd=BENCHMARKS.parent)
    assert proc.returncode == 0, proc.stderr
    return [json.loads(line) for line in out.read_text().splitlines()], proc.stdout
