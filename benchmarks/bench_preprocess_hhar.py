"""Benchmark: `esnfed preprocess --dataset hhar` on a synthetic HHAR with the real row counts (~13 M rows
per phone file, ~3.5 M per watch file): wall time and peak memory, as in BENCHMARKS.md.

    .venv/bin/python benchmarks/bench_preprocess_hhar.py [--seconds 240] [--watch-duty 0.45]
        [--repeats 3] [--zip] [--root DIR] [--keep]

The four CSVs (~3 GB) are generated first with `esnfed synthesize` into --root and deleted at the end
unless --keep; with --zip the UCI zip (nested zip) is generated as well and preprocessing is also
timed reading it in place. Each command runs in its own process; peak memory is that process's
maximum resident set size (os.wait4), so generation never inflates the preprocess figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

import pandas as pd
from _measure import preprocess_result, run, write_bench_params  # benchmarks/ is the script's folder, first on sys.path

REPO = Path(__file__).resolve().parents[1]
ESNFED = Path(sys.executable).parent / "esnfed"
FOLDER = "Activity recognition exp"
OUTER_ZIP = "heterogeneity+activity+recognition.zip"


def rows(path: Path) -> int:
    with open(path, "rb") as f:
        return sum(block.count(b"\n") for block in iter(lambda: f.read(1 << 24), b"")) - 1


def preprocess(raw: Path, out: Path, common: list[str], repeats: int) -> tuple[list[float], list[float]]:
    walls, rsss = [], []
    for _ in range(repeats):
        w, r = run([str(ESNFED), "preprocess", "--dataset", "hhar", "--source", "raw", "--raw-dir", str(raw),
                    "--out", str(out), *common])
        walls.append(w)
        rsss.append(r)
    return walls, rsss


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=240.0,
                    help="synthetic.hhar.seconds_per_activity (240 gives the real ~13 M phone rows)")
    ap.add_argument("--watch-duty", type=float, default=0.45,
                    help="synthetic.hhar.watch_duty (0.45 gives the real ~3.5 M watch rows)")
    ap.add_argument("--repeats", type=int, default=3, help="preprocess runs (median time, max memory)")
    ap.add_argument("--zip", action="store_true", help="also generate the UCI zip and preprocess it in place")
    ap.add_argument("--root", type=Path, default=Path("/tmp/esnfed-bench-hhar"), help="scratch folder")
    ap.add_argument("--keep", action="store_true", help="keep the generated files")
    args = ap.parse_args()

    root = args.root
    common = write_bench_params(REPO, root, "hhar", {
        "seed": 0, "seconds_per_activity": args.seconds, "gap_seconds": 2.0,
        "watch_duty": args.watch_duty, "layout": "both" if args.zip else "csv"})
    try:
        generated = run([str(ESNFED), "synthesize", "--dataset", "hhar", "--out", str(root / "raw"), *common])
        csv_dir = root / "raw" / "HHAR" / FOLDER
        counts = {p.stem: rows(p) for p in sorted(csv_dir.glob("*.csv"))}
        raw_gb = sum(p.stat().st_size for p in csv_dir.glob("*.csv")) / 1e9
        walls, rsss = preprocess(root / "raw", root / "processed", common, args.repeats)
        manifest = json.loads((root / "processed" / "hhar" / "manifest.json").read_text())
        result = {
            "rows": counts,
            "users": len(manifest["users"]),
            "raw_csv_gb": raw_gb,
            **preprocess_result(manifest, generated, walls, rsss),
            "pandas": pd.__version__,
        }
        if args.zip:
            zroot = root / "zipraw" / "HHAR"
            zroot.mkdir(parents=True, exist_ok=True)
            os.replace(root / "raw" / "HHAR" / OUTER_ZIP, zroot / OUTER_ZIP)
            zwalls, zrss = preprocess(root / "zipraw", root / "processed-zip", common, 1)
            result.update(zip_gb=(zroot / OUTER_ZIP).stat().st_size / 1e9, zip_preprocess_s=zwalls[0],
                          zip_preprocess_peak_mib=zrss[0])
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(result, indent=2))
    print(
        f"\n| rows (phone acc / gyro, watch acc / gyro) | users | windows | raw CSV | "
        f"preprocess median (n={args.repeats}) | peak RSS |\n|---|---|---|---|---|---|\n"
        f"| {' / '.join(f'{counts[k] / 1e6:.2f} M' for k in counts)} | {result['users']} | "
        f"{result['windows']} | {raw_gb:.2f} GB | {result['preprocess_median_s']:.1f} s "
        f"(runs {', '.join(f'{w:.1f}' for w in walls)}) | {result['preprocess_peak_mib']:.0f} MiB |"
    )


if __name__ == "__main__":
    main()
