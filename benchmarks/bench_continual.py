"""CLIP/FedCLIP trials batched on the device (esnfed_core.accel.continual), end to end, against
the projection from the kernels' costs measured in the same run.

    PYTHONPATH=. python3 benchmarks/bench_continual.py --out $OUT/continual.jsonl   # GPU, ~2 min
    .venv/bin/python benchmarks/bench_continual.py --smoke                          # tiny, CPU

For each method: ``--trials`` trials of WESAD 25 % shape (3 training and 3 validation users of
2,990 windows × 700 steps × 8 channels, 5 contexts of 598 windows, random data) at ``--units``
units, configs differing in σ, through fit_continual_batch (what the trial runner calls for a
batch). Reports the seconds, the driver's ticks and trial-window-steps per kind (IP steps, ridge
statistics, correct counts), their rate, and the seconds the same window-steps cost at the
kernel prices of this run (``ip_step`` of trials × 100 windows, ``ridge_stats`` and
``count_correct`` of trials × 256 windows): measured ÷ projected is what the lockstep, threads,
gathers and the numpy server code add (and what an under-filled device costs).
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_gpu import bank, best_time, sync  # noqa: E402
from esnfed_core.accel import torch_plasticity as tp  # noqa: E402
from esnfed_core.accel import torch_reservoir as tr  # noqa: E402
from esnfed_core.accel.continual import fit_continual_batch  # noqa: E402
from esnfed_core.data.processed import UserData  # noqa: E402
from esnfed_core.settings import Settings  # noqa: E402
from esnfed_core.trial import TrialData  # noqa: E402

PAPER = {"windows": 2990, "steps": 700, "inputs": 8, "classes": 4, "contexts": 5, "users": 3}
SMOKE = {"windows": 10, "steps": 12, "inputs": 3, "classes": 3, "contexts": 2, "users": 2}


def make_data(sz: dict, seed: int = 0) -> TrialData:
    rng = np.random.default_rng(seed)
    w, c = sz["windows"], sz["contexts"]

    def user() -> UserData:
        return UserData(rng.standard_normal((w, sz["steps"], sz["inputs"]), dtype=np.float32),
                        rng.integers(0, sz["classes"], (w, sz["steps"])).astype(np.int8),
                        np.minimum(np.arange(w) * c // w, c - 1).astype(np.int8))

    return TrialData({f"t{i}": user() for i in range(sz["users"])}, {f"v{i}": user() for i in range(sz["users"])},
                     sz["classes"], c)


def kernel_prices(k: int, units: int, sz: dict, dev: torch.device, reps: int) -> dict[str, float]:
    """Seconds per trial-window-step of the three kernels, batched over ``k`` reservoirs."""
    t, u_in, ncls = sz["steps"], sz["inputs"], sz["classes"]
    bk = bank(k, units, u_in, dev, ip=True)
    b = min(256, sz["windows"])
    u = torch.randn(1, b, t, u_in).to(dev)
    y = torch.randint(0, ncls, (1, b, t)).to(torch.int8).to(dev)
    grid = torch.randn(k, 1, ncls, units, dtype=torch.float64).to(dev)
    ib = min(100, sz["windows"])
    ub = torch.randn(k, ib, t, u_in).to(dev)
    nw = torch.full((k,), float(ib), dtype=torch.float64, device=dev)
    sig = torch.full((k,), 0.5, dtype=torch.float64, device=dev)
    return {
        "ip": best_time(lambda: tp.ip_step(bk, ub, None, nw, sig, mu=0.0, eta=0.01, normalize_step=True),
                        dev, reps) / (k * ib * t),
        "stats": best_time(lambda: tr.ridge_stats(bk, u, y, ncls), dev, reps) / (k * b * t),
        "counts": best_time(lambda: tr.count_correct(bk, u, y, grid), dev, reps) / (k * b * t),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU (a test that it runs)")
    ap.add_argument("--device", choices=["cuda", "torch-cpu"], default=None)
    ap.add_argument("--trials", type=int, default=32)
    ap.add_argument("--units", type=int, default=300)
    ap.add_argument("--methods", nargs="+", default=["fedclip-naive", "clip-replay", "fedclip-joint"])
    ap.add_argument("--joint-max-rounds", type=int, default=3, help="bounds joint's rounds per context")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    sz = SMOKE if args.smoke else PAPER
    device = args.device or ("cuda" if torch.cuda.is_available() and not args.smoke else "torch-cpu")
    dev = torch.device("cuda" if device == "cuda" else "cpu")
    if args.smoke:
        torch.set_num_threads(1)
    k, units = (2, 8) if args.smoke else (args.trials, args.units)
    out = open(args.out, "w") if args.out else None

    def emit(rec: dict) -> None:
        line = json.dumps(rec)
        print(line, flush=True)
        if out:
            out.write(line + "\n")
            out.flush()

    emit({"torch": torch.__version__, "device": device,
          "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor() or "cpu",
          "trials": k, "units": units, "sizes": sz})
    data = make_data(sz)
    prices = kernel_prices(k, units, sz, dev, 1 if args.smoke else 2)
    emit({"case": "kernel prices", **{f"{n}_ns_per_ws": round(v * 1e9, 3) for n, v in prices.items()}})
    settings = Settings(ip={"mu": 0.0, "eta": 0.01, "batch_size": min(100, sz["windows"]), "normalize_step": True},
                        device=device, continual={"joint_max_rounds": args.joint_max_rounds})
    rows = []
    for mid in args.methods:
        cfgs = []
        for i in range(k):
            cfg = {"units": units, "spectral_radius": 0.9, "leak": 0.3, "input_scaling": 1.0, "sigma": 0.2 + 0.02 * i}
            if not mid.endswith("joint"):
                cfg["budget"] = 1
            if mid.startswith("fedclip"):
                cfg["local_epochs"] = 1
            cfgs.append(cfg)
        work: dict = {}
        t0 = time.perf_counter()
        fit_continual_batch(mid, cfgs, list(range(k)), data, settings, work=work)
        sync(dev)
        sec = time.perf_counter() - t0
        ws = work["window_steps"]
        projected = sum(ws[n] * prices[n] for n in ws)
        rec = {"case": mid, "trials": k, "units": units, "seconds": round(sec, 3), "ticks": work["ticks"],
               **{f"{n}_window_steps": v for n, v in ws.items()},
               "M_ws_per_s": round(sum(ws.values()) / sec / 1e6, 3), "projected_seconds": round(projected, 6),
               "measured_over_projected": round(sec / projected, 3) if projected else None}
        emit(rec)
        rows.append(rec)
    print(f"\n| method ({k} trials, {units} units, {device}) | seconds | ticks | IP / stats / counts M window-steps "
          f"| M ws/s | projected s | measured ÷ projected |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['case']} | {r['seconds']} | {r['ticks']} | {r['ip_window_steps'] / 1e6:.1f} / "
              f"{r['stats_window_steps'] / 1e6:.1f} / {r['counts_window_steps'] / 1e6:.1f} | {r['M_ws_per_s']} | "
              f"{r['projected_seconds']} | {r['measured_over_projected']} |")
    if out:
        out.close()


if __name__ == "__main__":
    main()
