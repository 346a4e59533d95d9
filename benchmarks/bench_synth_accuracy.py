"""Test accuracy of centralised ridge on the embedded synthetic data: one quick check that the
generators carry learnable, user-transferable structure (docs/embedded-data.md).

    .venv/bin/python benchmarks/bench_synth_accuracy.py --dataset hhar --units 400
    .venv/bin/python benchmarks/bench_synth_accuracy.py --dataset wesad --units 40 --configs 3

Generates the dataset with params.yaml's ``synthetic.<dataset>`` (or reads ``--raw`` if given),
preprocesses it with ``preprocess.<dataset>``, and for each of ``--configs`` reservoir configs
(the first: spectral radius 0.9, leak 0.3, input scaling 1.0; the others drawn from the default
budget's ranges) fits the ridge readout on the training users of every share, picks λ on the
validation users and prints the test accuracy (the pipeline's ridge method, one trial, seed 0).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml
from threadpoolctl import threadpool_limits

from esnfed_core.readout import evaluate, ridge_stats, solve
from esnfed_core.reservoir import ReservoirConfig, build_reservoir

ROOT = Path(__file__).resolve().parents[1]
N_CLASSES = {"wesad": 4, "hhar": 6}


def load(dataset: str, params: dict, raw: Path | None, scratch: Path) -> dict:
    """Users -> UserData, from ``raw`` or freshly generated synthetic files."""
    if dataset == "hhar":
        from esnfed_core.data.hhar import preprocess_hhar as prep
        from esnfed_core.data.hhar_synth import synthesize_hhar as synth
    else:
        from esnfed_core.data.wesad import preprocess_wesad as prep
        from esnfed_core.data.wesad_synth import synthesize_wesad as synth
    if raw is None:
        conf = dict(params["synthetic"][dataset])
        seed = conf.pop("seed")
        t0 = time.perf_counter()
        synth(scratch, seed, **conf)
        print(f"synthesize {dataset}: {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        raw = scratch
    t0 = time.perf_counter()
    users = {u: d for u, d, _ in prep(raw, params["preprocess"][dataset])}
    print(f"preprocess {dataset}: {time.perf_counter() - t0:.1f} s, windows "
          + ", ".join(f"{u} {d.windows}" for u, d in users.items()), file=sys.stderr)
    return users


def ridge_test(users: dict, part: dict, n_classes: int, cfg: dict, lambdas: list[float]) -> dict[str, float]:
    """Test accuracy per share: pooled ridge on the share's users, λ chosen on validation."""
    n_inputs = next(iter(users.values())).x.shape[2]
    res = build_reservoir(ReservoirConfig(n_inputs, cfg["units"], cfg["spectral_radius"], cfg["leak"],
                                          cfg["input_scaling"]), 0)
    stats = {u: ridge_stats(res, users[u].x, users[u].y, n_classes) for u in users}
    out = {}
    for pct, train in part["train"].items():
        w = solve(sum(stats[u] for u in train), lambdas)
        counts = [evaluate(res, users[u].x, users[u].y, w) for u in part["validation"]]
        val = sum(c.correct for c in counts) / sum(c.total for c in counts)
        best = int(np.argmax(val))
        tc = [evaluate(res, users[u].x, users[u].y, w[best]) for u in part["test"]]
        out[str(pct)] = float(sum(c.correct[0] for c in tc) / sum(c.total for c in tc))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dataset", choices=["hhar", "wesad"], default="hhar")
    ap.add_argument("--units", type=int, default=40)
    ap.add_argument("--configs", type=int, default=1)
    ap.add_argument("--raw", type=Path, help="read this raw root instead of generating")
    ap.add_argument("--params", type=Path, default=ROOT / "params.yaml")
    args = ap.parse_args()
    params = yaml.safe_load(args.params.read_text())
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as scratch, threadpool_limits(limits=1):
        users = load(args.dataset, params, args.raw, Path(scratch))
        part = params["partition"][args.dataset]
        for k in range(args.configs):
            cfg = {"units": args.units, "spectral_radius": 0.9, "leak": 0.3, "input_scaling": 1.0}
            if k:
                cfg.update(spectral_radius=round(rng.uniform(0.3, 0.95), 2), leak=round(rng.uniform(0.1, 0.8), 2),
                           input_scaling=round(rng.uniform(0.5, 1.0), 2))
            t0 = time.perf_counter()
            acc = ridge_test(users, part, N_CLASSES[args.dataset], cfg, params["readout"]["lambdas"])
            print(f"{args.dataset} {cfg}: test accuracy "
                  + ", ".join(f"{p} % {a * 100:.1f}" for p, a in acc.items())
                  + f"  ({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
