"""JAX against torch on the CPU build: the one measured basis for the accelerator's library choice until
benchmarks/gpu_session.sh's jax step runs on a GPU.

The accelerated path also runs on the CPU (``runner.device: torch-cpu``, the CI path), so this
times, interleaved in one process on the same inputs and shapes (scaled down to a CPU):

* ``jax``: bench_jax_anchor's recurrence, the T-step loop as one jitted ``lax.scan`` (its XLA
  compile time is reported apart, from ``lower().compile()``),
* ``torch_bare``: bench_gpu's plain-torch loop (baddbmm, tanh, leak per step),
* ``project``: this project's torch kernels (esnfed_core/accel): ``iter_chunks`` for a state pass,
  ``ridge_stats`` with the statistics, ``ip_step`` for the IP mini-batch cases,
* ``numpy_gemm`` and ``torch_gemm``: the floors, the T float32 products x·W of the same shapes
  alone (no input term, no tanh) through numpy's OpenBLAS (bench_reservoir's bare GEMM: which
  kernel, e.g. ``OPENBLAS_CORETYPE``, is in the header line) and torch's bmm (MKL).

Every library gets the same thread count (``--threads``, default 1: the machine is shared), set
before any of them is imported. Reports the median wall and CPU seconds (this process, all
threads) of ``--repeats`` interleaved rounds after one warm-up each, CPU-time ratios to JAX, and
the load average. Asserts that JAX's final states (and Gram sums) equal torch's within float32
tolerance (``check``). Needs jax, whose CPU build the [test] extra pins (``make install-test``;
tests/test_bench_scripts.py runs ``--smoke``):

    .venv/bin/python benchmarks/bench_jax_torch_cpu.py --out jax_cpu.jsonl
    .venv/bin/python benchmarks/bench_jax_torch_cpu.py --smoke --repeats 1   # tiny
"""

from __future__ import annotations

import argparse
import os
import sys

_pre = argparse.ArgumentParser(add_help=False)
_pre.add_argument("--threads", type=int, default=1)
THREADS = _pre.parse_known_args()[0].threads
# Before numpy, torch and jax load: every library on the same number of threads.
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = str(THREADS)
if THREADS == 1:
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               " --xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1").strip()

import json  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Callable  # noqa: E402

try:
    import jax
    import jax.numpy as jnp
except ModuleNotFoundError:
    raise SystemExit("bench_jax_torch_cpu.py: needs jax (the [test] extra pins its CPU build: "
                     "make install-test; or see this script's docstring)") from None
import numpy as np  # noqa: E402
import torch  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_gpu import LEAK, bank, bare, emit  # noqa: E402  (the bare torch loop and the project's banks)
from bench_jax_anchor import LEAK as JAX_LEAK, recurrence  # noqa: E402
from bench_reservoir import _bare_gemm, _time  # noqa: E402
from esnfed_core.accel import torch_plasticity as tp  # noqa: E402
from esnfed_core.accel import torch_reservoir as tr  # noqa: E402

assert LEAK == JAX_LEAK, "bench_gpu and bench_jax_anchor must use the same leak"

STEPS, INPUTS = 200, 8
# name, reservoirs, windows, units, project kernel (bench_gpu's cases at CPU scale)
CASES = [
    ("state pass, 1 reservoir", 1, 256, 400, "states"),
    ("8 reservoirs, states", 8, 64, 400, "states"),
    ("8 reservoirs, 100 units", 8, 64, 100, "states"),
    ("8 reservoirs + ridge statistics", 8, 64, 400, "stats"),
    ("IP mini-batch, 1 reservoir", 1, 100, 400, "ip"),
    ("IP mini-batches, 8 reservoirs", 8, 100, 400, "ip"),
    ("IP mini-batch, 1 reservoir, 100 units", 1, 100, 100, "ip"),
]
SMOKE_STEPS = 12  # --smoke: every case at tiny sizes (a test that it runs)
SMOKE_CASES = [(name, min(r, 2), 6, 8 if n == 100 else 16, kernel) for name, r, _, n, kernel in CASES]
# Final states lie in [-1, 1]; the libraries sum each step's products in different orders (a few
# float32 ulps per step) and the leaky recurrence (leak 0.3, spectral radius 0.9) damps an error
# by ~0.97 per step, so the sum stays ~30 steps' rounding: 1e-5 is ~80 ulps of 1.0 (measured
# ≤ 2.1e-7; a wrong leak, weight or step shows as ~1e-1).
STATE_ATOL = 1e-5
# Σ_t xᵀx: JAX sums 200 float32 Grams in float32, the project in float64 across chunks; relative
# to the largest entry, 200 float32 additions round to at most ~200·2⁻²⁴ ≈ 1.2e-5 (measured 6e-7).
GRAM_RTOL = 5e-5


