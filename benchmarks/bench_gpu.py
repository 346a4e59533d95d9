"""The accelerator path on one GPU: throughput of this project's torch kernels against bare torch
on the same shapes, the CPU run_batch on the same machine, and the paper budget in GPU-hours.

    PYTHONPATH=. python3 benchmarks/bench_gpu.py --out gpu.jsonl     # on the GPU (< 4 min)
    PYTHONPATH=. python3 benchmarks/bench_gpu.py --slice 32 --out s.jsonl  # + a paper-scale slice
    .venv/bin/python benchmarks/bench_gpu.py --smoke                 # tiny, on the CPU (tests)

``--ip-fused`` adds the IP epoch case once more with the IP sums fused into one torch.compile'd
kernel per chunk (runner.fused_ip_sums on for that case only; its compile falls in the
warm-up run, which is not timed), and once without CUDA graphs (accel.ip_rounds.GRAPHS off): the
whole 32-trial epoch three ways in one run. A compile that fails is that case's ``error``
(FusedSumsError naming the cause), the other cases still run.

``--ip-variants R`` instead times only the 32-trial IP epoch four ways (eager, CUDA graphs, fused
sums, both), interleaved for R rounds after one untimed round: per variant each round's time
and the median (ip_epoch_variants).

``--slice K`` instead measures one paper-scale slice end to end: K FedIP selection trials of
WESAD 25 % (3 training clients, 3 validation users, 2,990 windows of 700 × 8 each, random data)
with configs drawn from params.yaml's paper space, through fit_batch as the trial runner batches
them (by reservoir size), and compares its time with the cost-table projection of the same work
(~6 min for K = 32 on an H200 if the FedIP epochs run at ~50 M window-steps/s).

Prints one JSON line per case (window-steps/s, the bare torch bmm recurrence of the same shapes
in the same run, their ratio, peak device memory), then markdown tables: the cases, the cost per
trial-window-step of the three kernels a trial is made of (ridge statistics, evaluation of 7 λ,
an IP mini-batch step) batched over ``--trials`` trials at every reservoir size of the paper
search space, and benchmarks/bench_paper_budget.project() applied to those costs. A case that
runs out of memory is reported as such and the others go on. Needs numpy, scipy and torch only
(threadpoolctl too for the CPU baseline case).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Callable

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench_paper_budget as budget  # noqa: E402
from gpu_scale import SMOKE, Scale  # noqa: E402
from esnfed_core.accel import torch_plasticity as tp  # noqa: E402
from esnfed_core.accel.ip_rounds import RoundPlan, run_round  # noqa: E402
from esnfed_core.accel import torch_reservoir as tr  # noqa: E402
from esnfed_core.reservoir import ReservoirConfig, build_reservoir  # noqa: E402

LEAK = 0.3




def precision_state() -> dict:
    """What float32 products run as, read (not assumed): torch's TF32 flags (matmul off and cuDNN
    on by default) and the environment variables that override them (NVIDIA_TF32_OVERRIDE=0
    turns TF32 off in the libraries whatever the flags say; TORCH_ALLOW_TF32_CUBLAS_OVERRIDE=1
    turns it on for matmul)."""
    return {"tf32_matmul": bool(torch.backends.cuda.matmul.allow_tf32),
            "tf32_cudnn": bool(torch.backends.cudnn.allow_tf32),
            "float32_matmul_precision": torch.get_float32_matmul_precision(),
            "tf32_env": {k: os.environ[k] for k in ("NVIDIA_TF32_OVERRIDE", "TORCH_ALLOW_TF32_CUBLAS_OVERRIDE")
                         if k in os.environ}}


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize()


def best_time(fn: Callable[[], object], dev: torch.device, reps: int) -> float:
    """Best wall time of ``reps`` runs after one warm-up run."""
    fn()
    sync(dev)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        sync(dev)
        best = min(best, time.perf_counter() - t0)
    return best


def bank(r: int, n: int, u: int, dev: torch.device, ip: bool = False) -> tr.Bank:
    res = [build_reservoir(ReservoirConfig(u, n, 0.9, LEAK, 1.0), i) for i in range(min(r, 4))]
    if ip:  # IP-adapted gains and biases: the addcmul path
        rng = np.random.default_rng(0)
        res = [x.with_ip(rng.uniform(0.8, 1.2, n), rng.uniform(-0.1, 0.1, n)) for x in res]
    return tr.Bank.from_reservoirs([res[i % len(res)] for i in range(r)], dev)


def bare(bk: tr.Bank, u: torch.Tensor, stats: bool) -> torch.Tensor:
    """The plain-torch anchor (shared/bench/gpu_reservoir.py): baddbmm + tanh + leak per step,
    optionally S S^T per step; input u (T, B, U) shared by the reservoirs."""
    r, n = bk.reservoirs, bk.units
    x = torch.zeros((r, u.shape[1], n), device=u.device)
    acc = torch.zeros((r, n, n), device=u.device) if stats else None
    for t in range(u.shape[0]):
        net = torch.baddbmm(torch.matmul(u[t], bk.w_in_t), x, bk.w_t)
        x = x.mul_(1 - LEAK).add_(torch.tanh_(net), alpha=LEAK)
        if stats:
            acc.baddbmm_(x.transpose(1, 2), x)
    return x


def emit(rec: dict, out) -> dict:
    line = json.dumps(rec)
    print(line, flush=True)
    if out is not None:
        out.write(line + "\n")
        out.flush()
    return rec


def guarded(name: str, fn: Callable[[], dict], dev: torch.device, out) -> dict:
    """Run one case; out-of-memory (or any error) becomes a reported result, not a crash."""
    if dev.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    try:
        rec = {"case": name, **fn()}
    except Exception as exc:  # noqa: BLE001 - reported per case, the others still run
        oom = isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc)
        rec = {"case": name, "error": ("OOM: " if oom else "") + f"{type(exc).__name__}: {str(exc)[:300]}"}
    if dev.type == "cuda":
        rec["peak_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
        torch.cuda.empty_cache()
    return emit(rec, out)


def throughput(project: Callable[[], object], anchor: Callable[[], object] | None, ws: int,
               dev: torch.device, reps: int) -> dict:
    sec = best_time(project, dev, reps)
    rec = {"window_steps": ws, "seconds": round(sec, 5), "M_ws_per_s": round(ws / sec / 1e6, 3)}
    if anchor is not None:
        bsec = best_time(anchor, dev, reps)
        rec.update(bare_seconds=round(bsec, 5), bare_M_ws_per_s=round(ws / bsec / 1e6, 3),
                   project_over_bare=round(bsec / sec, 3))
    return rec


def cases(sc: Scale, dev: torch.device, out, tf32: bool, ip_fused: bool = False) -> list[dict]:
    t, n, u_in = sc.steps, sc.units, sc.inputs
    gen = torch.Generator(device="cpu").manual_seed(0)
    rand = lambda *shape: torch.randn(*shape, generator=gen).to(dev)  # noqa: E731
    results = []

    def state_pass(windows: int, units: int, r: int, use_tf32: bool) -> dict:
        with tr.tf32(use_tf32):
            bk = bank(r, units, u_in, dev)
            u = rand(1, windows, t, u_in)
            ut = u[0].transpose(0, 1).contiguous()
            project = lambda: [None for _ in tr.iter_chunks(bk, u)]  # noqa: E731
            rec = throughput(project, lambda: bare(bk, ut, False), r * windows * t, dev, sc.reps)
        return {"reservoirs": r, "windows": windows, "units": units, "steps": t, "tf32": use_tf32, **rec}

    def ip_minibatch(r: int) -> dict:
        bk = bank(r, n, u_in, dev, ip=True)
        u = rand(r, sc.ip_windows, t, u_in)
        ut = u[0].transpose(0, 1).contiguous()
        nw = torch.full((r,), float(sc.ip_windows), dtype=torch.float64, device=dev)
        sig = torch.full((r,), 0.5, dtype=torch.float64, device=dev)
        project = lambda: tp.ip_step(bk, u, None, nw, sig, mu=0.0, eta=0.01, normalize_step=True)  # noqa: E731
        rec = throughput(project, lambda: bare(bk, ut, False), r * sc.ip_windows * t, dev, sc.reps)
        return {"reservoirs": r, "windows": sc.ip_windows, "units": n, "steps": t, "kernel": "ip_step", **rec}

    def trials_stats() -> dict:
        r, b = sc.trials, sc.trial_windows
        bk = bank(r, n, u_in, dev)
        u = rand(1, b, t, u_in)
        ut = u[0].transpose(0, 1).contiguous()
        y = torch.randint(0, 4, (1, b, t), generator=gen).to(torch.int8).to(dev)
        project = lambda: tr.ridge_stats(bk, u, y, 4)  # noqa: E731
        rec = throughput(project, lambda: bare(bk, ut, True), r * b * t, dev, sc.reps)
        return {"reservoirs": r, "windows": b, "units": n, "steps": t, "kernel": "ridge_stats", **rec}

    results.append(guarded("state pass, 1 reservoir", lambda: state_pass(sc.state_windows, n, 1, False), dev, out))
    if tf32 and dev.type == "cuda":
        results.append(guarded("state pass, 1 reservoir, TF32",
                               lambda: state_pass(sc.state_windows, n, 1, True), dev, out))
    # What TF32 does to states and readouts, always (a few seconds: 256 windows); on the CPU the
    # flag changes nothing, and the case then checks that the code runs.
    guarded("TF32 accuracy", lambda: tf32_accuracy(sc, dev), dev, out)
    results.append(guarded("IP mini-batch, 1 reservoir", lambda: ip_minibatch(1), dev, out))
    results.append(guarded(f"IP mini-batches, {sc.trials} reservoirs", lambda: ip_minibatch(sc.trials), dev, out))
    results.append(guarded(f"{sc.trials} reservoirs, states", lambda: state_pass(sc.trial_windows, n, sc.trials, False),
                           dev, out))
    results.append(guarded(f"{sc.trials} reservoirs + ridge statistics", trials_stats, dev, out))
    results.append(guarded(f"{sc.trials} reservoirs, {sc.small_units} units",
                           lambda: state_pass(sc.trial_windows, sc.small_units, sc.trials, False), dev, out))
    for algo in ("ip", "fedip"):
        results.append(guarded(f"{algo.upper() if algo == 'ip' else 'FedIP'} epoch, {sc.epoch_trials} trials",
                               lambda algo=algo: ip_epoch(sc, algo, dev), dev, out))
    if ip_fused:  # the epoch short of its 40 M goal, with the fused IP sums
        results.append(guarded(f"IP epoch, {sc.epoch_trials} trials, fused IP sums",
                               lambda: ip_epoch(sc, "ip", dev, fused=True), dev, out))
        results.append(guarded(f"IP epoch, {sc.epoch_trials} trials, no CUDA graphs",
                               lambda: ip_epoch(sc, "ip", dev, graphs=False), dev, out))
    results.append(guarded("CPU run_batch, 1 reservoir (all cores)", lambda: cpu_baseline(sc, n), dev, out))
    results.append(guarded(f"CPU run_batch, 1 reservoir, {sc.small_units} units",
                           lambda: cpu_baseline(sc, sc.small_units), dev, out))
    return results


def tf32_accuracy(sc: Scale, dev: torch.device) -> dict:
    """What TF32 products change: states after all steps and ridge readouts (λ = 1e-5, 1e-3, 1)
    of one reservoir on 256 windows, TF32 against float32 (both on the device)."""
    from esnfed_core.readout import RidgeStats, solve  # noqa: PLC0415

    bk = bank(1, sc.units, sc.inputs, dev)
    b = min(256, sc.state_windows)
    u = torch.randn(1, b, sc.steps, sc.inputs, generator=torch.Generator().manual_seed(5)).to(dev)
    y = torch.randint(0, 4, (1, b, sc.steps), generator=torch.Generator().manual_seed(6)).to(torch.int8).to(dev)
    out = {}
    for flag in (False, True):
        with tr.tf32(flag):
            last = [c.states[:, -1].clone() for c in tr.iter_chunks(bk, u)][-1]
            a, g = tr.ridge_stats(bk, u, y, 4)
        st = RidgeStats(a[0].cpu().numpy(), g[0].cpu().numpy(), b * sc.steps, b)
        out[flag] = (last.cpu().numpy(), solve(st, [1e-5, 1e-3, 1.0]))
    (s32, w32), (s19, w19) = out[False], out[True]
    rel = [float(np.linalg.norm(p - q) / np.linalg.norm(q)) for p, q in zip(w19, w32)]
    return {"units": sc.units, "windows": b, "steps": sc.steps, "state_max_abs_diff": float(np.abs(s19 - s32).max()),
            "readout_rel_diff_lambda_1e-5_1e-3_1": [round(r, 8) for r in rel]}


def _ip_epoch_run(sc: Scale, algo: str, dev: torch.device, fused: bool, graphs: bool | None
                  ) -> tuple[Callable[[], dict], int]:
    """(run, window-steps) of one IP epoch (pooled windows) or one FedIP round of one local epoch
    (``epoch_clients`` clients) for ``epoch_trials`` trials at once, through the trial batcher's
    IP driver: runner.fused_ip_sums = ``fused``; accel.ip_rounds.GRAPHS = ``graphs`` during the
    run (None: as it is, on by default). ``run`` returns ip_rounds.COUNTS' change: what ran
    captured, replayed or eager."""
    from esnfed_core.accel import ip_rounds  # noqa: PLC0415
    from esnfed_core.accel.passes import DeviceWindows  # noqa: PLC0415
    from esnfed_core.accel.trials import _train_ip  # noqa: PLC0415
    from esnfed_core.messages import CommLedger  # noqa: PLC0415
    from esnfed_core.method import Method  # noqa: PLC0415
    from esnfed_core.settings import Settings  # noqa: PLC0415
    from esnfed_core.trial import sub_seeds  # noqa: PLC0415

    k, c, w, t = sc.epoch_trials, sc.epoch_clients, sc.client_windows, sc.steps
    rng = np.random.default_rng(1)
    x = torch.from_numpy(rng.standard_normal((c * w, t, sc.inputs), dtype=np.float32)).to(dev)
    data = DeviceWindows(x, torch.zeros((c * w, t), dtype=torch.int8, device=dev), [i * w for i in range(c)], [w] * c)
    cfgs = [{"units": sc.units, "sigma": 0.2 + 0.02 * i, "rounds": 1, "local_epochs": 1} for i in range(k)]
    subs = [sub_seeds(i) for i in range(k)]
    res = [build_reservoir(ReservoirConfig(sc.inputs, sc.units, 0.9, LEAK, 1.0), i) for i in range(k)]
    settings = Settings(ip={"mu": 0.0, "eta": 0.01, "batch_size": 100, "normalize_step": True},
                        device="cuda" if dev.type == "cuda" else "torch-cpu", fused_ip_sums=fused)
    names = [f"c{i}" for i in range(c)]
    m = Method(algo)

    def run() -> dict:
        ledgers = [CommLedger() if m.federated else None for _ in range(k)]
        saved, before = ip_rounds.GRAPHS, dict(ip_rounds.COUNTS)
        ip_rounds.GRAPHS = saved if graphs is None else graphs
        try:
            _train_ip(m, cfgs, subs, res, data, names, settings, ledgers, str(dev))
        finally:
            ip_rounds.GRAPHS = saved
        return {key: ip_rounds.COUNTS[key] - before[key] for key in before}

    return run, k * c * w * t


def ip_epoch(sc: Scale, algo: str, dev: torch.device, fused: bool = False, graphs: bool | None = None) -> dict:
    """The best of one timed epoch after a warm-up (see _ip_epoch_run)."""
    run, ws = _ip_epoch_run(sc, algo, dev, fused, graphs)
    steps: dict = {}
    sec = best_time(lambda: steps.update(run()), dev, 1)
    return {"trials": sc.epoch_trials, "clients": sc.epoch_clients if algo == "fedip" else 1,
            "windows": sc.epoch_clients * sc.client_windows, "units": sc.units, "steps": sc.steps,
            "window_steps": ws, "seconds": round(sec, 4), "M_ws_per_s": round(ws / sec / 1e6, 3),
            "fused_ip_sums": fused, "graph_counts": steps}


# The IP epoch's variants: (runner.fused_ip_sums, accel.ip_rounds.GRAPHS).
IP_VARIANTS = {"eager": (False, False), "CUDA graphs": (False, True), "fused sums": (True, False),
               "fused sums + CUDA graphs": (True, True)}


def ip_epoch_variants(sc: Scale, dev: torch.device, out, rounds: int) -> list[dict]:
    """The IP epoch of ``epoch_trials`` trials each way of IP_VARIANTS, interleaved so that the
    host's drift (the launch-bound part follows its load) falls on all alike: every variant run
    once untimed (the fused sums' compile, cuBLAS handles), then ``rounds`` rounds of one timed
    epoch per variant in turn. One record per variant: each round's seconds, the median, and the
    graph counts of its last run (captured/replayed/eager segments' steps)."""
    runs = {name: _ip_epoch_run(sc, "ip", dev, fused, graphs) for name, (fused, graphs) in IP_VARIANTS.items()}
    times: dict[str, list[float]] = {name: [] for name in runs}
    counts: dict[str, dict] = {}
    errors: dict[str, str] = {}
    for rnd in range(rounds + 1):
        for name, (run, _) in runs.items():
            if name in errors:
                continue
            try:
                t0 = time.perf_counter()
                counts[name] = run()
                sync(dev)
                if rnd:  # round 0 is the warm-up
                    times[name].append(time.perf_counter() - t0)
            except Exception as exc:  # noqa: BLE001 - one variant failing (no Triton) leaves the others
                errors[name] = f"{type(exc).__name__}: {str(exc)[:300]}"
    out_recs = []
    for name, (run, ws) in runs.items():
        rec = {"case": f"IP epoch, {sc.epoch_trials} trials, {name}", "variant": name, "window_steps": ws}
        if name in errors:
            rec["error"] = errors[name]
        else:
            med = float(np.median(times[name]))
            rec.update(seconds=[round(x, 4) for x in times[name]], median_seconds=round(med, 4),
                       M_ws_per_s=round(ws / med / 1e6, 3),
                       M_ws_per_s_each=[round(ws / x / 1e6, 3) for x in times[name]], graph_counts=counts[name])
        out_recs.append(emit(rec, out))
    return out_recs


def cpu_baseline(sc: Scale, units: int) -> dict:
    """The project's numpy run_batch with every core (its own thread split), same steps."""
    from esnfed_core.reservoir import run_batch  # noqa: PLC0415

    res = build_reservoir(ReservoirConfig(sc.inputs, units, 0.9, LEAK, 1.0), 0)
    x = np.random.default_rng(2).standard_normal((sc.cpu_windows, sc.steps, sc.inputs), dtype=np.float32)
    out = np.empty((sc.steps, sc.cpu_windows, units), np.float32)
    sec = best_time(lambda: run_batch(res, x, out=out), torch.device("cpu"), sc.reps)
    ws = sc.cpu_windows * sc.steps
    return {"reservoirs": 1, "windows": sc.cpu_windows, "units": units, "steps": sc.steps, "window_steps": ws,
            "seconds": round(sec, 4), "M_ws_per_s": round(ws / sec / 1e6, 3), "device": "cpu (numpy)"}


# Steps of the IP segment kernel_costs times: one capture (with its eager warm-up step) and 7
# replays on cuda, as a short segment of the pipeline's (an epoch's segments run 30-360 steps).
IP_COST_STEPS = 8


def kernel_costs(sc: Scale, dev: torch.device, out, datasets: tuple[str, ...] = tuple(budget.DATA),
                 units: tuple[int, ...] | None = None) -> dict[str, dict[int, dict[str, float]]]:
    """Seconds per trial-window-step of stats, eval (7 λ) and an IP step, batched over
    ``cost_trials`` trials, at every (dataset, units) of bench_paper_budget.DATA (only the sizes
    ``units`` when given). The IP step is priced within a segment of IP_COST_STEPS steps run as
    the trial batcher runs them (accel.ip_rounds: CUDA graphs on cuda); until 2026-11-28 it was
    one eager ``ip_step`` (the BENCHMARKS.md tables up to the fourth GPU measurement)."""
    costs: dict[str, dict[int, dict[str, float]]] = {}
    for ds, d in budget.DATA.items():
        if ds not in datasets:
            continue
        t, u_in, ncls = (sc.steps, sc.inputs, 4) if sc is SMOKE else (d["steps"], d["inputs"], d["classes"])
        costs[ds] = {}
        for n in d["units"]:
            if units is not None and n not in units:
                continue
            def run(n=n) -> dict:
                r, b = sc.cost_trials, sc.cost_windows
                n_run = max(4, n // 25) if sc is SMOKE else n  # smoke: the same code on tiny banks
                bk = bank(r, n_run, u_in, dev, ip=True)
                u = torch.randn(1, b, t, u_in).to(dev)
                y = torch.randint(0, ncls, (1, b, t)).to(torch.int8).to(dev)
                grid = torch.randn(r, len(budget.LAMBDAS), ncls, n_run, dtype=torch.float64).to(dev)
                sig = torch.full((r,), 0.5, dtype=torch.float64, device=dev)
                ws, ws_ip = r * b * t, r * sc.ip_windows * t * IP_COST_STEPS
                # The IP price as the trial batcher pays it (accel.ip_rounds: on cuda a segment of
                # full steps replayed as a CUDA graph), per step of a segment of IP_COST_STEPS.
                x_ip = torch.randn(sc.ip_windows, t, u_in).to(dev)
                plan = RoundPlan.of([[np.arange(sc.ip_windows)] * IP_COST_STEPS] * r, sc.ip_windows, dev)

                def ip_segment() -> None:
                    g, b_ip = bk.gain.clone(), bk.bias.clone()
                    run_round(bk, list(range(r)), sig, x_ip, plan, g, b_ip, mu=0.0, eta=0.01, normalize_step=True)

                c = {
                    "stats": best_time(lambda: tr.ridge_stats(bk, u, y, ncls), dev, sc.reps) / ws,
                    "eval": best_time(lambda: tr.count_correct(bk, u, y, grid), dev, sc.reps) / ws,
                    "ip_epoch": best_time(ip_segment, dev, sc.reps) / ws_ip,
                }
                costs[ds][n] = c
                return {"dataset": ds, "units": n, "steps": t, "trials": r,
                        **{f"{k}_ns_per_ws": round(v * 1e9, 3) for k, v in c.items()}}

            rec = guarded(f"cost {ds} {n} units", run, dev, out)
            if "error" in rec:
                costs[ds].pop(n, None)
    return costs


# A slice batch measured 1.02 (15 trials), 1.48 (8 trials) and 1.78 (9 trials, 300 units, on the
# cheaper IP kernel of 2026-11-27) × its projection (BENCHMARKS.md): the fewer trials, the less
# the GPU is filled. With a deadline, a batch whose projection × this margin does not fit is not
# started. 1.4 let the 300-unit batch start with 185 s for its 226 s, and the timeout cut it off.
SLICE_MARGIN = 1.9


def paper_slice(k: int, sc: Scale, dev: torch.device, out, costs: dict[int, dict[str, float]],
                units_only: int | None = None, deadline: float | None = None) -> dict:
    """K FedIP trials of WESAD 25 % at paper settings, end to end (module docstring), and the
    same work projected from the per-trial-window-step ``costs`` of WESAD's sizes. With
    ``units_only``, only the trials of that reservoir size among the K run (one batch). With
    ``deadline`` (a time.perf_counter() value), the run is skipped, and says so, when its
    projection × SLICE_MARGIN would end after it: a run cut off by a timeout measures nothing."""
    import yaml  # noqa: PLC0415

    from esnfed_core.accel.trials import fit_batch  # noqa: PLC0415
    from esnfed_core.data.processed import UserData  # noqa: PLC0415
    from esnfed_core.search import parse_space, sample_config  # noqa: PLC0415
    from esnfed_core.settings import Settings  # noqa: PLC0415
    from esnfed_core.trial import TrialData  # noqa: PLC0415

    params = yaml.safe_load((Path(__file__).resolve().parents[1] / "params.yaml").read_text())
    space = params["budgets"]["paper"]["space"]
    dims = sorted(parse_space(space["wesad"]) + parse_space(space["fedip"]), key=lambda d: d.name)
    d = budget.DATA["wesad"]
    w, t = (sc.client_windows, sc.steps) if sc is SMOKE else (d["windows_per_user"], d["steps"])
    rng = np.random.default_rng(3)

    def user() -> UserData:
        return UserData(rng.standard_normal((w, t, d["inputs"]), dtype=np.float32),
                        rng.integers(0, d["classes"], (w, t)).astype(np.int8), np.zeros(w, np.int8))

    data = TrialData({f"t{i}": user() for i in range(3)}, {f"v{i}": user() for i in range(3)}, d["classes"], 5)
    settings = Settings(ip={k_: params["plasticity"][k_] for k_ in ("mu", "eta", "batch_size", "normalize_step")},
                        lambdas=tuple(params["readout"]["lambdas"]),
                        device="cuda" if dev.type == "cuda" else "torch-cpu")
    configs = [sample_config(dims, 0, "wesad", "25", i) for i in range(k)]
    if sc is SMOKE:
        configs = [{**c, "units": 8, "rounds": 1, "local_epochs": 1} for c in configs]
    groups: dict[int, list[int]] = {}
    for i, c in enumerate(configs):
        groups.setdefault(int(c["units"]), []).append(i)
    if units_only is not None:  # the same trials (indices, seeds) as in the whole slice
        groups = {units_only: groups.get(units_only, [])}
    chosen = [configs[i] for idx in groups.values() for i in idx]
    epochs = sum(int(c["rounds"]) * int(c["local_epochs"]) for c in chosen)
    ws = epochs * 3 * w * t
    projected = 0.0
    for c in chosen:  # the kernels' share of one trial: IP epochs, statistics, validation
        cost = costs.get(int(c["units"]) if sc is not SMOKE else min(costs), None) if costs else None
        if cost is None:
            projected = float("nan")
            break
        e = int(c["rounds"]) * int(c["local_epochs"])
        projected += 3 * w * t * (e * cost["ip_epoch"] + cost["stats"] + cost["eval"])
    # Before the run: a run cut off by a timeout still tells its projection (and so a lower bound
    # on measured ÷ projected: the seconds it was given).
    emit({"case": "slice plan", "trials": len(chosen), "groups": {str(u): len(idx) for u, idx in sorted(groups.items())},
          "ip_epochs": epochs, "ip_window_steps": ws, "projected_seconds": round(projected, 2)}, out)
    if deadline is not None and not projected * SLICE_MARGIN <= deadline - time.perf_counter():
        return {"skipped": f"projected {projected:.0f} s × {SLICE_MARGIN} does not fit the "
                           f"{max(0.0, deadline - time.perf_counter()):.0f} s left (--time-limit)",
                "trials": len(chosen), "projected_seconds": round(projected, 2)}
    start = time.perf_counter()
    for units, idx in sorted(groups.items()):
        t0 = time.perf_counter()
        fit_batch("fedip", [configs[i] for i in idx], list(idx), data, settings)
        sync(dev)
        emit({"case": f"slice group {units} units", "trials": len(idx), "seconds": round(time.perf_counter() - t0, 2)}, out)
    sec = time.perf_counter() - start
    configs = chosen
    return {"trials": len(configs), "seconds": round(sec, 2), "projected_seconds": round(projected, 2),
            "measured_over_projected": round(sec / projected, 3) if projected == projected else None,
            "ip_epochs": epochs, "ip_window_steps": ws, "M_ws_per_s_ip_part": round(ws / sec / 1e6, 3),
            "gpu_hours_per_100_trials": round(sec / len(configs) * 100 / 3600, 3)}


def tables(results: list[dict], costs: dict, dev_name: str) -> str:
    lines = [f"\n### Cases ({dev_name}; window-steps/s, best of repeats after a warm-up)\n",
             "| case | project | bare torch | project ÷ bare | peak GiB |", "|---|---|---|---|---|"]
    for r in results:
        if "error" in r:
            lines.append(f"| {r['case']} | {r['error']} | | | |")
            continue
        bare_ = f"{r['bare_M_ws_per_s']:.1f} M" if "bare_M_ws_per_s" in r else "—"
        ratio = f"{r['project_over_bare']:.2f}" if "project_over_bare" in r else "—"
        lines.append(f"| {r['case']} | {r['M_ws_per_s']:.2f} M | {bare_} | {ratio} | {r.get('peak_gib', '—')} |")
    lines += ["\n### ns per trial-window-step, batched over trials\n",
              "| dataset | units | stats | eval (7 λ) | IP step |", "|---|---|---|---|---|"]
    total = 0.0
    proj_lines = ["\n### Paper budget projected (bench_paper_budget.project on these costs)\n",
                  "| dataset | GPU hours | heaviest methods |", "|---|---|---|"]
    import yaml  # noqa: PLC0415

    paper = budget.budget_settings(yaml.safe_load(budget.PARAMS.read_text()), "paper")
    for ds, cost in costs.items():
        for n, c in cost.items():
            lines.append(f"| {ds} | {n} | {c['stats'] * 1e9:.2f} | {c['eval'] * 1e9:.2f} | {c['ip_epoch'] * 1e9:.2f} |")
        if set(cost) != set(budget.DATA[ds]["units"]):
            proj_lines.append(f"| {ds} | (missing sizes: no projection) | |")
            continue
        proj = budget.project(ds, cost, paper)
        sub = sum(proj.values()) / 3600
        total += sub
        top = ", ".join(f"{m} {s / 3600:.2f}" for m, s in sorted(proj.items(), key=lambda kv: -kv[1])[:3])
        proj_lines.append(f"| {ds} | {sub:.2f} | {top} |")
    proj_lines.append(f"| **all** | **{total:.2f}** | |")
    return "\n".join(lines + proj_lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, help="also write the JSON lines to this file")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes on the CPU (a test that it runs)")
    ap.add_argument("--device", default=None, help="torch device (default: cuda if available, else cpu)")
    ap.add_argument("--no-tf32", action="store_true", help="skip the TF32 state-pass throughput case (the TF32 accuracy case still runs)")
    ap.add_argument("--ip-fused", action="store_true",
                    help="also run the IP epoch case with the IP sums fused by torch.compile (FUSED_SUMS on)")
    ap.add_argument("--ip-variants", type=int, metavar="R",
                    help="instead: the IP epoch eager / CUDA graphs / fused / both, R interleaved timed rounds")
    ap.add_argument("--slice", type=int, metavar="K", help="instead: K paper-scale FedIP trials end to end")
    ap.add_argument("--slice-units", type=int, metavar="N", help="with --slice: only the trials of N units")
    ap.add_argument("--time-limit", type=float, metavar="S",
                    help="with --slice: skip the run (after the cost table) unless its projection × "
                         f"{SLICE_MARGIN} fits in S seconds from the start of this script")
    args = ap.parse_args()
    deadline = None if args.time_limit is None else time.perf_counter() + args.time_limit
    sc = SMOKE if args.smoke else Scale()
    if args.smoke:  # one thread: OpenMP threads spinning on a busy shared CPU cost 100x here
        torch.set_num_threads(1)
    dev = torch.device(args.device or ("cuda" if torch.cuda.is_available() and not args.smoke else "cpu"))
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else platform.processor() or "cpu"
    out = open(args.out, "w") if args.out else None
    start = time.perf_counter()
    emit({"torch": torch.__version__, "cuda": torch.version.cuda, "device": str(dev), "device_name": name,
          "numpy": np.__version__, "python": platform.python_version(), "scale": dataclasses.asdict(sc),
          **precision_state()}, out)
    if args.ip_variants:
        ip_epoch_variants(sc, dev, out, args.ip_variants)
        emit({"total_seconds": round(time.perf_counter() - start, 1)}, out)
        return
    if args.slice:
        # With --slice-units only that size's costs are needed (the projection of its batch).
        sizes = (args.slice_units,) if args.slice_units and sc is not SMOKE else None
        costs = kernel_costs(sc, dev, out, datasets=("wesad",), units=sizes)
        guarded(f"paper slice: WESAD 25 % FedIP, {args.slice} trials",
                lambda: paper_slice(args.slice, sc, dev, out, costs.get("wesad", {}), args.slice_units, deadline),
                dev, out)
        emit({"total_seconds": round(time.perf_counter() - start, 1)}, out)
        return
    results = cases(sc, dev, out, tf32=not args.no_tf32, ip_fused=args.ip_fused)
    costs = kernel_costs(sc, dev, out)
    emit({"total_seconds": round(time.perf_counter() - start, 1)}, out)
    print(tables(results, costs, name))
    if out is not None:
        out.close()


if __name__ == "__main__":
    main()
