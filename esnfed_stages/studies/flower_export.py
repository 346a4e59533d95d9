"""`esnfed flower-export`: what `flwr run` needs to run one Flower app (esnfed_flower/app, the app
project) on a share's selected config, outside this pipeline: per training user (one SuperNode
each) its data file and its ``--node-config`` line, the app's run config, and the pipeline's
result of the same config and seed to compare with -> <out>/:

    clients/client-<i>.npz   the i-th training user's windows x, labels y and contexts
    node-config.txt          line i: flower-supernode's --node-config for client i (its file only)
    run-config.toml          `flwr run esnfed_flower/app -c <out>/run-config.toml` (paths absolute)
    expected.json            the pipeline's λ, test accuracy and what the readout is compared with
    pipeline-readout.npy     the pipeline trial's readout (FedIP: pipeline-ip.npz, its (g, b);
                             FedCLIP naive, replay: pipeline-contexts.npz, each context's)

The run config is esnfed_stages.studies.flower's (the one `esnfed flower` hands the in-process
simulation; FedCLIP's: esnfed_stages.studies.flower_fedclip's), with ``out`` = <out>/flower-readout.npy, where the ServerApp writes its readout.
The whole folder is written under a temporary name and renamed: a failed export leaves an
earlier one untouched."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from esnfed_core.errors import ConfigError
from esnfed_core.method import Method
from esnfed_core.quote import quote
from esnfed_core.scoring import pooled_counts
from esnfed_core.trial import fit, sub_seeds
from esnfed_core.vocabulary import PCTS
from esnfed_stages._io import atomic_path
from esnfed_stages.studies.flower import app_config, ip_then_readout, run_config, share_inputs
from esnfed_stages.studies.flower_fedclip import run_config as fedclip_run_config
from esnfed_stages.layout import FEDCLIP_APPS, FLOWER_APPS, SECAGG_APPS

# FedCLIP joint's evaluation nodes (the validation users) are not exported: naive and replay only.
APPS = (*FLOWER_APPS, *(a for a in FEDCLIP_APPS if not Method.parse(a).stops_early))

READOUT = "flower-readout.npy"  # where the ServerApp writes (run config ``out``)


def toml_value(key: str, value: Any) -> str:
    """``value`` as a TOML value (the run config's scalars); a ConfigError naming ``key`` otherwise."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float) and math.isfinite(value):
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)  # a TOML basic string: JSON's escapes are TOML's
    raise ConfigError(f"run config {key}: {quote(value)} is not a Flower run-config value (bool, int, float, str)")


def node_config_line(i: int, n: int, data_file: Path) -> str:
    """flower-supernode's --node-config for client ``i`` of ``n``: its partition id (the server's
    order) and its own data file (esnfed_flower.common.partition_file)."""
    return f'partition-id={i} num-partitions={n} data-file={json.dumps(str(data_file))}'


def check_export(app: str, secagg: bool, pct: str) -> None:
    """One line naming the option when the app, --secagg or the share is not one export writes."""
    if app not in APPS:
        raise ConfigError(f"esnfed flower-export: --app must be one of {', '.join(APPS)}, got {quote(app)}")
    if secagg and app not in SECAGG_APPS:
        raise ConfigError(f"esnfed flower-export: --secagg is for {', '.join(SECAGG_APPS)}, not {app}")
    if pct not in PCTS:
        raise ConfigError(f"esnfed flower-export: --pct must be one of {', '.join(PCTS)}, got {quote(pct)}")


def export(dataset: str, app: str, secagg: bool, pct: str, params: Mapping[str, Any], out: Path, *,
           data_dir: Path = Path("data"), runs_dir: Path = Path("runs")) -> dict[str, Any]:
    """Fit the pipeline's trial of the selected config (the retrain stage's first seed, as
    `esnfed flower`), then write <out>/ (module docstring); returns expected.json's document."""
    check_export(app, secagg, pct)
    exp, data, test, seed = share_inputs(dataset, pct, params, data_dir, [(app, secagg)])
    cfg = app_config(runs_dir, dataset, app, pct, exp.budget_spec)
    continual = app in FEDCLIP_APPS
    ip = ip_then_readout(app)  # FedIP: its final (g, b) beside the readout
    model = fit(Method.parse(app), cfg, seed, data, exp.settings, score=not continual)
    # the readout after the last context (FedCLIP: the stream's model; its contexts' in pipeline-contexts.npz)
    accuracy = float(pooled_counts(model.reservoir, test, model.readout, exp.settings.batch_size).accuracy[0])
    final = Path(out).resolve()
    rc = (fedclip_run_config(cfg, sub_seeds(seed), data, exp.settings, app, secagg) if continual else
          run_config(cfg, sub_seeds(seed), data, exp.settings, float(model.lam), app, secagg))
    rc = {**rc, "data-dir": str(final / "clients"), "out": str(final / READOUT)}
    lines = [f"{k} = {toml_value(k, v)}" for k, v in rc.items()]
    n = len(data.train)
    expected = {"dataset": dataset, "app": app, "secagg": secagg, "pct": pct, "seed": seed, "config": cfg,
                "lambda": float(model.lam), "num-clients": n, "pipeline_test_accuracy": accuracy,
                "pipeline_readout": "pipeline-readout.npy", "flower_readout": READOUT,
                **({"pipeline_ip": "pipeline-ip.npz"} if ip else {}),
                **({"pipeline_contexts": "pipeline-contexts.npz"} if continual else {})}
    with atomic_path(final) as tmp:
        (tmp / "clients").mkdir(parents=True)
        for i, u in enumerate(data.train.values()):
            np.savez(tmp / "clients" / f"client-{i}.npz", x=np.asarray(u.x), y=np.asarray(u.y),
                     context=np.asarray(u.context))
        (tmp / "node-config.txt").write_text(
            "".join(node_config_line(i, n, final / "clients" / f"client-{i}.npz") + "\n" for i in range(n)))
        (tmp / "run-config.toml").write_text("\n".join(lines) + "\n")
        np.save(tmp / "pipeline-readout.npy", np.asarray(model.readout))
        if ip:
            np.savez(tmp / "pipeline-ip.npz", gain=model.reservoir.gain, bias=model.reservoir.bias)
        if continual:  # per context its (g, b) and readout, as the app's <out>.contexts.npz
            np.savez(tmp / "pipeline-contexts.npz", gain=np.asarray(model.context_gain),
                     bias=np.asarray(model.context_bias), readout=np.asarray(model.context_readout))
        (tmp / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")
    return expected