def case(name: str, r: int, b: int, n: int, kernel: str, repeats: int) -> dict:
    bk = bank(r, n, INPUTS, torch.device("cpu"), ip=kernel == "ip")
    gen = torch.Generator().manual_seed(0)
    u4 = torch.randn(r if kernel == "ip" else 1, b, STEPS, INPUTS, generator=gen)  # project's (R', B, T, U)
    ut = u4[0].transpose(0, 1).contiguous()  # (T, B, U): reservoir 0's windows, shared by all (bench_gpu)
    # JAX and the bare loops run the plain recurrence (no gains, biases): an IP bank's (g, b) are
    # what the IP step itself changes, so for "ip" the anchors run the weights without them.
    w, w_in, uj = jnp.asarray(bk.w_t.numpy()), jnp.asarray(bk.w_in_t.numpy()), jnp.asarray(ut.numpy())
    stats = kernel == "stats"
    t0 = time.perf_counter()
    run = recurrence(stats).lower(w, w_in, uj).compile()
    compile_s = time.perf_counter() - t0

    plain = tr.Bank(bk.w_in_t, bk.w_t, bk.leak, bk.gain, bk.bias, ip=False)
    x_np = np.zeros((r, b, n), np.float32)
    gemm_out = np.empty_like(x_np)
    w_np = bk.w_t.numpy()
    if kernel == "ip":
        nw = torch.full((r,), float(b), dtype=torch.float64)
        sig = torch.full((r,), 0.5, dtype=torch.float64)
        project = lambda: tp.ip_step(bk, u4, None, nw, sig, mu=0.0, eta=0.01, normalize_step=True)  # noqa: E731
    elif stats:
        labels = torch.randint(0, 4, (1, b, STEPS), generator=gen).to(torch.int8)
        project = lambda: tr.ridge_stats(plain, u4, labels, 4)  # noqa: E731
    else:
        project = lambda: [None for _ in tr.iter_chunks(plain, u4)]  # noqa: E731
    jobs: dict[str, Callable[[], object]] = {
        "jax": lambda: jax.block_until_ready(run(w, w_in, uj)),
        "torch_bare": lambda: bare(plain, ut, stats),
        "project": project,
        "numpy_gemm": lambda: _bare_gemm(w_np, x_np, gemm_out, STEPS),
        "torch_gemm": lambda: torch_gemm(plain.w_t, torch.from_numpy(x_np), torch.from_numpy(gemm_out)),
    }
    check(plain, u4, ut, run(w, w_in, uj), stats, kernel)
    load0 = os.getloadavg()
    wall: dict[str, list[float]] = {k: [] for k in jobs}
    cpu: dict[str, list[float]] = {k: [] for k in jobs}
    first = {k: _time(job)[0] for k, job in jobs.items()}  # warm-up (JAX: the compiled run's first call)
    for i in range(repeats):
        names = list(jobs)
        for k in names[i % len(names):] + names[: i % len(names)]:  # rotate the order each round
            wt, ct = _time(jobs[k])
            wall[k].append(wt)
            cpu[k].append(ct)
    med_w = {k: statistics.median(v) for k, v in wall.items()}
    med_c = {k: statistics.median(v) for k, v in cpu.items()}
    ws = r * b * STEPS
    return {
        "case": name, "reservoirs": r, "windows": b, "units": n, "steps": STEPS, "project_kernel": kernel,
        "jax_compile_s": round(compile_s, 3), "first_call_s": {k: round(v, 4) for k, v in first.items()},
        "wall_median_s": {k: round(v, 5) for k, v in med_w.items()},
        "cpu_median_s": {k: round(v, 5) for k, v in med_c.items()},
        "cpu_over_jax": {k: round(v / med_c["jax"], 3) for k, v in med_c.items()},
        "M_ws_per_s_cpu": {k: round(ws / v / 1e6, 3) for k, v in med_c.items()},
        "loadavg_before": [round(x, 2) for x in load0], "loadavg_after": [round(x, 2) for x in os.getloadavg()],
    }


