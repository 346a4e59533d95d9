"""Projected CPU time of a budget of params.yaml (default: `paper`) on real-size WESAD and HHAR,
from measured costs per window-step of the three kernels a trial is made of (state pass + ridge
statistics, evaluation of the λ grid, one IP epoch), and a check of the projection against one
full paper-size trial.

    .venv/bin/python benchmarks/bench_paper_budget.py [--budget paper reduced] [--check] [--repeats 3]

Each kernel runs in this process with 1 BLAS thread (as a runner worker does) on random inputs of
the real shapes (WESAD: 700 steps x 8 channels; HHAR: 200 x 6), for every reservoir size of the
budget's search space. The projection multiplies these costs by the window-steps each trial,
retrain and assessment touches (the budget's trials and retrains, 4 shares; `paper` = PROTOCOL §6:
100 trials, 5 retrains) with the search space's expectations; see ``project`` for the formula and
its assumptions. Wall time on C cores is the CPU time / C (trials are independent jobs).
"""

from __future__ import annotations

import argparse
import statistics
import time
from itertools import product
from pathlib import Path

import numpy as np
import yaml
from threadpoolctl import threadpool_info, threadpool_limits

from esnfed_core.plasticity import IPConfig, ip_epoch
from esnfed_core.readout import evaluate, ridge_stats, solve
from esnfed_core.reservoir import ReservoirConfig, build_reservoir
from esnfed_core.search import clip_budgets, fedclip_budgets, parse_dimension

LAMBDAS = [1e-5, 1e-4, 1e-3, 1e-2, 0.1, 0.5, 1.0]
# Real sizes: WESAD ~3000 s of labels 1-4 per subject (1-s windows; DATA-FACTS run lengths),
# HHAR 20,992 windows over 9 users (BENCHMARKS.md, preprocess HHAR).
DATA = {
    "wesad": {"steps": 700, "inputs": 8, "classes": 4, "contexts": 5, "windows_per_user": 2990,
              "train_users": {"25": 3, "50": 5, "75": 7, "100": 9}, "val_users": 3, "test_users": 3,
              "units": [200, 300, 400],
              # cumulative share of the windows after each context (baseline 1170 s, then ~670,
              # ~372, ~395, ~395 in one of the two orders): what joint re-trains on at context t
              "cumulative": [0.39, 0.57, 0.70, 0.87, 1.0]},
    "hhar": {"steps": 200, "inputs": 6, "classes": 6, "contexts": 4, "windows_per_user": 2332,
             "train_users": {"25": 2, "50": 3, "75": 4, "100": 5}, "val_users": 2, "test_users": 2,
             "units": [100, 200, 300, 400, 500], "cumulative": [0.25, 0.5, 0.75, 1.0]},
}
PARAMS = Path(__file__).resolve().parents[1] / "params.yaml"
JOINT_EXTRA = 3  # assumed rounds before the best one; joint then runs `patience` more (5 / 3)


def budget_settings(params: dict, name: str) -> dict:
    """Trials, retrains and the searched values the projection needs from ``budgets.<name>``."""
    b = params["budgets"][name]
    space = b["space"]

    def values(section: str, key: str) -> list:
        dim = parse_dimension(key, space[section][key], f"budgets.{name}.space.{section}")
        if dim.values is None:
            raise SystemExit(f"budgets.{name}.space.{section}.{key}: a continuous range cannot be projected")
        return list(dim.values)

    return {"trials": b["trials"], "retrains": b["retrains"],
            "units": {ds: values(ds, "units") for ds in DATA},
            "ip_rounds": values("ip", "rounds"), "fedip_rounds": values("fedip", "rounds"),
            "local_epochs": values("fedip", "local_epochs")}


def kernel_costs(dataset: str, units: int, windows: int, repeats: int) -> dict[str, float]:
    """Median seconds per window-step of the three kernels at ``units``."""
    d = DATA[dataset]
    rng = np.random.default_rng(0)
    x = rng.standard_normal((windows, d["steps"], d["inputs"])).astype(np.float32)
    y = rng.integers(0, d["classes"], size=(windows, d["steps"])).astype(np.int8)
    res = build_reservoir(ReservoirConfig(d["inputs"], units, 0.9, 0.3, 1.0), 0)
    readouts = solve(ridge_stats(res, x[:8], y[:8], d["classes"]), LAMBDAS)
    cfg = IPConfig(sigma=0.5)
    ops = {
        "stats": lambda: ridge_stats(res, x, y, d["classes"]),
        "eval": lambda: evaluate(res, x, y, readouts),
        "ip_epoch": lambda: ip_epoch(res, x, cfg, np.random.default_rng(1)),
    }
    out = {}
    with threadpool_limits(limits=1):
        for name, fn in ops.items():
            fn()  # warm-up
            times = []
            for _ in range(repeats):
                t0 = time.perf_counter()
                fn()
                times.append(time.perf_counter() - t0)
            out[name] = statistics.median(times) / (windows * d["steps"])
    return out


