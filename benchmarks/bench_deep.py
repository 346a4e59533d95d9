"""Deep reservoir recurrence (esnfed_core.deep) against the bare GEMMs of the same shapes, and
against the shallow reservoir of the same total units; CPU-time medians, interleaved repeats.

    .venv/bin/python benchmarks/bench_deep.py [--repeats 7] [--threads 1]
    .venv/bin/python benchmarks/bench_deep.py --smoke --repeats 1   # tiny shapes (a test that it runs)

Per case (windows B, steps T, inputs U, total units N, layers L; N_l = N split over L):
- *recurrent GEMMs*: Σ_l T products (B, N_l) @ (N_l, N_l), the products no recurrence can avoid;
- *all GEMMs*: those plus each layer's input projection (T·B, U_l) @ (U_l, N_l) (U_0 = U,
  U_l = N_{l−1}), in the loop's chunks of 8 steps: every product the deep loop makes;
- *deep run_batch*: the stacked recurrence (run_batch on a DeepReservoir);
- *shallow run_batch*: one reservoir of N units, and its bare recurrent GEMMs.
Ratios: deep ÷ all GEMMs (the overhead of the fused loop: tanh, leak, strided layer views),
deep ÷ shallow (cost of depth at the same readout size). Also checks that a one-layer deep
reservoir gives the shallow states' bytes.
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from threadpoolctl import threadpool_limits

from _measure import cpu_medians  # benchmarks/ is the script's folder, first on sys.path
from esnfed_core import reservoir
from esnfed_core.deep import DeepConfig, build_deep_reservoir
from esnfed_core.reservoir import ReservoirConfig, build_reservoir, run_batch

CASES = [(256, 200, 6, 100, 2), (256, 200, 6, 100, 4), (256, 700, 8, 400, 2), (256, 700, 8, 400, 4)]
SMOKE_CASES = [(8, 20, 3, 16, 2), (8, 20, 3, 16, 4)]
CHUNK = reservoir._TIME_CHUNK


def case(windows: int, steps: int, inputs: int, units: int, layers: int, repeats: int) -> dict:
    rng = np.random.default_rng(0)
    x = rng.standard_normal((windows, steps, inputs)).astype(np.float32)
    deep = build_deep_reservoir(DeepConfig.shared(inputs, units, layers, 0.9, 0.3, 1.0), 0)
    shallow = build_reservoir(ReservoirConfig(inputs, units, 0.9, 0.3, 1.0), 0)
    one = build_deep_reservoir(DeepConfig.shared(inputs, units, 1, 0.9, 0.3, 1.0), 0)
    same = run_batch(one, x).tobytes() == run_batch(shallow, x).tobytes()
    out_deep = np.empty((steps, windows, units), np.float32)
    out_shallow = np.empty_like(out_deep)
    prevs = [rng.uniform(-1, 1, (windows, r.units)).astype(np.float32) for r in deep.layers]
    gemm_outs = [np.empty_like(p) for p in prevs]
    ins = [np.ascontiguousarray(rng.standard_normal((CHUNK, windows, r.n_inputs)).astype(np.float32))
           for r in deep.layers]
    proj_outs = [np.empty((CHUNK, windows, r.units), np.float32) for r in deep.layers]
    prev_s = rng.uniform(-1, 1, (windows, units)).astype(np.float32)
    out_s = np.empty_like(prev_s)

    def recurrent():
        for r, p, o in zip(deep.layers, prevs, gemm_outs):
            for _ in range(steps):
                np.matmul(p, r._w_t, out=o)

    def all_gemms():
        recurrent()
        for r, i, o in zip(deep.layers, ins, proj_outs):
            for _ in range(0, steps, CHUNK):
                np.matmul(i, r._w_in_t, out=o)

    jobs = {
        "recurrent GEMMs": recurrent,
        "all GEMMs": all_gemms,
        "deep run_batch": lambda: run_batch(deep, x, out=out_deep),
        "shallow GEMMs": lambda: [np.matmul(prev_s, shallow._w_t, out=out_s) for _ in range(steps)],
        "shallow run_batch": lambda: run_batch(shallow, x, out=out_shallow),
    }
    med = cpu_medians(jobs, repeats)
    return {"case": f"{windows} × {steps} × {inputs} × {units} (L={layers}: "
                    f"{'+'.join(str(r.units) for r in deep.layers)})", **med, "one_layer_same_bytes": same}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=1, help="BLAS threads (the pipeline's workers: 1)")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes (a test that it runs)")
    args = ap.parse_args(argv)
    threadpool_limits(args.threads)
    print(f"load average {os.getloadavg()}, BLAS threads {args.threads}, {args.repeats} repeats, CPU-time medians")
    print("| windows × steps × inputs × units (layers) | recurrent GEMMs | all GEMMs | deep run_batch | "
          "deep ÷ all GEMMs | deep ÷ recurrent GEMMs | shallow run_batch | shallow ÷ its GEMMs | deep ÷ shallow | "
          "1 layer = shallow bytes |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for c in SMOKE_CASES if args.smoke else CASES:
        r = case(*c, args.repeats)
        ms = {k: v * 1e3 for k, v in r.items() if isinstance(v, float)}
        print(f"| {r['case']} | {ms['recurrent GEMMs']:.1f} ms | {ms['all GEMMs']:.1f} ms | "
              f"{ms['deep run_batch']:.1f} ms | **{ms['deep run_batch'] / ms['all GEMMs']:.2f}** | "
              f"{ms['deep run_batch'] / ms['recurrent GEMMs']:.2f} | {ms['shallow run_batch']:.1f} ms | "
              f"{ms['shallow run_batch'] / ms['shallow GEMMs']:.2f} | {ms['deep run_batch'] / ms['shallow run_batch']:.2f} | "
              f"{r['one_layer_same_bytes']} |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
