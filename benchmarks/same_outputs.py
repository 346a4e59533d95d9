"""Check that two pipeline runs wrote the same outputs: every file under data/, runs/ and reports/
of RUN_A and RUN_B, byte for byte, except what is allowed to differ between two code versions.

    .venv/bin/python benchmarks/same_outputs.py RUN_A RUN_B [--ignore-key NAME ...]

Allowed to differ: in JSON files, the trial wall times (``seconds``) and the result keys
(``key``: they hash the source of the core modules, so any code change moves them), plus any
``--ignore-key``; ``.npz`` files are compared array by array (their zip members carry
timestamps), and a model's ``npz_sha256`` with them. Everything else must be identical. Prints
one line per differing file (with the first differing JSON path) and a summary; exits 1 if any
file differs or is missing on one side.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

FOLDERS = ("data", "runs", "reports")
IGNORED = {"seconds", "key", "npz_sha256"}


def _strip(doc: Any, ignored: set[str]) -> Any:
    if isinstance(doc, dict):
        return {k: _strip(v, ignored) for k, v in doc.items() if k not in ignored}
    if isinstance(doc, list):
        return [_strip(v, ignored) for v in doc]
    return doc


def _first_diff(a: Any, b: Any, path: str = "") -> str:
    if type(a) is not type(b):
        return f"{path or '.'}: {a!r:.60} != {b!r:.60}"
    if isinstance(a, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                return f"{path}.{k}: only on one side"
            if a[k] != b[k]:
                return _first_diff(a[k], b[k], f"{path}.{k}")
    if isinstance(a, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y:
                return _first_diff(x, y, f"{path}[{i}]")
    return f"{path or '.'}: {a!r:.60} != {b!r:.60}"


def _same_npz(a: Path, b: Path) -> str | None:
    with np.load(a) as x, np.load(b) as y:
        if x.files != y.files:
            return f"members {x.files} != {y.files}"
        for k in x.files:
            if x[k].dtype != y[k].dtype or not np.array_equal(x[k], y[k], equal_nan=True):
                return f"array {k} differs"
    return None


def compare(run_a: Path, run_b: Path, ignored: set[str]) -> list[str]:
    problems = []
    for folder in FOLDERS:
        files_a = {p.relative_to(run_a) for p in (run_a / folder).rglob("*") if p.is_file()}
        files_b = {p.relative_to(run_b) for p in (run_b / folder).rglob("*") if p.is_file()}
        problems += [f"{p}: only in {run_a}" for p in sorted(files_a - files_b)]
        problems += [f"{p}: only in {run_b}" for p in sorted(files_b - files_a)]
        for rel in sorted(files_a & files_b):
            a, b = run_a / rel, run_b / rel
            if a.read_bytes() == b.read_bytes():
                continue
            if rel.suffix == ".npz":
                why = _same_npz(a, b)
            elif rel.suffix == ".json":
                ja, jb = (_strip(json.loads(p.read_text(encoding="utf-8")), ignored) for p in (a, b))
                why = None if ja == jb else _first_diff(ja, jb)
            else:
                why = "bytes differ"
            if why:
                problems.append(f"{rel}: {why}")
    return problems


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_a", type=Path)
    ap.add_argument("run_b", type=Path)
    ap.add_argument("--ignore-key", action="append", default=[], help="another JSON key to ignore")
    args = ap.parse_args()
    problems = compare(args.run_a, args.run_b, IGNORED | set(args.ignore_key))
    for line in problems:
        print(line)
    n = sum(1 for f in FOLDERS for p in (args.run_a / f).rglob("*") if p.is_file())
    print(f"{n} files in {args.run_a}: {len(problems)} differ (ignoring {sorted(IGNORED | set(args.ignore_key))})")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
