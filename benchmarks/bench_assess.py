"""The assessment of one continual share, numpy model by model against batched on the torch kernels
(esnfed_core.accel.scores), with the bare batched recurrence of the same shapes in the same run.

    .venv/bin/python benchmarks/bench_assess.py --device torch-cpu          # this machine, ~1 min
    PYTHONPATH=. python3 benchmarks/bench_assess.py --device cuda --out $OUT/assess.jsonl
    .venv/bin/python benchmarks/bench_assess.py --smoke                     # tiny (a test that it runs)

A share of a continual method: ``--retrains`` models, each with its reservoir after each of the
``contexts`` contexts (IP gains and biases differ), scored on ``--users`` test users of
``--windows`` windows × 700 steps × 8 channels (WESAD shape; random data, 5 contexts of equal
size): the accuracy matrix (scoring.context_matrix) and the activation densities
(scoring.activation_densities, 40 bins) of every retrain. Reports seconds and model-window-steps
per second of each path, and of ``bare``: the batched recurrence alone (torch_reservoir.iter_chunks
over the same bank and windows, nothing consumed) — what the kernels cannot beat. The numpy path
runs with the BLAS threads of the machine (``--numpy-windows`` of the windows, then scaled,
so the CPU side stays short at paper sizes).
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

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from esnfed_core.accel import torch_device  # noqa: E402
from esnfed_core.accel import scores  # noqa: E402
from esnfed_core.accel.passes import DeviceWindows, window_batch  # noqa: E402
from esnfed_core.accel.torch_reservoir import Bank, iter_chunks  # noqa: E402
from esnfed_core.data.processed import UserData  # noqa: E402
from esnfed_core.reservoir import ReservoirConfig, build_reservoir  # noqa: E402
from esnfed_core.scoring import activation_densities, context_matrix  # noqa: E402


def models(retrains: int, contexts: int, units: int, inputs: int, classes: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    out = []
    for k in range(retrains):
        base = build_reservoir(ReservoirConfig(inputs, units, 0.9, 0.3, 1.0), k)
        res = [base.with_ip(rng.uniform(0.8, 1.2, units), rng.uniform(-0.1, 0.1, units)) for _ in range(contexts)]
        out.append((res, [rng.standard_normal((classes, units)) for _ in range(contexts)]))
    return out


def users(n: int, windows: int, steps: int, inputs: int, classes: int, contexts: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    return [UserData(rng.standard_normal((windows, steps, inputs), dtype=np.float32),
                     rng.integers(0, classes, (windows, steps)).astype(np.int8),
                     np.minimum(np.arange(windows) * contexts // windows, contexts - 1).astype(np.int8))
            for _ in range(n)]


def sync(dev: str) -> None:
    if dev == "cuda":
        torch.cuda.synchronize()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["torch-cpu", "cuda"], default="torch-cpu")
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--retrains", type=int, default=5)
    ap.add_argument("--units", type=int, default=300)
    ap.add_argument("--users", type=int, default=3)
    ap.add_argument("--windows", type=int, default=600, help="test windows per user (real WESAD: 2,990)")
    ap.add_argument("--numpy-windows", type=int, default=100, help="windows per user the numpy path runs")
    ap.add_argument("--out", type=Path)
    a = ap.parse_args()
    steps, inputs, classes, contexts, bins = 700, 8, 4, 5, 40
    if a.smoke:
        steps, a.retrains, a.units, a.users, a.windows, a.numpy_windows = 12, 2, 16, 2, 10, 10
    dev = torch_device(a.device)
    ms = models(a.retrains, contexts, a.units, inputs, classes)
    test = users(a.users, a.windows, steps, inputs, classes, contexts)
    small = [u.select(np.arange(min(a.numpy_windows, u.windows))) for u in test]
    n_models = a.retrains * contexts
    ws = n_models * a.users * a.windows * steps  # model-window-steps of one scoring pass
    out = a.out.open("w") if a.out else None

    def emit(rec: dict) -> None:  # each line as it is measured: a run cut off keeps what it had
        print(json.dumps(rec), flush=True)
        if out:
            out.write(json.dumps(rec) + "\n")
            out.flush()

    emit({"platform": platform.platform(), "torch": torch.__version__, "device": a.device,
          "threads": torch.get_num_threads(), "retrains": a.retrains, "contexts": contexts, "units": a.units,
          "users": a.users, "windows": a.windows, "steps": steps})

    def batched() -> None:
        scores.context_matrices(ms, test, a.device)
        scores.activation_densities([r for r, _ in ms], test, contexts, bins, a.device)

    def bare() -> None:  # the two passes' recurrences alone, over the same bank and windows
        bank = Bank.from_reservoirs([r for res, _ in ms for r in res], dev)
        for _ in range(2):
            for u in test:
                x = DeviceWindows.of([u], dev).x
                step = window_batch(bank.reservoirs, bank.units, len(x))
                for lo in range(0, len(x), step):
                    for _c in iter_chunks(bank, x[lo : lo + step][None]):
                        pass

    times = {}
    for name, fn in (("batched", batched), ("bare", bare)):
        fn()  # warm-up
        sync(dev)
        runs = []
        for _ in range(1 if a.smoke else 3):
            t0 = time.perf_counter()
            fn()
            sync(dev)
            runs.append(time.perf_counter() - t0)
        times[name] = float(np.median(runs))
        emit({"case": "bare recurrence" if name == "bare" else name, "seconds": times[name],
              "M_model_ws_per_s": 2 * ws / times[name] / 1e6})
    # The numpy path last: the device's numbers first, should the run be cut off (gpu_session.sh)
    t0 = time.perf_counter()
    for res, w in ms:
        context_matrix(res, w, small, 256)
        activation_densities(res, small, contexts, bins, 256)
    numpy_s = (time.perf_counter() - t0) * a.windows / min(a.numpy_windows, a.windows)
    emit({"case": "numpy (scaled)", "seconds": numpy_s, "M_model_ws_per_s": 2 * ws / numpy_s / 1e6})
    emit({"case": "ratios", "batched_over_bare": times["batched"] / times["bare"],
          "numpy_over_batched": numpy_s / times["batched"]})
    if out:
        out.close()


if __name__ == "__main__":
    main()
