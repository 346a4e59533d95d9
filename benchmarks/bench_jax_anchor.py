"""JAX on the shapes of bench_gpu.py's cases: the numbers behind the accelerator's library choice.

BENCHMARKS.md "Accelerator path" chose torch over JAX without a JAX number (JAX was not installed
where it was decided). This script runs the bare reservoir recurrence of bench_gpu.py's cases in
JAX, the T-step loop as one jitted ``lax.scan`` (XLA runs the whole loop on the device: no
per-step launches from Python, the advantage JAX would bring to the launch-bound IP mini-batch),
float32 with HIGHEST matmul precision (no TF32), so each line compares with bench_gpu.py's
``bare_M_ws_per_s`` (the plain torch loop) and ``M_ws_per_s`` (this project's kernels) of the
same case in the same GPU call. It follows shared/bench/gpu_reservoir_jax.py (the team's anchor
script), with the project's case names and sizes and a CPU smoke mode.

    python3 benchmarks/bench_jax_anchor.py --out jax.jsonl        # on the GPU (< 1 min)
    python benchmarks/bench_jax_anchor.py --smoke                 # tiny, on JAX's CPU build

On the CPU, benchmarks/bench_jax_torch_cpu.py times this recurrence interleaved with the torch
kernels (BENCHMARKS.md, "JAX against torch on the CPU build").

Prints one JSON line per case: window-steps/s of the best of ``reps`` runs after one compiling run
(whose seconds are reported too: XLA compiles once per shape). Needs only jax (and numpy).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import jax
import jax.numpy as jnp

from gpu_scale import SMOKE, Scale  # benchmarks/ (the script's folder): bench_gpu.py's sizes

LEAK = 0.3  # as bench_gpu.py
HIGHEST = jax.lax.Precision.HIGHEST


def recurrence(stats: bool):
    """x ← (1 − a)·x + a·tanh(u_t W_in + x W) for every reservoir at once, over all steps; with
    ``stats`` also Σ_t xᵀx per reservoir (the ridge statistics' Gram, float32 as the anchor)."""

    @jax.jit
    def run(w, w_in, u):
        r, n = w.shape[0], w.shape[1]

        def step(carry, ut):
            x, acc = carry
            net = jnp.einsum("bu,run->rbn", ut, w_in, precision=HIGHEST) + jnp.matmul(x, w, precision=HIGHEST)
            x = (1 - LEAK) * x + LEAK * jnp.tanh(net)
            if stats:
                acc = acc + jnp.matmul(jnp.swapaxes(x, 1, 2), x, precision=HIGHEST)
            return (x, acc), None

        acc0 = jnp.zeros((r, n, n), jnp.float32) if stats else jnp.zeros((), jnp.float32)
        (x, acc), _ = jax.lax.scan(step, (jnp.zeros((r, u.shape[1], n), jnp.float32), acc0), u)
        return x, acc

    return run


def case(name: str, r: int, windows: int, units: int, sc: Scale, stats: bool = False) -> dict:
    k1, k2, k3 = jax.random.split(jax.random.PRNGKey(0), 3)
    w = jax.random.normal(k1, (r, units, units), jnp.float32) * (0.9 / units ** 0.5)
    w_in = jax.random.uniform(k2, (r, sc.inputs, units), jnp.float32, -1, 1)
    u = jax.random.normal(k3, (sc.steps, windows, sc.inputs), jnp.float32)
    run = recurrence(stats)
    t0 = time.perf_counter()
    jax.block_until_ready(run(w, w_in, u))
    first = time.perf_counter() - t0
    best = float("inf")
    for _ in range(sc.reps):
        t0 = time.perf_counter()
        jax.block_until_ready(run(w, w_in, u))
        best = min(best, time.perf_counter() - t0)
    ws = r * windows * sc.steps
    return {"case": name, "reservoirs": r, "windows": windows, "units": units, "steps": sc.steps,
            "stats": stats, "first_run_seconds": round(first, 4), "seconds": round(best, 5),
            "M_ws_per_s": round(ws / best / 1e6, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, help="also write the JSON lines to this file")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes (a check that it runs, e.g. on the CPU)")
    ap.add_argument("--allow-cpu", action="store_true",
                    help="run the full sizes even where JAX has no GPU (by default it stops with exit 3)")
    args = ap.parse_args()
    sc = SMOKE if args.smoke else Scale()
    out = args.out.open("w") if args.out else None
    cases = [
        ("state pass, 1 reservoir", lambda: case("state pass, 1 reservoir", 1, sc.state_windows, sc.units, sc)),
        ("IP mini-batch, 1 reservoir", lambda: case("IP mini-batch, 1 reservoir", 1, sc.ip_windows, sc.units, sc)),
        (f"IP mini-batches, {sc.trials} reservoirs",
         lambda: case(f"IP mini-batches, {sc.trials} reservoirs", sc.trials, sc.ip_windows, sc.units, sc)),
        (f"{sc.trials} reservoirs, states",
         lambda: case(f"{sc.trials} reservoirs, states", sc.trials, sc.trial_windows, sc.units, sc)),
        (f"{sc.trials} reservoirs + ridge statistics",
         lambda: case(f"{sc.trials} reservoirs + ridge statistics", sc.trials, sc.trial_windows, sc.units, sc,
                      stats=True)),
        (f"{sc.trials} reservoirs, {sc.small_units} units",
         lambda: case(f"{sc.trials} reservoirs, {sc.small_units} units", sc.trials, sc.trial_windows,
                      sc.small_units, sc)),
    ]
    backend = jax.default_backend()  # "gpu" with a CUDA jaxlib plugin that found the GPU, else "cpu"
    lines = [{"lib": "jax", "jax": jax.__version__, "backend": backend, "devices": [str(d) for d in jax.devices()],
              "precision": "float32 HIGHEST"}]
    if backend == "cpu" and not (args.smoke or args.allow_cpu):
        # A CPU-only jaxlib (or a CUDA plugin that failed to load: JAX then falls back to the CPU
        # with a warning) would spend the whole step on full-size cases on the CPU, labelled as
        # the GPU call's JAX numbers.
        lines[0]["error"] = "JAX has no GPU backend here (CPU-only jaxlib, or its CUDA plugin failed: see stderr); nothing measured"
    print(json.dumps(lines[0]), flush=True)
    if out:
        out.write(json.dumps(lines[0]) + "\n")
    if "error" in lines[0]:
        if out:
            out.close()
        raise SystemExit(3)
    for name, fn in cases:
        try:
            rec = fn()
        except Exception as exc:  # noqa: BLE001 - reported per case (e.g. out of memory), the others go on
            rec = {"case": name, "error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        print(json.dumps(rec), flush=True)
        if out:
            out.write(json.dumps(rec) + "\n")
            out.flush()


if __name__ == "__main__":
    main()