def project(dataset: str, cost: dict[int, dict[str, float]], budget: dict) -> dict[str, float]:
    """CPU seconds per method for the whole ``budget`` (``budget_settings``) of ``dataset``, all shares.

    Per trial: stationary methods pay one statistics pass over the training windows, one
    evaluation pass of the λ grid over the validation windows, and IP epochs (ip: R; fedip: R·E)
    over the training windows; expectations over the uniform search space. Continual methods use
    the best IP config (assumed average: mean units, the mean rounds R and local epochs E, 15 and 6
    in the papers' space): naive/replay train B epochs
    (FedCLIP: B rounds of E epochs) per context on that context (replay: ×1.32, the 32 buffer
    windows per 100), solve per context, and evaluate every validation context after each
    context; the grid sizes follow PROTOCOL §6. Joint trains each context from scratch on all
    contexts so far for (patience + JOINT_EXTRA) rounds, each with a solve and a validation
    evaluation. Retraining repeats the training without validation; assessment evaluates the test
    users (continual: once per context). Lower bounds: data loading, solves and messages are small
    next to these passes (the --check run measures how small).
    """
    d = DATA[dataset]
    steps = d["steps"] * d["windows_per_user"]
    val, test = d["val_users"] * steps, d["test_users"] * steps
    units, trials, retrains = budget["units"][dataset], budget["trials"], budget["retrains"]
    mean = {k: statistics.mean(cost[n][k] for n in units) for k in ("stats", "eval", "ip_epoch")}
    er = statistics.mean(budget["ip_rounds"])
    ere = statistics.mean(r * e for r, e in product(budget["fedip_rounds"], budget["local_epochs"]))
    t_ctx, cum = d["contexts"], sum(d["cumulative"])
    out: dict[str, float] = {}
    for pct, users in d["train_users"].items():
        tr = users * steps
        train_fit = tr * mean["stats"]
        assess = test * mean["eval"]
        stationary = {
            "ridge": (train_fit, train_fit, assess + tr * mean["eval"]),
            "ip": (er * tr * mean["ip_epoch"] + train_fit, er * tr * mean["ip_epoch"] + train_fit, assess),
            "fedip": (ere * tr * mean["ip_epoch"] + train_fit, ere * tr * mean["ip_epoch"] + train_fit, assess),
        }
        stationary["incfed"] = stationary["fedavg"] = stationary["ridge"]
        for m, (fit, refit, ass) in stationary.items():
            out[m] = out.get(m, 0.0) + trials * (fit + val * mean["eval"]) + retrains * (refit + ass)
        r_best = round(statistics.mean(budget["fedip_rounds"]))
        e_best = round(statistics.mean(budget["local_epochs"]))
        grids = {"clip": clip_budgets(r_best), "fedclip": fedclip_budgets(r_best, t_ctx)}
        for algo, epochs_per_round in (("clip", 1), ("fedclip", e_best)):
            for strategy, factor in (("naive", 1.0), ("replay", 1.32)):
                fit = [b * epochs_per_round * factor * tr * mean["ip_epoch"] + train_fit for b in grids[algo]]
                sel = sum(f + t_ctx * val * mean["eval"] for f in fit)
                refit = statistics.mean(fit)
                key = f"{algo}-{strategy}"
                out[key] = out.get(key, 0.0) + sel + retrains * (refit + t_ctx * test * mean["eval"])
            rounds = (5 if algo == "clip" else 3) + JOINT_EXTRA
            per_round = epochs_per_round * mean["ip_epoch"] + mean["stats"]
            fit = rounds * cum * (tr * per_round + val * mean["eval"])
            key = f"{algo}-joint"
            out[key] = out.get(key, 0.0) + fit + retrains * (fit + t_ctx * test * mean["eval"])
    out["random"] = 0.0
    return out


