"""Tune the privacy stage's clipping bounds on the validation users: the selected config of
privacy.pct retrained under the Gaussian mechanism for each value of a small grid, at a few ε, with
the retrain seeds; prints the mean ± std validation accuracy (λ chosen on validation, as the privacy
stage does). Needs the processed data and runs/select (esnfed select --algo incfed|fedip --pct 100).

``--sweep clip`` (default): IncFed, ``privacy.clip`` (the fraction of √(N + N²) one
user's mean statistics are clipped to) over ``--clips``.

``--sweep ip_clip``: FedIP, ``privacy.ip_clip`` (the L2 bound of one client's round update
(Δg, Δb)) over ``--clips``, the dataset's own ``privacy.clip`` fixed; ε defaults to the finite ε of
``privacy.epsilons``. It first prints the updates' natural scale: the norm of every client's round
update without noise (ε = ∞: nothing clips), with the non-private accuracy; then per cell the share
of updates the bound clipped (their norm before clipping > ip_clip; rounds after the first start
from the noisy aggregate, so it moves with ε).

    .venv/bin/python benchmarks/privacy_clip_sweep.py [--clips 0.01,0.02,0.05,0.1,0.2,0.5,1] [--eps 1,4]
    .venv/bin/python benchmarks/privacy_clip_sweep.py --sweep ip_clip --seeds 5 --test --out ipclip.jsonl
    .venv/bin/python benchmarks/privacy_clip_sweep.py --smoke --out s.jsonl --datasets wesad   # tiny

Only validation users are scored unless ``--test``: choosing a bound on validation spends no test
data (the validation users are not clients, so the DP guarantee to the training users is
unaffected by the choice); ``--test`` also prints the test accuracy, to compare with the privacy
stage's table, not to choose by. ``--seeds`` retrains more seeds than the budget's (the k-th is
retrain_seed(k), the stage's for k < retrains); one seed draws the same standard normals at every
value of the grid (fit_private's generator), so the values are compared under common noise.
``--out``: one JSON line per cell (and per dataset's natural scale).

``--sweep fedavg_clip``: DP-FedAvg (opt-in, privacy.extra_methods; needs esnfed select --algo fedavg),
``privacy.fedavg_clip`` (the Frobenius bound of one client's local readout) over ``--clips``, as
``ip_clip``: first the natural scale (every client's readout norm at the selected λ, ε = ∞), then
per cell the accuracies and the share of readouts clipped.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from esnfed_core.method import Method  # noqa: E402
from esnfed_core.privacy import DPSpec  # noqa: E402
from esnfed_core.private_trial import fit_private  # noqa: E402
from esnfed_core.scoring import accuracy  # noqa: E402
from esnfed_stages.params.experiment import experiment_params  # noqa: E402
from esnfed_stages.params.load import load_params  # noqa: E402
from esnfed_stages.studies.privacy import inputs
from esnfed_stages.params.privacy import privacy_params  # noqa: E402
from esnfed_stages.experiment.best import retrain_seed, selected_config  # noqa: E402

SWEEPS = {"clip": "incfed", "ip_clip": "fedip", "fedavg_clip": "fedavg"}  # the swept key -> the method it bounds
GRIDS = {"clip": "0.01,0.02,0.05,0.1,0.2,0.5,1", "ip_clip": "0.003,0.007,0.015,0.03,0.05,0.1,0.2,0.5,1",
         "fedavg_clip": "0.03,0.1,0.3,1,3,10"}
NORMS = {"ip_clip": "a FedIP client's round update ‖(Δg, Δb)‖₂ (ε = ∞, every client, round and seed)",
         "fedavg_clip": "a FedAvg client's local readout ‖W_c‖_F at the selected λ (ε = ∞, every client and seed)"}


def mean_std(xs) -> str:
    return f"{100 * np.mean(xs):.2f} ± {100 * np.std(xs):.2f}"


def paired(xs, ref) -> str:
    """Points ahead of the reference, paired by seed: mean ± std, and seeds ahead / behind."""
    d = 100 * (np.asarray(xs) - np.asarray(ref))
    return f"{d.mean():+.2f} ± {d.std():.2f} ({int((d > 0).sum())}/{int((d < 0).sum())})"


def table(title: str, key: str, clips: list[float], rows: list[tuple[str, float, list[str]]]) -> None:
    print(f"\n{title}\n\n| dataset | ε | " + " | ".join(f"{key} {c:g}" for c in clips) + " |")
    print("|---|---|" + "---|" * len(clips))
    for ds, eps, cells in rows:
        print(f"| {ds} | {eps:g} | " + " | ".join(cells) + " |")


def cell(method: Method, cfg, seeds: list[int], inp, exp, spec: DPSpec, test: bool) -> dict:
    """Validation (and test) accuracy of every seed and the FedIP update (FedAvg readout) norms of the cell."""
    val, tst, norms = [], [], []
    for seed in seeds:
        model = fit_private(method, cfg, seed, inp.data, exp.settings, spec,
                            norms if method.algo in ("fedip", "fedavg") else None)
        val.append(float(model.score))
        if test:
            tst.append(accuracy(model.reservoir, model.readout, inp.test, exp.settings.batch_size))
    return {"validation": val, "test": tst or None, "norms": norms}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sweep", choices=tuple(SWEEPS), default="clip")
    ap.add_argument("--clips", help=f"the grid (default: clip {GRIDS['clip']}; ip_clip {GRIDS['ip_clip']})")
    ap.add_argument("--eps", help="default: clip 1,4; ip_clip the finite privacy.epsilons")
    ap.add_argument("--reference", type=float,
                    help="the grid value the paired tables compare with (default: the dataset's privacy.<sweep>)")
    ap.add_argument("--datasets", default="wesad,hhar")
    ap.add_argument("--params", default="params.yaml")
    ap.add_argument("--data-dir", default="data")
    ap.add_argument("--runs-dir", default="runs")
    ap.add_argument("--seeds", type=int, help="retrain seeds per cell (default: the budget's retrains)")
    ap.add_argument("--test", action="store_true", help="also score the test users (not to choose by)")
    ap.add_argument("--out", help="JSON lines: one record per cell")
    ap.add_argument("--smoke", action="store_true", help="tiny: two bounds, ε 1, one seed, test scored")
    args = ap.parse_args()
    params = load_params(Path(args.params))
    pp, exp = privacy_params(params), experiment_params(params)
    key, method = args.sweep, Method.parse(SWEEPS[args.sweep])
    if args.smoke:
        args.clips, args.eps, args.seeds, args.test = "0.001,1", "1", 1, True
    clips = [float(c) for c in (args.clips or GRIDS[key]).split(",")]
    default_eps = [e for e in pp.epsilons if math.isfinite(e)] if key in NORMS else [1.0, 4.0]
    epss = [float(e) for e in args.eps.split(",")] if args.eps else default_eps
    out = open(args.out, "w") if args.out else None  # noqa: SIM115 (closed below)
    rows, scales = [], []  # rows: (dataset, ε, the reference's grid index or None, each bound's cell)
    for ds in args.datasets.split(","):
        inp = inputs(ds, pp, exp, Path(args.data_dir))
        cfg = selected_config(Path(args.runs_dir), ds, method.algo, pp.pct, exp.budget_spec)
        seeds = [retrain_seed(exp, ds, pp.pct, k) for k in range(args.seeds or exp.retrains)]
        clip, ip_clip = pp.clip_for(ds), pp.ip_clip_for(ds)
        reference = args.reference if args.reference is not None else getattr(pp, f"{key}_for")(ds)
        ref = clips.index(reference) if reference in clips else None

        def record(rec: dict) -> dict:
            rec = {"sweep": key, "dataset": ds, "delta": inp.delta, "seeds": seeds, **rec}
            if out:
                out.write(json.dumps(rec) + "\n")
                out.flush()
            return rec

        if key in NORMS:  # the natural scale: no noise, nothing clipped
            r = record({"eps": "inf", "config": cfg,
                        **cell(method, cfg, seeds, inp, exp, DPSpec(math.inf, inp.delta, pp.relation, clip, 1.0),
                               args.test)})
            n = np.asarray(r["norms"])
            scales.append(f"| {ds} | {len(n)} | {n.min():.5f} | {np.median(n):.5f} | {n.max():.5f} | "
                          f"{mean_std(r['validation'])} | {mean_std(r['test']) if args.test else '–'} |")
        for eps in epss:
            cells = []
            for c in clips:
                spec = dataclasses.replace(DPSpec(eps, inp.delta, pp.relation, clip, ip_clip, pp.fedavg_clip_for(ds)),
                                           **{key: c})
                r = cell(method, cfg, seeds, inp, exp, spec, args.test)
                if r["norms"]:  # FedIP, FedAvg: the share of updates (readouts) longer than the bound
                    r["clipped"] = float(np.mean(np.asarray(r["norms"]) > c))
                cells.append(record({"eps": eps, "clip": c, **r}))
            rows.append((ds, eps, ref, cells))
            print(f"{ds} ε={eps:g} done", file=sys.stderr, flush=True)
    if out:
        out.close()
    if scales:
        print(f"Natural scale of {NORMS[key]} and the non-private accuracy (%):\n\n| dataset | updates | min | median | max | "
              "validation | test |\n|---|---|---|---|---|---|---|")
        print("\n".join(scales))
    n_seeds = len(rows[0][3][0]["seeds"]) if rows else 0
    for split in ("validation", "test") if args.test else ("validation",):
        table(f"{split.capitalize()} accuracy (%, mean ± std over {n_seeds} seeds):", key, clips,
              [(ds, eps, [mean_std(r[split]) for r in cells]) for ds, eps, _, cells in rows])
        refs = [(ds, eps, ref, cells) for ds, eps, ref, cells in rows if ref is not None]
        if refs:
            against = {f"{clips[ref]:g}" for _, _, ref, _ in refs}
            against_s = f"{key} {against.pop()}" if len(against) == 1 else f"the dataset's own {key}"
            table(f"{split.capitalize()} accuracy minus {against_s}'s, paired by seed (points, "
                  "mean ± std; seeds ahead/behind):", key, clips,
                  [(ds, eps, [paired(r[split], cells[ref][split]) for r in cells]) for ds, eps, ref, cells in refs])
    if key in NORMS:
        table(f"Updates clipped (norm before clipping > {key}):", key, clips,
              [(ds, eps, [f"{100 * r['clipped']:.0f} %" for r in cells]) for ds, eps, _, cells in rows])


if __name__ == "__main__":
    main()
