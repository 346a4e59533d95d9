"""Benchmark: bounded memory and time at paper scale: one FedIP trial (400 units) and one
retrain + assess on synthetic WESAD with the real recording lengths, each stage its own process.

    .venv/bin/python benchmarks/bench_paper_scale.py [--rounds 2] [--local-epochs 5] [--units 400]
        [--calibrate] [--root DIR] [--keep]

Stages: `esnfed synthesize` (scale 1: 15 subjects, 87-118 min at 700 Hz), `preprocess`,
`partition`, `select --algo fedip --pct 100` (one trial: the 9 training users of the 100 % share,
scored on the 3 validation users), `retrain --pct 100` (one seed), then `assess` (the retrained
model is copied to the 25/50/75 % folders so the unchanged command scores it on the test users
four times). Trials run in the command's own process (backend sequential, 1 BLAS thread), so
the peak RSS of each command (os.wait4) includes the trial. --calibrate adds a select of
1 round x 1 epoch in a separate runs folder: with the main run it gives the time per IP epoch
and the fixed part (data loading, ridge statistics, validation), from which the time of
20 rounds x 5 epochs is extrapolated when fewer rounds were run. Generated files are deleted
at the end unless --keep.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import sys
from pathlib import Path

import numpy as np
import yaml
from _measure import folder_bytes, run  # benchmarks/ is the script's folder, first on sys.path

REPO = Path(__file__).resolve().parents[1]
ESNFED = Path(sys.executable).parent / "esnfed"
PAPER_EPOCHS = 20 * 5  # the trial: 20 rounds x 5 local epochs


def _params(root: Path, units: int, rounds: int, local_epochs: int) -> Path:
    """params.yaml of the repo with a one-trial, one-retrain budget of fixed hyperparameters."""
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["synthetic"]["wesad"] = {"seed": 0, "scale": 1.0, "protocol": 2}
    params["budget"] = "default"
    space = params["budgets"]["default"]["space"]
    space["wesad"] = {"units": [units], "spectral_radius": [0.9], "leak": [0.3], "input_scaling": [1.0]}
    space["fedip"] = {"sigma": [0.5], "rounds": [rounds], "local_epochs": [local_epochs]}
    params["budgets"]["default"].update(trials=1, retrains=1)
    params["runner"] = {"backend": "sequential", "n_jobs": 1, "blas_threads": 1}
    path = root / f"params-{rounds}x{local_epochs}.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


def _trial_seconds(runs: Path) -> float:
    rec = json.loads((runs / "select" / "wesad" / "fedip" / "100" / "trial-0000.json").read_text())
    if rec["status"] != "ok":
        raise SystemExit(f"trial failed: {rec['error']}")
    return float(rec["seconds"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2, help="FedIP rounds of the trial (paper: up to 20)")
    ap.add_argument("--local-epochs", type=int, default=5, help="local IP epochs per round")
    ap.add_argument("--units", type=int, default=400, help="reservoir units")
    ap.add_argument("--calibrate", action="store_true", help="also time a 1 x 1 select to extrapolate")
    ap.add_argument("--root", type=Path, default=Path("/tmp/esnfed-bench-scale"), help="scratch folder")
    ap.add_argument("--keep", action="store_true", help="keep the generated files")
    args = ap.parse_args()

    root = args.root
    root.mkdir(parents=True, exist_ok=True)
    params = _params(root, args.units, args.rounds, args.local_epochs)
    data, runs = root / "data", root / "runs"
    exp = ["--dataset", "wesad", "--algo", "fedip", "--params", str(params), "--data-dir", str(data),
           "--runs-dir", str(runs)]
    result: dict = {"units": args.units, "rounds": args.rounds, "local_epochs": args.local_epochs}
    try:
        stages = {
            "synthesize": [str(ESNFED), "synthesize", "--dataset", "wesad", "--out", str(root / "raw"),
                           "--params", str(params)],
            "preprocess": [str(ESNFED), "preprocess", "--dataset", "wesad", "--raw-dir", str(root / "raw"),
                           "--out", str(data / "processed"), "--params", str(params)],
            "partition": [str(ESNFED), "partition", "--dataset", "wesad", "--processed-dir",
                          str(data / "processed"), "--out", str(data / "partitions"), "--params", str(params)],
            "select": [str(ESNFED), "select", *exp, "--pct", "100"],
            "retrain": [str(ESNFED), "retrain", *exp, "--pct", "100"],
        }
        for name, cmd in stages.items():
            wall, rss = run(cmd)
            result[name] = {"wall_s": round(wall, 1), "peak_mib": round(rss)}
            print(f"{name}: {wall:.1f} s, peak {rss:.0f} MiB", flush=True)
            if name == "preprocess":
                shutil.rmtree(root / "raw")  # 4 GB no longer needed
        result["select"]["trial_s"] = round(_trial_seconds(runs), 1)
        src = runs / "models" / "wesad" / "fedip" / "100"
        for pct in ("25", "50", "75"):
            shutil.copytree(src, src.parent / pct)
        wall, rss = run([str(ESNFED), "assess", *exp])
        result["assess"] = {"wall_s": round(wall, 1), "peak_mib": round(rss), "models": 4}
        print(f"assess: {wall:.1f} s, peak {rss:.0f} MiB", flush=True)

        manifest = json.loads((data / "processed" / "wesad" / "manifest.json").read_text())
        part = json.loads((data / "partitions" / "wesad.json").read_text())
        windows = {u: e["windows"] for u, e in manifest["users"].items()}
        result["windows"] = {"all": sum(windows.values()),
                             "train_100": sum(windows[u] for u in part["train"]["100"]),
                             "validation": sum(windows[u] for u in part["validation"]),
                             "test": sum(windows[u] for u in part["test"])}
        result["processed_gb"] = round(folder_bytes(data / "processed") / 1e9, 2)

        epochs = args.rounds * args.local_epochs
        if args.calibrate:
            cal_runs = root / "runs-1x1"
            cal = _params(root, args.units, 1, 1)
            wall, rss = run([str(ESNFED), "select", "--dataset", "wesad", "--algo", "fedip", "--pct", "100",
                             "--params", str(cal), "--data-dir", str(data), "--runs-dir", str(cal_runs)])
            t1 = _trial_seconds(cal_runs)
            per_epoch = (result["select"]["trial_s"] - t1) / (epochs - 1)
            fixed = t1 - per_epoch
            result["calibration"] = {"trial_1x1_s": round(t1, 1), "peak_mib": round(rss),
                                     "per_epoch_s": round(per_epoch, 1), "fixed_s": round(fixed, 1),
                                     "paper_trial_s": round(fixed + PAPER_EPOCHS * per_epoch)}
        result.update(python=platform.python_version(), numpy=np.__version__, cpus=os.cpu_count(),
                      machine=platform.machine())
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
