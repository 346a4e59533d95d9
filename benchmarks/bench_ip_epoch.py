"""The IP mini-batch step of the torch path against the bare GEMM of the same shapes, same run.

    .venv/bin/python benchmarks/bench_ip_epoch.py [--device torch-cpu] [--reservoirs 4]
        [--windows 100] [--steps 100] [--units 400 100] [--repeats 5] [--threads 1] [--mu 0 0.1]
        [--chunk-elements 33554432 4194304] [--cuda-graph] [--fused-sums]

For each size: ``ip`` = one esnfed_core.accel.torch_plasticity.ip_step of R IP-adapted reservoirs
× B windows × T steps (what every step of a batched IP/FedIP epoch runs), ``gemm`` = the T batched
products (R, B, N) @ (R, N, N) alone (the floor), ``recurrence`` = the bare torch recurrence
(baddbmm, tanh, leak per step: benchmarks/bench_gpu.bare). Medians of ``--repeats`` runs after one
warm-up, in CPU time on torch-cpu (robust on a shared machine; = wall time with one thread) and
wall time on cuda. Prints one JSON line per size and a markdown table of the ratios.

``--chunk-elements`` also times ``ip`` with each given chunk-buffer size (floats per buffer:
torch_reservoir.CHUNK_ELEMENTS on cuda, CPU_CHUNK_ELEMENTS on the CPU; the default's time is
``ip_s``): whether a chunk that fits the GPU's L2 (50 MB on an H100/H200: 3 buffers of 2^22
floats) makes the IP sums' elementwise passes cheaper than the default 2^25, at the cost of more
launches per step. The kernels' results do not depend on it beyond float32 summation order.
With ``--fused-sums`` too, each size also times the fused step (``ip_fused_s_by_chunk_elements``).

``--cuda-graph`` (cuda only) also times the same IP step captured once as a CUDA graph and
replayed (``ip_graph_s``): what the per-kernel launch gaps cost (three kernels a time step,
plus the sums per chunk). A measurement aid, not a code path of the pipeline; it has not run on a
GPU yet, so a capture that fails is recorded (``ip_graph_error``), not raised.

``--fused-sums`` also times the IP step with the IP sums fused into one compiled kernel
(``ip_fused_s``: torch_plasticity.ip_step(..., fused=True), torch.compile/inductor; Triton on
cuda, C++ on the CPU), with its ratios to the GEMM and to the eager step. The first call of the
size, which compiles (or loads inductor's on-disk cache) and runs one step, is timed apart
(``ip_fused_first_call_s``, wall time) and left out of ``ip_fused_s``. A compile that fails is
recorded (``ip_fused_error``), not raised. What result would turn the fused sums on:
BENCHMARKS.md, "Fused IP sums".
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_gpu import bank, bare  # noqa: E402
from esnfed_core.accel import torch_device  # noqa: E402
from esnfed_core.accel import torch_plasticity as tp  # noqa: E402
from esnfed_core.accel import torch_reservoir as tr  # noqa: E402


def _timed(fn, dev: torch.device, repeats: int) -> float:
    clock = time.perf_counter if dev.type == "cuda" else time.process_time
    fn()
    times = []
    for _ in range(repeats):
        if dev.type == "cuda":
            torch.cuda.synchronize()
        t0 = clock()
        fn()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        times.append(clock() - t0)
    return statistics.median(times)


def graph_replay(fn) -> "torch.cuda.CUDAGraph":
    """``fn`` captured as a CUDA graph (warmed up on a side stream first, as torch's docs ask)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph


def measure(dev: torch.device, r: int, b: int, t: int, n: int, mu: float, repeats: int,
            chunk_elements: tuple[int, ...] = (), cuda_graph: bool = False, fused_sums: bool = False) -> dict:
    bk = bank(r, n, 8, dev, ip=True)
    g = torch.Generator(device="cpu").manual_seed(0)
    u = torch.randn((r, b, t, 8), generator=g).to(dev)
    n_win = torch.full((r,), float(b), dtype=torch.float64, device=dev)
    sigma = torch.linspace(0.2, 0.8, r, dtype=torch.float64, device=dev)
    x = torch.randn((r, b, n), generator=g).to(dev)
    y = torch.empty_like(x)

    def ip(fused: bool = False):
        tp.ip_step(bk, u, None, n_win, sigma, mu=mu, eta=0.01, normalize_step=True, fused=fused)

    def gemm():
        for _ in range(t):
            torch.bmm(x, bk.w_t, out=y)

    ut = u[0].transpose(0, 1).contiguous()  # (T, B, U): bare() shares the windows

    def rec():
        bare(bk, ut, False)

    out = {"device": str(dev), "reservoirs": r, "windows": b, "steps": t, "units": n, "mu": mu,
           "threads": torch.get_num_threads(), "torch": torch.__version__}
    for name, fn in (("ip", ip), ("gemm", gemm), ("recurrence", rec)):
        out[f"{name}_s"] = _timed(fn, dev, repeats)
    if fused_sums:
        try:
            t0 = time.perf_counter()
            ip(True)
            if dev.type == "cuda":
                torch.cuda.synchronize()
            out["ip_fused_first_call_s"] = time.perf_counter() - t0
            out["ip_fused_s"] = _timed(lambda: ip(True), dev, repeats)
            out["ip_fused_over_gemm"] = out["ip_fused_s"] / out["gemm_s"]
            out["ip_fused_over_ip"] = out["ip_fused_s"] / out["ip_s"]
        except Exception as err:  # noqa: BLE001 - recorded: no compiler or no Triton is a result here
            out["ip_fused_error"] = f"{type(err).__name__}: {err}"[:300]
    if chunk_elements:
        name = "CPU_CHUNK_ELEMENTS" if dev.type == "cpu" else "CHUNK_ELEMENTS"
        default = getattr(tr, name)
        out["chunk_elements_default"] = default
        out["ip_s_by_chunk_elements"], out["chunk_steps"] = {}, {}
        if "ip_fused_s" in out:
            out["ip_fused_s_by_chunk_elements"] = {}
        try:
            for ce in chunk_elements:
                setattr(tr, name, ce)
                out["chunk_steps"][str(ce)] = tr.chunk_steps(r, b, n, t, dev)
                out["ip_s_by_chunk_elements"][str(ce)] = _timed(ip, dev, repeats)
                if "ip_fused_s" in out:  # another k may be one more graph: compiled in _timed's warm-up
                    out["ip_fused_s_by_chunk_elements"][str(ce)] = _timed(lambda: ip(True), dev, repeats)
        finally:
            setattr(tr, name, default)
    if cuda_graph:
        if dev.type != "cuda":
            out["ip_graph_error"] = "needs cuda"
        else:
            try:
                out["ip_graph_s"] = _timed(graph_replay(ip).replay, dev, repeats)
                out["ip_graph_over_ip"] = out["ip_graph_s"] / out["ip_s"]
            except Exception as err:  # noqa: BLE001 - recorded: a measurement aid never run on a GPU yet
                out["ip_graph_error"] = f"{type(err).__name__}: {err}"[:300]
    out["ip_over_gemm"] = out["ip_s"] / out["gemm_s"]
    out["recurrence_over_gemm"] = out["recurrence_s"] / out["gemm_s"]
    out["ip_window_steps_per_s"] = r * b * t / out["ip_s"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="torch-cpu", choices=["torch-cpu", "cuda"])
    ap.add_argument("--reservoirs", type=int, default=4)
    ap.add_argument("--windows", type=int, default=100)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--units", type=int, nargs="+", default=[400, 100])
    ap.add_argument("--mu", type=float, nargs="+", default=[0.0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads (torch-cpu)")
    ap.add_argument("--chunk-elements", type=int, nargs="+", default=[], metavar="FLOATS",
                    help="also time the IP step with these chunk-buffer sizes (floats per buffer)")
    ap.add_argument("--cuda-graph", action="store_true",
                    help="cuda: also time the IP step captured as one CUDA graph and replayed")
    ap.add_argument("--fused-sums", action="store_true",
                    help="also time the IP step with the IP sums fused by torch.compile (compile timed apart)")
    ap.add_argument("--out", type=Path, help="append the JSON lines here too")
    args = ap.parse_args()
    dev = torch.device(torch_device(args.device))
    if dev.type == "cpu":
        torch.set_num_threads(args.threads)
    rows = []
    for n in args.units:
        for mu in args.mu:
            rec = measure(dev, args.reservoirs, args.windows, args.steps, n, mu, args.repeats,
                          tuple(args.chunk_elements), args.cuda_graph, args.fused_sums)
            print(json.dumps(rec), flush=True)
            if args.out:
                with args.out.open("a") as fh:
                    fh.write(json.dumps(rec) + "\n")
            rows.append(rec)
    print("\n| R × B × T × N, μ | IP step s | bare GEMM s | recurrence s | IP ÷ GEMM | recurrence ÷ GEMM |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['reservoirs']} × {r['windows']} × {r['steps']} × {r['units']}, {r['mu']:g} | {r['ip_s']:.3f} | "
              f"{r['gemm_s']:.3f} | {r['recurrence_s']:.3f} | {r['ip_over_gemm']:.2f} | "
              f"{r['recurrence_over_gemm']:.2f} |")
    for r in rows:
        if "ip_graph_s" in r or "ip_graph_error" in r:
            print(f"CUDA graph, {r['reservoirs']} × {r['windows']} × {r['steps']} × {r['units']}, μ {r['mu']:g}: "
                  + (f"{r['ip_graph_s']:.4f} s, {r['ip_graph_over_ip']:.3f} × the IP step" if "ip_graph_s" in r
                     else r["ip_graph_error"]))
    if args.fused_sums:
        print("\n| R × B × T × N, μ | IP step, fused sums s | ÷ GEMM | ÷ eager IP step | first call s |")
        print("|---|---|---|---|---|")
        for r in rows:
            size = f"{r['reservoirs']} × {r['windows']} × {r['steps']} × {r['units']}, {r['mu']:g}"
            if "ip_fused_s" not in r:
                print(f"| {size} | {r['ip_fused_error']} | | | |")
                continue
            print(f"| {size} | {r['ip_fused_s']:.4f} | {r['ip_fused_over_gemm']:.2f} | {r['ip_fused_over_ip']:.3f} | "
                  f"{r['ip_fused_first_call_s']:.1f} |")
    if args.chunk_elements:
        print("\n| R × B × T × N, μ | chunk floats (steps per chunk) | IP step s | ÷ default chunk | "
              "fused sums s | fused ÷ default chunk, eager |")
        print("|---|---|---|---|---|---|")
        for r in rows:
            fused = r.get("ip_fused_s_by_chunk_elements", {})
            for ce, s in r["ip_s_by_chunk_elements"].items():
                f = (f"{fused[ce]:.4f} | {fused[ce] / r['ip_s']:.3f}" if ce in fused else "— | —")
                print(f"| {r['reservoirs']} × {r['windows']} × {r['steps']} × {r['units']}, {r['mu']:g} | {ce} "
                      f"({r['chunk_steps'][ce]}) | {s:.4f} | {s / r['ip_s']:.3f} | {f} |")


if __name__ == "__main__":
    main()