def torch_gemm(w_t: torch.Tensor, prev: torch.Tensor, out: torch.Tensor) -> None:
    """torch's counterpart of bench_reservoir._bare_gemm: STEPS products prev·W, no recurrence."""
    for _ in range(STEPS):
        torch.bmm(prev, w_t, out=out)


def check(plain: tr.Bank, u4: torch.Tensor, ut: torch.Tensor, jax_out, stats: bool, kernel: str) -> None:
    """JAX's final states against the bare torch loop's and (plain-recurrence cases) the project's
    kernels'; with statistics, JAX's Σ xᵀx against the project's ridge_stats."""
    x_jax, acc_jax = (np.asarray(a) for a in jax_out)
    x_bare = bare(plain, ut, False).numpy()
    diffs = {"torch_bare": float(np.abs(x_jax - x_bare).max())}
    if kernel != "ip":  # the IP cases' project kernel returns new gains, not states
        x_proj = [c.states[:, -1].clone() for c in tr.iter_chunks(plain, u4)][-1].numpy()
        diffs["project"] = float(np.abs(x_jax - x_proj).max())
    for k, d in diffs.items():
        assert d <= STATE_ATOL, f"JAX final states differ from {k} by {d:.3g} > {STATE_ATOL}"
    if stats:
        _, b64 = tr.ridge_stats(plain, u4, torch.zeros(u4.shape[:3], dtype=torch.int8), 1)
        b64 = b64.numpy()
        rel = float(np.abs(acc_jax - b64).max() / np.abs(b64).max())
        assert rel <= GRAM_RTOL, f"JAX Σ xᵀx differs from ridge_stats by {rel:.3g} (relative) > {GRAM_RTOL}"
        diffs["gram_rel"] = rel
    print(json.dumps({"check": "jax equals torch", "max_abs_state_diff": diffs}), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0], parents=[_pre])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, help="also write the JSON lines to this file")
    ap.add_argument("--smoke", action="store_true", help="every case at tiny sizes (a test that it runs)")
    args = ap.parse_args()
    if args.repeats < 1:
        raise SystemExit("--repeats: must be at least 1")
    global STEPS
    if args.smoke:
        STEPS = SMOKE_STEPS
    torch.set_num_threads(THREADS)
    import jaxlib  # noqa: PLC0415
    from threadpoolctl import threadpool_info  # noqa: PLC0415

    out = args.out.open("w") if args.out else None
    start = time.perf_counter()
    head = {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "jax_devices": [str(d) for d in jax.devices()],
            "torch": torch.__version__, "numpy": np.__version__, "python": platform.python_version(),
            "cpu": platform.processor() or platform.machine(), "cpus": os.cpu_count(), "threads": THREADS,
            "torch_threads": torch.get_num_threads(), "xla_flags": os.environ.get("XLA_FLAGS", ""),
            "openblas_coretype": os.environ.get("OPENBLAS_CORETYPE"),
            "blas": [(i.get("internal_api"), i.get("num_threads"), i.get("architecture")) for i in threadpool_info()],
            "repeats": args.repeats, "steps": STEPS, "smoke": args.smoke,
            "loadavg": [round(x, 2) for x in os.getloadavg()]}
    emit(head, out)
    for name, r, b, n, kernel in SMOKE_CASES if args.smoke else CASES:
        emit(case(name, r, b, n, kernel, args.repeats), out)
    emit({"total_seconds": round(time.perf_counter() - start, 1)}, out)


if __name__ == "__main__":
    main()
