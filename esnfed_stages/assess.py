"""Stage `assess`: every retrained model of one dataset and method scored on the test users (and
on its training users for the IncFed tables) -> runs/assess/<dataset>/<method>.json.

Every number is computed here from the saved models (models.py) and the processed data, nothing
is carried over from training except the message counts. The layout is fixed by
docs/assess-contract.md. Continual methods: the model after each context is evaluated on every
context of the test users (accuracy matrix), stream accuracy follows, and the test accuracy is the
stream accuracy after the last context. Activation densities (IP methods, datasets listed in
``assess.activation_datasets``) are those of the final reservoir of the first retrain, per context.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from esnfed_core import metrics
from esnfed_core.scoring import accuracy, activation_density, context_matrix, random_accuracy
from esnfed_core.trial import FittedModel, Method
from esnfed_stages._io import write_json
from esnfed_stages.experiment import PCTS, assess_path, experiment_params, model_dir, open_dataset
from esnfed_stages.models import load_model

# Methods whose training-user accuracy the IncFed tables (ijcnn-*) print.
TRAIN_SCORED = ("random", "ridge", "incfed", "fedavg")
Progress = Callable[[int, int], None]


def _floats(values: Any) -> Any:
    """Nested lists of Python floats, NaN (a context without data) as null."""
    if isinstance(values, (list, tuple, np.ndarray)):
        return [_floats(v) for v in values]
    v = float(values)
    return None if math.isnan(v) else v


def _scores(method: Method, model: FittedModel, test, train, batch_size: int) -> dict[str, Any]:
    out: dict[str, Any] = {"train": None, "stream": None, "matrix": None}
    if method.algo == "random":
        out["test"] = random_accuracy(list(test.values()), model.n_classes, model.seeds["test"])
        out["train"] = random_accuracy(list(train.values()), model.n_classes, model.seeds["train"])
    elif method.continual:
        correct, total = context_matrix(model.context_reservoirs(), list(model.context_readout),
                                        list(test.values()), batch_size)
        stream = metrics.stream_accuracy(correct, total)
        out.update(test=float(stream[-1]), stream=_floats(stream),
                   matrix=_floats(metrics.accuracy_matrix(correct, total)))
    else:
        out["test"] = accuracy(model.reservoir, model.readout, list(test.values()), batch_size)
        if method.algo in TRAIN_SCORED:
            out["train"] = accuracy(model.reservoir, model.readout, list(train.values()), batch_size)
    return out


def run(
    dataset: str,
    method: Method,
    params: Mapping[str, Any],
    *,
    data_dir: Path = Path("data"),
    runs_dir: Path = Path("runs"),
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Assess every share and write the JSON; returns the document written."""
    exp = experiment_params(params)
    data = open_dataset(data_dir, dataset)
    test = data.load(data.test_users)
    batch = exp.settings.batch_size
    with_activation = method.uses_ip and dataset in exp.activation_datasets
    total = len(PCTS) * exp.retrains
    done = 0
    if progress:
        progress(done, total)
    shares: dict[str, Any] = {}
    for pct in PCTS:
        directory = model_dir(runs_dir, dataset, method.id, pct)
        train = data.load(data.train_users(pct)) if method.algo in TRAIN_SCORED else {}
        rows: dict[str, list] = {"seeds": [], "test": [], "train": [], "stream": [], "matrix": []}
        first_meta: dict[str, Any] | None = None
        activation = None
        for k in range(exp.retrains):
            model, meta = load_model(directory, k)
            if first_meta is None:
                first_meta = meta
                if with_activation:
                    edges, dens = activation_density(model.reservoir, list(test.values()), data.n_contexts,
                                                     exp.activation_bins, batch)
                    activation = {"edges": _floats(edges), "density": _floats(dens)}
            s = _scores(method, model, test, train, batch)
            rows["seeds"].append(model.seed)
            for name in ("test", "train", "stream", "matrix"):
                rows[name].append(s[name])
            done += 1
            if progress:
                progress(done, total)
        shares[pct] = {
            "seeds": rows["seeds"],
            "test_accuracy": rows["test"],
            "train_accuracy": rows["train"] if method.algo in TRAIN_SCORED else None,
            "stream_accuracy": rows["stream"] if method.continual else None,
            "accuracy_matrix": rows["matrix"] if method.continual else None,
            "communication": first_meta.get("communication") if method.federated else None,
            "config": first_meta["config"],
            "activation": activation,
        }
    doc = {
        "dataset": dataset, "method": method.id, "algo": method.algo, "strategy": method.strategy,
        "budget": exp.budget, "source": data.manifest.get("source"), "pcts": shares,
    }
    write_json(assess_path(runs_dir, dataset, method.id), doc)
    return doc
