"""Shared by the benchmark smoke tests: run a script of benchmarks/ (tiny sizes) in its own process
and read back what it wrote: the JSON lines of --out, or the JSON object it prints last."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
ROOT = BENCHMARKS.parent


def run(script: str, *args: str, timeout: int = 600, cwd: Path = ROOT, python: str = sys.executable,
        env: dict[str, str] | None = None) -> str:
    """stdout of ``benchmarks/<script> *args`` run with this tree's packages first on the path
    (and ``env``'s variables set); asserts exit 0."""
    env = {**os.environ, **(env or {}),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([python, str(BENCHMARKS / script), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=cwd, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def smoke(script: str, out: Path, *args: str, timeout: int = 600) -> tuple[list[dict], str]:
    """(records of ``out``, stdout) of ``benchmarks/<script> --smoke --out <out> *args``; asserts exit 0."""
    stdout = run(script, "--smoke", "--out", str(out), *args, timeout=timeout)
    return [json.loads(line) for line in out.read_text().splitlines()], stdout


def last_json(stdout: str) -> dict:
    """The last JSON object a script printed with ``json.dumps(..., indent=2)`` (a "{" line to its "}")."""
    lines = stdout.splitlines()
    start = max(i for i, line in enumerate(lines) if line == "{")
    end = next(j for j in range(start, len(lines)) if lines[j] == "}")
    return json.loads("\n".join(lines[start : end + 1]))


def table_rows(stdout: str, first_cell: str) -> list[list[str]]:
    """The cells of the Markdown rows (header and |---| left out) of the table whose header starts
    with ``| first_cell |``."""
    lines = stdout[stdout.index(f"| {first_cell} |"):].split("\n\n", 1)[0].splitlines()[2:]
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in lines]


def gpu_session(root: Path, **env: str) -> tuple[subprocess.CompletedProcess, Path, Path]:
    """benchmarks/gpu_session.sh with OUT=<root>/out, RES=<root>/res and ``env``, this Python as
    its PYTHON: (the completed process, OUT, RES)."""
    out, res = root / "out", root / "res"
    proc = subprocess.run(["bash", str(BENCHMARKS / "gpu_session.sh")], capture_output=True, text=True,
                          timeout=900, env={**os.environ, "PYTHON": sys.executable, "OUT": str(out),
                                            "RES": str(res), **env})
    return proc, out, res


def step_records(res: Path, step: str) -> tuple[list[dict], str]:
    """(records of <step>.jsonl, output of <step>.txt) of a gpu_session.sh run's RES folder."""
    lines = (res / f"{step}.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines], (res / f"{step}.txt").read_text()