def check(cost: dict[int, dict[str, float]]) -> tuple[float, float]:
    """One full paper-size ridge selection trial (WESAD 25 %, N = 400) through the trial function,
    timed, against the projection's per-trial estimate."""
    from esnfed_core.data.processed import UserData
    from esnfed_core.settings import Settings
    from esnfed_core.trial import TrialData, fit

    d = DATA["wesad"]
    rng = np.random.default_rng(2)

    def user():
        w = d["windows_per_user"]
        return UserData(rng.standard_normal((w, d["steps"], d["inputs"])).astype(np.float32),
                        rng.integers(0, d["classes"], (w, d["steps"])).astype(np.int8),
                        np.repeat(np.arange(5), -(-w // 5))[:w].astype(np.int8))

    data = TrialData({f"t{i}": user() for i in range(3)}, {f"v{i}": user() for i in range(3)}, 4, 5)
    cfg = {"units": 400, "spectral_radius": 0.9, "leak": 0.3, "input_scaling": 1.0}
    with threadpool_limits(limits=1):
        t0 = time.perf_counter()
        fit("ridge", cfg, 0, data, Settings())
        measured = time.perf_counter() - t0
    steps = 3 * d["windows_per_user"] * d["steps"]
    predicted = steps * (cost[400]["stats"] + cost[400]["eval"])
    return measured, predicted


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--windows", type=int, default=64, help="windows per kernel measurement")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--check", action="store_true", help="also time one paper-size ridge trial")
    ap.add_argument("--budget", nargs="+", default=["paper"],
                    help="entries of budgets in params.yaml, projected from one measurement (default: paper)")
    ap.add_argument("--params", type=Path, default=PARAMS)
    ap.add_argument("--cores", type=int, nargs="+", default=[2, 16], help="wall time shown for these core counts")
    args = ap.parse_args()
    params = yaml.safe_load(args.params.read_text())
    for name in args.budget:
        if name not in params.get("budgets", {}):
            raise SystemExit(f"{args.params}: budgets.{name}: no such budget")
    budgets = {name: budget_settings(params, name) for name in args.budget}
    blas = {i["internal_api"]: i.get("version") for i in threadpool_info()}
    print(f"numpy {np.__version__}, BLAS {blas}, 1 BLAS thread, {args.windows} windows, median of {args.repeats}")
    costs_by_ds = {}
    for ds in DATA:
        units = sorted({n for b in budgets.values() for n in b["units"][ds]})
        costs_by_ds[ds] = cost = {n: kernel_costs(ds, n, args.windows, args.repeats) for n in units}
        print(f"\n{ds}: µs per window-step (1 thread)")
        print("| units | stats pass | eval (7 λ) | IP epoch |")
        print("|---|---|---|---|")
        for n, c in cost.items():
            print(f"| {n} | {c['stats'] * 1e6:.2f} | {c['eval'] * 1e6:.2f} | {c['ip_epoch'] * 1e6:.2f} |")
    for name, budget in budgets.items():
        print(f"\nbudget {name}: {budget['trials']} trials, {budget['retrains']} retrains; "
              "projected CPU hours per method (all shares)")
        proj = {ds: project(ds, costs_by_ds[ds], budget) for ds in DATA}
        print("| method | " + " | ".join(f"{ds} CPU h" for ds in DATA) + " |")
        print("|---" * (len(DATA) + 1) + "|")
        for m in sorted(proj["wesad"], key=lambda m: -proj["wesad"][m]):
            print(f"| {m} | " + " | ".join(f"{proj[ds][m] / 3600:.1f}" for ds in DATA) + " |")
        subs = {ds: sum(p.values()) for ds, p in proj.items()}
        print("| **total** | " + " | ".join(f"**{subs[ds] / 3600:.1f}**" for ds in DATA) + " |")
        total = sum(subs.values())
        print(f"{name}: {total / 3600:.0f} CPU hours; wall time "
              + ", ".join(f"{total / 3600 / c:.1f} h ({total / 3600 / c / 24:.1f} days) on {c} cores"
                          for c in args.cores))
    if args.check and 400 in costs_by_ds["wesad"]:
        measured, predicted = check(costs_by_ds["wesad"])
        print(f"\ncheck, one ridge trial WESAD 25 % N=400: measured {measured:.1f} s, "
              f"kernel projection {predicted:.1f} s (ratio {measured / predicted:.2f})")


if __name__ == "__main__":
    main()
