"""Tune privacy.clip on the validation users (issue 14): the selected IncFed config of
privacy.pct retrained under the Gaussian mechanism for each clip of a small grid, at a few ε, with
the retrain seeds; prints the mean validation accuracy (λ chosen on validation, as the privacy
stage does). Needs the processed data and runs/select (esnfed select --algo incfed --pct 100).

    .venv/bin/python benchmarks/privacy_clip_sweep.py [--clips 0.01,0.02,0.05,0.1,0.2,0.5,1] [--eps 1,4]

Only validation users are scored: choosing clip here spends no test data (the validation users
are not clients, so the DP guarantee to the training users is unaffected by the choice).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from esnfed_core.method import Method
from esnfed_core.privacy import DPSpec
from esnfed_core.private_trial import fit_private
from esnfed_core.trial import TrialData
from esnfed_stages.experiment_params import experiment_params
from esnfed_stages.params import load_params
from esnfed_stages.privacy import neighbouring_units, privacy_params
from esnfed_stages.retrain import retrain_seed, selected_config
from esnfed_stages.trial_data import open_dataset


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--clips", default="0.01,0.02,0.05,0.1,0.2,0.5,1")
    ap.add_argument("--eps", default="1,4")
    ap.add_argument("--datasets", default="wesad,hhar")
    ap.add_argument("--params", default="params.yaml")
    args = ap.parse_args()
    params = load_params(Path(args.params))
    pp, exp = privacy_params(params), experiment_params(params)
    clips = [float(c) for c in args.clips.split(",")]
    epss = [float(e) for e in args.eps.split(",")]
    print("| dataset | ε | " + " | ".join(f"clip {c:g}" for c in clips) + " |")
    print("|---|---|" + "---|" * len(clips))
    for ds in args.datasets.split(","):
        data = open_dataset(Path("data"), ds)
        users = data.train_users(pp.pct)
        td = TrialData(data.load(users), data.load(data.validation_users), data.n_classes, data.n_contexts)
        delta = pp.delta_for(neighbouring_units(pp.relation, td))
        cfg = selected_config(Path("runs"), ds, "incfed", pp.pct, exp.budget_spec)
        seeds = [retrain_seed(exp, ds, pp.pct, k) for k in range(exp.retrains)]
        for eps in epss:
            cells = []
            for clip in clips:
                spec = DPSpec(eps, delta, pp.relation, clip, pp.ip_clip_for(ds))
                acc = [fit_private(Method.parse("incfed"), cfg, s, td, exp.settings, spec).score for s in seeds]
                cells.append(f"{100 * np.mean(acc):.2f} ± {100 * np.std(acc):.2f}")
            print(f"| {ds} | {eps:g} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
