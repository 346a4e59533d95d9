"""Benchmark: bounded memory and time at paper scale: one FedIP trial (400 units) and one
retrain + assess on synthetic WESAD with the real recording lengths, each stage its own process.

    .venv/bin/python benchmarks/bench_paper_scale.py [--rounds 2] [--local-epochs 5] [--units 400]
        [--calibrate] [--root DIR] [--keep] [--scale 1]
    .venv/bin/python benchmarks/bench_paper_scale.py --scaling [--loading lazy eager] [--units 400] [--scale 1]
    .venv/bin/python benchmarks/bench_paper_scale.py --read-cost [--repeats 5] [--scale 1]

Stages: `esnfed synthesize` (scale 1: 15 subjects, 87-118 min at 700 Hz), `preprocess`,
`partition`, `select --algo fedip --pct 100` (one trial: the 9 training users of the 100 % share,
scored on the 3 validation users), `retrain --pct 100` (one seed), then `assess` (the retrained
model is copied to the 25/50/75 % folders, its .json relabelled with each share and its training
users, which assess checks, so the unchanged command scores it on the test users four times). Trials run in the command's own process (backend sequential, 1 BLAS thread), so
the peak RSS of each command (os.wait4) includes the trial. --calibrate adds a select of
1 round x 1 epoch in a separate runs folder: with the main run it gives the time per IP epoch
and the fixed part (data loading, ridge statistics, validation), from which the time of
20 rounds x 5 epochs is extrapolated when fewer rounds were run. Generated files are deleted
at the end unless --keep. --scale (default 1) shrinks the recordings for a smoke run, in every
mode.

--scaling measures how peak memory grows with the data a command reads, rounds x epochs = 1 x 1
(the peak does not depend on them: every epoch streams the same batches): `select` of one FedIP
trial and of one centralised IP trial on the 25 % share (3 training + 3 validation subjects) and
on the 100 % share (9 + 3), `retrain` of FedIP on both shares and `assess` (3 test subjects), each
with the windows left on disk (lazy, what the stages do) and, for "before", loaded into memory
(eager: the stages' loader patched to ``load_user(..., lazy=False)``, the data handling of the
code before lazy windows; the eager assess scores the lazy run's models, the same bytes).
--read-cost times reading the 100 % share's windows in IP and state-pass batches from disk
(lazy) and from memory, median of --repeats passes.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import yaml
from _measure import folder_bytes, run  # benchmarks/ is the script's folder, first on sys.path

REPO = Path(__file__).resolve().parents[1]
ESNFED = Path(sys.executable).parent / "esnfed"
PAPER_EPOCHS = 20 * 5  # a paper-scale FedIP trial: 20 rounds x 5 local epochs


# `esnfed` with the experiment stages' data loader patched to load the windows into memory.
EAGER = (
    "import esnfed_stages.experiment.trial_data as e\n"
    "from esnfed_core.data.processed import load_user\n"
    "e.load_user = lambda d, u, lazy=True: load_user(d, u, lazy=False)\n"
    "from esnfed_cli.main import app\n"
    "app(prog_name='esnfed')\n"
)


def _params(root: Path, units: int, rounds: int, local_epochs: int, scale: float = 1.0) -> Path:
    """params.yaml of the repo with a one-trial, one-retrain budget of fixed hyperparameters
    (centralised IP runs rounds x local_epochs epochs: the IP work of the FedIP trial)."""
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["synthetic"]["wesad"] = {"seed": 0, "scale": scale, "protocol": 2}
    params["budget"] = "default"
    space = params["budgets"]["default"]["space"]
    space["wesad"] = {"units": [units], "spectral_radius": [0.9], "leak": [0.3], "input_scaling": [1.0]}
    space["fedip"] = {"sigma": [0.5], "rounds": [rounds], "local_epochs": [local_epochs]}
    space["ip"] = {"sigma": [0.5], "rounds": [rounds * local_epochs]}
    params["budgets"]["default"].update(trials=1, retrains=1)
    params["runner"] = {"backend": "sequential", "n_jobs": 1, "blas_threads": 1}
    path = root / f"params-{rounds}x{local_epochs}.yaml"
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path


def _trial_seconds(runs: Path, algo: str = "fedip", pct: str = "100") -> float:
    rec = json.loads((runs / "select" / "wesad" / algo / pct / "trial-0000.json").read_text())
    if rec["status"] != "ok":
        raise SystemExit(f"trial failed: {rec['error']}")
    return float(rec["seconds"])


def _prepare(root: Path, params: Path, result: dict) -> Path:
    """synthesize, preprocess and partition paper-scale WESAD under ``root``; returns data/."""
    data = root / "data"
    stages = {
        "synthesize": [str(ESNFED), "synthesize", "--dataset", "wesad", "--out", str(root / "raw"),
                       "--params", str(params)],
        "preprocess": [str(ESNFED), "preprocess", "--dataset", "wesad", "--raw-dir", str(root / "raw"),
                       "--out", str(data / "processed"), "--params", str(params)],
        "partition": [str(ESNFED), "partition", "--dataset", "wesad", "--processed-dir",
                      str(data / "processed"), "--out", str(data / "partitions"), "--params", str(params)],
    }
    for name, cmd in stages.items():
        wall, rss = run(cmd)
        result[name] = {"wall_s": round(wall, 1), "peak_mib": round(rss)}
        print(f"{name}: {wall:.1f} s, peak {rss:.0f} MiB", flush=True)
        if name == "preprocess":
            shutil.rmtree(root / "raw")  # 4 GB no longer needed
    return data


def _windows(data: Path) -> dict:
    manifest = json.loads((data / "processed" / "wesad" / "manifest.json").read_text())
    part = json.loads((data / "partitions" / "wesad.json").read_text())
    windows = {u: e["windows"] for u, e in manifest["users"].items()}
    out = {"all": sum(windows.values()), "validation": sum(windows[u] for u in part["validation"]),
           "test": sum(windows[u] for u in part["test"])}
    out.update({f"train_{p}": sum(windows[u] for u in part["train"][p]) for p in ("25", "100")})
    return out


def _copy_model(models: Path, pct: str, data: Path) -> None:
    """The 100 % share's retrained models (``models``/100) as share ``pct``'s, so that the unchanged
    ``assess`` scores them once per share: each .json relabelled with ``pct`` and that share's
    training users (assess refuses a model whose .json names another share or other users)."""
    users = json.loads((data / "partitions" / "wesad.json").read_text())["train"][pct]
    shutil.copytree(models / "100", models / pct)
    for js in (models / pct).glob("seed-*.json"):
        meta = json.loads(js.read_text())
        meta.update(pct=pct, train_users=users)
        js.write_text(json.dumps(meta, indent=2))


def _scaling(root: Path, units: int, scale: float, loadings: list[str], result: dict) -> None:
    """Peak RSS of select (FedIP, IP), retrain and assess on two shares, lazy and eager."""
    params = _params(root, units, 1, 1, scale)
    data = _prepare(root, params, result)
    result["windows"] = win = _windows(data)
    # float32 windows of 700 x 8 a command reads: select = train + validation, retrain = train.
    gib = 700 * 8 * 4 / 2**30
    result["data_gib"] = {"select_25": round((win["train_25"] + win["validation"]) * gib, 2),
                          "select_100": round((win["train_100"] + win["validation"]) * gib, 2),
                          "retrain_25": round(win["train_25"] * gib, 2),
                          "retrain_100": round(win["train_100"] * gib, 2), "assess": round(win["test"] * gib, 2)}
    rows = result["scaling"] = []
    for loading in loadings:  # lazy first: its retrained models are the eager assess's input
        esnfed = [str(ESNFED)] if loading == "lazy" else [sys.executable, "-c", EAGER]
        runs = root / f"runs-{loading}"
        common = ["--dataset", "wesad", "--params", str(params), "--data-dir", str(data), "--runs-dir", str(runs)]
        steps = [("select", algo, pct) for algo in ("fedip", "ip") for pct in ("25", "100")]
        if loading == "lazy":
            steps += [("retrain", "fedip", pct) for pct in ("25", "100")]
        elif (root / "runs-lazy" / "models").is_dir():
            shutil.copytree(root / "runs-lazy" / "models", runs / "models")
        for stage, algo, pct in steps:
            wall, rss = run([*esnfed, stage, "--algo", algo, "--pct", pct, *common])
            row = {"loading": loading, "command": f"{stage} --algo {algo} --pct {pct}", "wall_s": round(wall, 1),
                   "peak_mib": round(rss)}
            if stage == "select":
                row["trial_s"] = round(_trial_seconds(runs, algo, pct), 1)
            rows.append(row)
            print(json.dumps(row), flush=True)
        models = runs / "models" / "wesad" / "fedip"
        if (models / "100").is_dir():
            for pct in ("50", "75"):
                if not (models / pct).is_dir():
                    _copy_model(models, pct, data)
            wall, rss = run([*esnfed, "assess", "--algo", "fedip", *common])
            rows.append({"loading": loading, "command": "assess --algo fedip (4 models)", "wall_s": round(wall, 1),
                         "peak_mib": round(rss)})
            print(json.dumps(rows[-1]), flush=True)


def _read_cost(root: Path, scale: float, repeats: int, result: dict) -> None:
    """Time to read the training windows of the 100 % share in IP batches (100, shuffled) and
    state-pass batches (256, in order): from disk (lazy, page cache warm) against from memory."""
    from esnfed_core.data.processed import load_user  # noqa: PLC0415
    from esnfed_core.data.windows import concat  # noqa: PLC0415

    data = _prepare(root, _params(root, 400, 1, 1, scale), result)
    directory = data / "processed" / "wesad"
    users = json.loads((data / "partitions" / "wesad.json").read_text())["train"]["100"]
    lazy = concat([load_user(directory, u, lazy=True).x for u in users])
    eager = np.concatenate([load_user(directory, u).x for u in users])
    n = len(eager)
    order = np.random.default_rng(0).permutation(n)
    patterns = {"ip_shuffled_100": [order[i : i + 100] for i in range(0, n, 100)],
                "states_in_order_256": [slice(i, i + 256) for i in range(0, n, 256)]}
    out = result["read_us_per_window"] = {"windows": n}
    for name, keys in patterns.items():
        for label, x in (("memory", eager), ("disk", lazy)):
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                for k in keys:
                    np.ascontiguousarray(x[k])  # a real batch, as run_batch makes of it
                times.append(time.perf_counter() - start)
            out[f"{name}_{label}"] = round(statistics.median(times) / n * 1e6, 2)
            print(f"{name} {label}: {out[f'{name}_{label}']} us per window", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2, help="FedIP rounds of the trial (paper: up to 20)")
    ap.add_argument("--local-epochs", type=int, default=5, help="local IP epochs per round")
    ap.add_argument("--units", type=int, default=400, help="reservoir units")
    ap.add_argument("--calibrate", action="store_true", help="also time a 1 x 1 select to extrapolate")
    ap.add_argument("--root", type=Path, default=Path("/tmp/esnfed-bench-scale"), help="scratch folder")
    ap.add_argument("--keep", action="store_true", help="keep the generated files")
    ap.add_argument("--scaling", action="store_true",
                    help="peak memory against data size (two shares), lazy and eager windows, 1 x 1 epochs")
    ap.add_argument("--read-cost", action="store_true",
                    help="time reading IP and state-pass batches from disk against from memory")
    ap.add_argument("--repeats", type=int, default=5, help="--read-cost: repetitions (median)")
    ap.add_argument("--scale", type=float, default=1.0,
                    help="synthetic WESAD scale (1 = the real recording lengths; less for a smoke run)")
    ap.add_argument("--loading", nargs="+", choices=("lazy", "eager"), default=["lazy", "eager"],
                    help="--scaling: which data loadings to measure (lazy first)")
    args = ap.parse_args()

    root = args.root
    root.mkdir(parents=True, exist_ok=True)
    if args.scaling or args.read_cost:
        result: dict = {"units": args.units, "rounds": 1, "local_epochs": 1, "scale": args.scale}
        start = time.perf_counter()
        try:
            if args.scaling:
                _scaling(root, args.units, args.scale, sorted(args.loading, reverse=True), result)
            else:
                _read_cost(root, args.scale, args.repeats, result)
            result.update(total_wall_s=round(time.perf_counter() - start), python=platform.python_version(),
                          numpy=np.__version__, cpus=os.cpu_count(), machine=platform.machine())
        finally:
            if not args.keep:
                shutil.rmtree(root, ignore_errors=True)
        print(json.dumps(result, indent=2))
        return
    params = _params(root, args.units, args.rounds, args.local_epochs, args.scale)
    data, runs = root / "data", root / "runs"
    exp = ["--dataset", "wesad", "--algo", "fedip", "--params", str(params), "--data-dir", str(data),
           "--runs-dir", str(runs)]
    result: dict = {"units": args.units, "rounds": args.rounds, "local_epochs": args.local_epochs, "scale": args.scale}
    try:
        _prepare(root, params, result)
        stages = {
            "select": [str(ESNFED), "select", *exp, "--pct", "100"],
            "retrain": [str(ESNFED), "retrain", *exp, "--pct", "100"],
        }
        for name, cmd in stages.items():
            wall, rss = run(cmd)
            result[name] = {"wall_s": round(wall, 1), "peak_mib": round(rss)}
            print(f"{name}: {wall:.1f} s, peak {rss:.0f} MiB", flush=True)
        result["select"]["trial_s"] = round(_trial_seconds(runs), 1)
        for pct in ("25", "50", "75"):
            _copy_model(runs / "models" / "wesad" / "fedip", pct, data)
        wall, rss = run([str(ESNFED), "assess", *exp])
        result["assess"] = {"wall_s": round(wall, 1), "peak_mib": round(rss), "models": 4}
        print(f"assess: {wall:.1f} s, peak {rss:.0f} MiB", flush=True)

        result["windows"] = _windows(data)
        result["processed_gb"] = round(folder_bytes(data / "processed") / 1e9, 2)

        epochs = args.rounds * args.local_epochs
        if args.calibrate:
            cal_runs = root / "runs-1x1"
            cal = _params(root, args.units, 1, 1, args.scale)
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
