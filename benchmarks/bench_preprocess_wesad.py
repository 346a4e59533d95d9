"""Benchmark: `esnfed preprocess --dataset wesad` on a paper-scale synthetic WESAD (15 subjects,
real durations at 700 Hz): wall time and peak memory of the command, as in BENCHMARKS.md.

    .venv/bin/python benchmarks/bench_preprocess_wesad.py [--scale 1.0] [--protocol 2] [--repeats 3]
        [--root DIR] [--keep]

The raw files (4 GB at scale 1 with pickle protocol 2; about 12 GB with protocol 0, the size of
the real files) are generated first with `esnfed synthesize` into --root and deleted at the end
unless --keep. Each command runs in its own process; peak memory is that
process's maximum resident set size (os.wait4), so generation never inflates the preprocess figure.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

from _measure import folder_bytes, preprocess_result, run, write_bench_params  # benchmarks/ is the script's folder, first on sys.path

REPO = Path(__file__).resolve().parents[1]
ESNFED = Path(sys.executable).parent / "esnfed"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="synthetic.wesad.scale (1 = real durations)")
    ap.add_argument("--protocol", type=int, default=2, choices=(0, 2), help="synthetic.wesad.protocol")
    ap.add_argument("--repeats", type=int, default=3, help="preprocess runs (median time, max memory)")
    ap.add_argument("--root", type=Path, default=Path("/tmp/esnfed-bench-wesad"), help="scratch folder")
    ap.add_argument("--keep", action="store_true", help="keep the generated files")
    args = ap.parse_args()

    root = args.root
    common = write_bench_params(REPO, root, "wesad", {"seed": 0, "scale": args.scale, "protocol": args.protocol})
    try:
        generated = run([str(ESNFED), "synthesize", "--dataset", "wesad", "--out", str(root / "raw"), *common])
        walls, rsss = [], []
        for _ in range(args.repeats):
            w, r = run([str(ESNFED), "preprocess", "--dataset", "wesad", "--raw-dir", str(root / "raw"),
                        "--out", str(root / "processed"), *common])
            walls.append(w)
            rsss.append(r)
        manifest = json.loads((root / "processed" / "wesad" / "manifest.json").read_text())
        result = {
            "scale": args.scale,
            "protocol": args.protocol,
            "subjects": len(manifest["users"]),
            "raw_gb": folder_bytes(root / "raw") / 1e9,
            "processed_gb": folder_bytes(root / "processed") / 1e9,
            **preprocess_result(manifest, generated, walls, rsss),
        }
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(result, indent=2))
    print(
        f"\n| pickle protocol | subjects | windows | raw | processed | preprocess median (n={args.repeats}) | peak RSS | "
        f"s per raw GB |\n|---|---|---|---|---|---|---|---|\n"
        f"| {args.protocol} | {result['subjects']} | {result['windows']} | {result['raw_gb']:.2f} GB | "
        f"{result['processed_gb']:.2f} GB | {result['preprocess_median_s']:.1f} s "
        f"(runs {', '.join(f'{w:.1f}' for w in walls)}) | {result['preprocess_peak_mib']:.0f} MiB | "
        f"{result['preprocess_median_s'] / result['raw_gb']:.1f} |"
    )


if __name__ == "__main__":
    main()
