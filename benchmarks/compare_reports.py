"""Compare two pipeline runs cell by cell: the tables, metrics and t-tests of ``reports/`` and,
to explain a difference, what select picked (runs/select/*/*/*/best.json) and the per-retrain
test accuracies (runs/assess/*/*.json).

    .venv/bin/python benchmarks/compare_reports.py RUN_A RUN_B [--digits 2]

RUN_A and RUN_B are folders holding ``reports/`` (and optionally ``runs/``) of two runs, e.g. the
default pipeline on runner.device cpu and torch-cpu (BENCHMARKS.md, "Accelerator path"). A table
cell "agrees" when its mean and std print the same with ``--digits`` decimals (the Markdown
tables' format) and its t-test mark is the same. Prints every cell that does not agree, the
largest differences, and a summary line; exits 0 (a comparison, not a test).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
from pathlib import Path
from typing import Any, Iterator

TABLE_KEYS = ("table", "dataset", "pct", "method", "column")
# percent, shown with --digits decimals: the cells (and their difference to the paper), the claims'
# means and stds, the selected trial's validation score
SHOWN = ("mean", "std", "delta", "mean_a", "std_a", "mean_b", "std_b", "validation_score")
OTHER_KEYS = ("claim", "dataset", "pct", "method", "a", "b")  # a row's identity in the other CSVs


def _num(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def _rows(path: Path, keys: tuple[str, ...]) -> dict[tuple, dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as fh:
        return {tuple(r.get(k, "") for k in keys): r for r in csv.DictReader(fh)}


def _flat(doc: Any, prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(path, leaf) of a JSON document."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _flat(v, f"{prefix}/{k}")
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _flat(v, f"{prefix}[{i}]")
    else:
        yield prefix, doc


def _shown(x: float | None, digits: int) -> str:
    return "" if x is None or math.isnan(x) else f"{x:.{digits}f}"


def compare_tables(a: Path, b: Path, digits: int) -> tuple[int, int, list[str]]:
    """(cells, cells that disagree, report lines) over reports/tables/*.csv with a ``mean``."""
    cells = bad = 0
    lines: list[str] = []
    for pa in sorted((a / "reports/tables").glob("*.csv")):
        pb = b / "reports/tables" / pa.name
        if not pb.exists():
            lines.append(f"{pa.name}: missing in {b}")
            continue
        with pa.open(encoding="utf-8") as fh:
            header = fh.readline().strip().split(",")
        keys = TABLE_KEYS if "mean" in header else tuple(h for h in header if h in OTHER_KEYS)
        ra, rb = _rows(pa, keys), _rows(pb, keys)
        for key in sorted(set(ra) | set(rb)):
            if key not in ra or key not in rb:
                lines.append(f"{pa.name} {'/'.join(key)}: only in {'A' if key in ra else 'B'}")
                bad += 1
                continue
            cells += 1
            x, y = ra[key], rb[key]
            diffs = []
            for col in x:
                u, v = x[col], y.get(col, "")
                if u == v:
                    continue
                nu, nv = _num(u), _num(v)
                if col in SHOWN and nu is not None and nv is not None:
                    if _shown(nu, digits) != _shown(nv, digits):
                        diffs.append(f"{col} {nu:.{digits}f} vs {nv:.{digits}f} (Δ {nv - nu:+.4f})")
                elif col in ("p_value", "statistic") and nu is not None and nv is not None:
                    if abs(nu - nv) > 10 ** -(digits + 1) or x.get("mark") != y.get("mark"):
                        diffs.append(f"{'p' if col == 'p_value' else col} {nu:.4g} vs {nv:.4g}")
                elif col not in SHOWN:
                    diffs.append(f"{col} {u!r} vs {v!r}")
            if diffs:
                bad += 1
                lines.append(f"{pa.name} {'/'.join(k for k in key if k)}: " + "; ".join(diffs))
    return cells, bad, lines


def compare_json(a: Path, b: Path, pattern: str, only: str | None = None, skip: str | None = None
                 ) -> tuple[int, int, float, list[str]]:
    """(numbers, numbers that differ, largest |Δ|, lines) over the JSON files matching ``pattern``,
    their leaves whose path contains ``only`` (if given) and not ``skip`` (if given)."""
    n = bad = 0
    worst = 0.0
    lines: list[str] = []
    for pa in sorted(a.glob(pattern)):
        rel = pa.relative_to(a)
        pb = b / rel
        if not pb.exists():
            lines.append(f"{rel}: missing in B")
            continue
        fa = dict(_flat(json.loads(pa.read_text())))
        fb = dict(_flat(json.loads(pb.read_text())))
        for path in sorted(set(fa) | set(fb)):
            if (only and only not in path) or (skip and skip in path):
                continue
            u, v = fa.get(path), fb.get(path)
            if isinstance(u, bool) or isinstance(v, bool) or not isinstance(u, (int, float)) \
                    or not isinstance(v, (int, float)):
                if u != v and not _volatile(path):
                    bad += 1
                    lines.append(f"{rel}{path}: {u!r} vs {v!r}")
                continue
            n += 1
            if u != v and not (math.isnan(u) and math.isnan(v)):
                d = abs(v - u)
                worst = max(worst, d)
                bad += 1
                lines.append(f"{rel}{path}: {u:.6g} vs {v:.6g} (Δ {v - u:+.3g})")
    return n, bad, worst, lines


def _volatile(path: str) -> bool:
    """Fields that differ between any two runs (times, code fingerprints, devices, keys)."""
    return any(s in path for s in ("seconds", "time", "code", "device", "/key", "created", "host"))


def compare_selection(a: Path, b: Path) -> list[str]:
    """What select picked per (dataset, method, share) when A and B differ: trial and λ."""
    lines = []
    for pa in sorted(a.glob("runs/select/*/*/*/best.json")):
        rel = pa.relative_to(a)
        pb = b / rel
        if not pb.exists():
            continue
        ja, jb = json.loads(pa.read_text()), json.loads(pb.read_text())
        pick_a, pick_b = _pick(ja), _pick(jb)
        if pick_a != pick_b:
            lines.append(f"{rel.parent}: A {pick_a} | B {pick_b}")
    return lines


def _pick(best: dict) -> str:
    cfg = best.get("config", {})
    score = best.get("scores", {}).get("score", best.get("score"))
    idx = best.get("index", best.get("trial"))
    lam = cfg.get("lambda")
    return f"trial {idx} λ={lam} val={score}"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_a", type=Path)
    ap.add_argument("run_b", type=Path)
    ap.add_argument("--digits", type=int, default=2, help="decimals the tables show (default 2)")
    args = ap.parse_args(argv)
    a, b = args.run_a, args.run_b
    cells, bad, lines = compare_tables(a, b, args.digits)
    print(f"## tables: {cells} cells, {bad} differ beyond the shown {args.digits} decimals or in a mark")
    print("\n".join(lines))
    for title, pattern, only, skip in (
            ("metrics", "reports/metrics/*.json", None, None),
            ("t-tests", "reports/ttest.json", None, None),
            ("selection: every trial's validation accuracy per λ", "runs/select/*/*/*/trial-*.json",
             "/scores/", None),
            ("selection: best.json", "runs/select/*/*/*/best.json", None, None),
            ("assess: configs, λ and accuracies per retrain", "runs/assess/*/*.json", None, "/activation/"),
            ("assess: activation densities", "runs/assess/*/*.json", "/activation/", None)):
        n, nb, worst, jl = compare_json(a, b, pattern, only, skip)
        print(f"\n## {title}: {n} numbers, {nb} differ, largest |Δ| {worst:.3g}")
        if only != "/activation/":
            print("\n".join(jl[:60]) + (f"\n... {len(jl) - 60} more" if len(jl) > 60 else ""))
    sel = compare_selection(a, b)
    print(f"\n## selection: {len(sel)} (dataset, method, share) picked a different trial or λ")
    print("\n".join(sel))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
