"""Time the default `dvc repro` from a fresh clone, stage by stage.

    .venv/bin/python benchmarks/time_pipeline.py [--keep DIR]

Clones this repository (committed state) into a temporary folder, puts a shim named `esnfed` first
on PATH that records the wall/user/system seconds of every command DVC runs, runs `dvc repro`
with this venv's packages importing the clone's code, then `dvc repro` again (must do nothing),
and prints the per-stage table and the totals (Markdown, for BENCHMARKS.md). Installation is
excluded: the clone uses this venv (and this checkout's .venv-flower, linked).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent

SHIM = """#!/bin/bash
/usr/bin/time -o "$STAGE_TIMES.one" -f "%e %U %S" "{esnfed}" "$@"
rc=$?
echo "$(cat "$STAGE_TIMES.one") $*" >> "$STAGE_TIMES"
exit $rc
"""


def stage_name(args: list[str]) -> str:
    """`select --dataset wesad --algo clip --strategy joint` -> `select wesad clip-joint`."""
    opt = {args[i]: args[i + 1] for i in range(1, len(args) - 1) if args[i].startswith("--")}
    method = opt.get("--algo", "") + (f"-{opt['--strategy']}" if "--strategy" in opt else "")
    return " ".join(x for x in (args[0], opt.get("--dataset", ""), method) if x)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--keep", type=Path, help="clone into this (new) folder and keep it")
    args = ap.parse_args()
    work = args.keep or Path(tempfile.mkdtemp(prefix="esnfed-pipeline-"))
    clone = work / "repo"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    if (ROOT / ".venv-flower").exists():  # the flower stage's environment (docs/flower-apps.md "Flower apps")
        (clone / ".venv-flower").symlink_to((ROOT / ".venv-flower").resolve())
    shim_dir = work / "shim"
    shim_dir.mkdir()
    shim = shim_dir / "esnfed"
    shim.write_text(SHIM.format(esnfed=VENV_BIN / "esnfed"))
    shim.chmod(0o755)
    times = work / "stage-times.log"
    env = {**os.environ, "PATH": f"{shim_dir}:{VENV_BIN}:{os.environ['PATH']}", "PYTHONPATH": str(clone),
           "STAGE_TIMES": str(times)}
    t0 = time.perf_counter()
    subprocess.run([str(VENV_BIN / "dvc"), "repro"], cwd=clone, env=env, check=True,
                   stdout=subprocess.DEVNULL)
    total = time.perf_counter() - t0
    t1 = time.perf_counter()
    again = subprocess.run([str(VENV_BIN / "dvc"), "repro"], cwd=clone, env=env, check=True,
                           capture_output=True, text=True).stdout
    second = time.perf_counter() - t1
    rows = [line.split() for line in times.read_text().splitlines()]
    by_kind: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    print("| stage | wall s | CPU s (user+sys) |")
    print("|---|---|---|")
    for wall, user, sys_, *cmd in rows:
        name = stage_name(cmd)
        print(f"| {name} | {float(wall):.1f} | {float(user) + float(sys_):.1f} |")
        k = by_kind[cmd[0]]
        k[0] += float(wall)
        k[1] += float(user) + float(sys_)
        k[2] += 1
    print("\n| command | stages | wall s | CPU s |")
    print("|---|---|---|---|")
    for kind, (w, c, n) in by_kind.items():
        print(f"| {kind} | {n} | {w:.1f} | {c:.1f} |")
    inside = sum(float(r[0]) for r in rows)
    print(f"\n`dvc repro` from a fresh clone: {total:.0f} s wall ({inside:.0f} s inside the {len(rows)} "
          f"commands, {total - inside:.0f} s DVC's own bookkeeping); second `dvc repro`: {second:.1f} s, "
          f"{'nothing rerun' if 'Running stage' not in again else 'STAGES RERAN'}")
    if not args.keep:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
