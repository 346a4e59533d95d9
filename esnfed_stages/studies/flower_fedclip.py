"""`esnfed flower --app fedclip-naive | fedclip-replay [--secagg] | fedclip-joint`: the FedCLIP Flower
app (esnfed_flower/fedclip.py, SecAgg+: secagg_fedclip.py, joint: fedclip_joint.py) beside the
pipeline's continual trial of the same config and seed ->
<out_dir>/<dataset>-fedclip-<strategy>[-secagg]-<pct>.json (runs/flower-manual by default).

The selected config of the share (runs/select/<dataset>/fedclip-<strategy>/<pct>/best.json) is
trained from the retrain stage's first seed as the retrain stage trains it (esnfed_core.trial.fit,
λ = continual.lambda); the app then runs with the same seeds, strategy settings and λ on the
training users (one SuperNode each, their windows with each window's context), and both models are
scored as the assess stage scores continual models: after each context, on the test users' contexts
so far (stream accuracy). The document compares the per-context (g, b) and readouts and the stream
accuracy; bytes are what measure_mod counted (phases: each context's IP rounds and its statistics
round; joint: each round's IP, statistics and evaluation groups).

Joint: the validation users are evaluation nodes too (their files after the training users', run
config num-eval-clients), early stopping with params.yaml continual.joint (patience, max rounds);
the document adds the IP rounds kept per context on both sides (``ip_rounds``) and whether the
optional max rounds ended a context (``joint_capped``), the rounds the Flower run ran per context and
its per-round validation accuracy (``rounds``, ``joint_trace``).
SecAgg+ is not offered for joint (esnfed_stages.studies.flower.SECAGG_APPS).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from esnfed_core import __version__, metrics
from esnfed_core.errors import ConfigError
from esnfed_core.method import Method
from esnfed_core.scoring import context_matrix
from esnfed_core.trial import fit, make_reservoir, sub_seeds
from esnfed_stages.studies import flower
from esnfed_stages import provenance
from esnfed_stages._io import output_lock, write_json
from esnfed_stages.layout import out_name


def run_config(cfg: Mapping[str, Any], seeds: Mapping[str, int], data: Any, settings: Any, app: str,
               secagg: bool = False) -> dict[str, Any]:
    """The FedCLIP app's run config for a trial of ``cfg``: the apps' shared keys, the IP keys,
    the strategy and its settings (params.yaml continual), λ = continual.lambda; ``rounds`` = the
    IP rounds per context (esnfed_flower.run.phase)."""
    cs = settings.continual
    rc = flower.run_config(cfg, seeds, data, settings, cs.lam, app, secagg)
    rc.update(flower.ip_run_config(cfg, seeds, settings))
    m = Method.parse(app)
    rc.update({"n-contexts": data.n_contexts, "strategy": m.strategy,
               "budget": int(cfg.get("budget", 0)), "rounds": int(cfg.get("budget", 0)),  # joint: none
               "replay-fraction": float(cs.replay_fraction), "replay-batch": int(cs.replay_batch),
               "replay-shuffle": bool(cs.replay_shuffle), "replay-policy": str(cs.replay_policy)})
    if m.stops_early:  # joint: the validation users' nodes and the early stopping
        rc.update({"num-eval-clients": len(data.validation), "patience": cs.joint_patience,
                   "max-joint-rounds": cs.joint_max_rounds})  # None: no cap (the app's default)
    return rc


def _stream(reservoirs: list, readouts: list, test: list, batch_size: int) -> list[float]:
    """Stream accuracy on the test users after each context (as esnfed_stages.experiment.assess)."""
    correct, total = context_matrix(reservoirs, readouts, test, batch_size)
    return [float(a) for a in metrics.stream_accuracy(correct, total)]


def _joint(contexts: Mapping[str, np.ndarray]) -> dict[str, Any]:
    """Joint's rounds: kept per context (ip_rounds), run per context, every round's validation
    accuracy split by context (joint_trace) and whether continual.joint.max_rounds ended each
    context (joint_capped); nothing for naive and replay."""
    if "rounds" not in contexts:
        return {}
    run = [int(r) for r in contexts["rounds"]]
    ends = np.cumsum(run)[:-1]
    return {"ip_rounds": [int(r) for r in contexts["ip_rounds"]], "rounds": run,
            "joint_trace": [[float(a) for a in tr] for tr in np.split(contexts["trace"], ends)],
            "joint_capped": [bool(c) for c in contexts["capped"]]}


def _relative(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def run(dataset: str, app: str, secagg: bool, pct: str, params: Mapping[str, Any], *,
        data_dir: Path = Path("data"), runs_dir: Path = Path("runs"), out_dir: Path = flower.MANUAL_DIR,
        python: Path | None = None, timeout_s: float = 1800.0,
        progress: flower.Progress | None = None) -> dict[str, Any]:
    """Compute and write <out_dir>/<dataset>-<app>[-secagg]-<pct>.json; returns its document.
    ``progress(done, 2)``: after the pipeline's fit and after the simulation."""
    python = flower.flower_python() if python is None else python
    flower.check_args([(app, secagg)], pct, python)
    if app not in flower.FEDCLIP_APPS:
        raise ConfigError(f"esnfed flower: {app} runs through esnfed_stages.studies.flower.run")
    exp, data, test, cfg, seed = flower.trial_inputs(dataset, app, pct, params, data_dir, runs_dir, secagg)
    seeds = sub_seeds(seed)
    total = flower.progress_steps([(app, secagg)])
    if progress:
        progress(0, total)
    model = fit(Method.parse(app), cfg, seed, data, exp.settings, score=False)  # as the retrain stage
    if progress:
        progress(1, total)
    rc = run_config(cfg, seeds, data, exp.settings, app, secagg)
    with tempfile.TemporaryDirectory(prefix="esnfed-flower-") as tmp:
        got = flower.simulate(Path(python), [rc], data, Path(tmp), timeout_s)[0]
    if progress:
        progress(total, total)
    gains, biases, readouts = (got["contexts"][k] for k in ("gain", "bias", "readout"))
    base = make_reservoir(cfg, data.n_inputs, seeds["reservoir"])
    bs = exp.settings.batch_size
    flower_stream = _stream([base.with_ip(g, b) for g, b in zip(gains, biases)], list(readouts), test, bs)
    pipeline_stream = _stream(model.context_reservoirs(), list(model.context_readout), test, bs)
    diffs = [_relative(w, want) for w, want in zip(readouts, model.context_readout)]
    ip_diff = float(max(np.max(np.abs(gains - model.context_gain)), np.max(np.abs(biases - model.context_bias))))
    doc = {"dataset": dataset, "app": app, "secagg": secagg, "pct": pct, "seed": seed, "config": cfg,
           "lambda": float(model.lam), "n_clients": len(data.train), "n_classes": data.n_classes,
           "n_contexts": data.n_contexts, **flower.fraction_record(rc), "version": __version__,
           provenance.KEY: provenance.record({"budget": exp.budget}),
           **({"readout_bias": True} if exp.settings.readout_bias else {}),  # readout.bias: N+1 columns
           "flower": {"test_accuracy": flower_stream[-1], "stream_accuracy": flower_stream,
                      "readout_relative_difference": max(diffs), "context_readout_relative_difference": diffs,
                      "ip_max_abs_difference": ip_diff, "bytes": got["bytes"], **_joint(got["contexts"]),
                      **({"secagg": got["secagg"]} if "secagg" in got else {})},
           "pipeline": {"test_accuracy": pipeline_stream[-1], "stream_accuracy": pipeline_stream,
                        "ip_rounds": model.ip_rounds, "communication": model.communication,
                        **({} if model.joint_capped is None else {"joint_capped": model.joint_capped})}}
    out = Path(out_dir) / out_name(dataset, app, secagg, pct, fraction=doc.get("client_fraction"))
    with output_lock(out):
        write_json(out, doc)
    return doc
