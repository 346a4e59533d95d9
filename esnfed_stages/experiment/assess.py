"""Stage `assess`: every retrained model of one dataset and method scored on the test users (and
on its training users for the IncFed tables) -> runs/assess/<dataset>/<method>.json.

Every number is computed here from the saved models (models.py) and the processed data, nothing
is carried over from training except the message counts. The layout is fixed by
docs/assess-contract.md. Continual methods: the model after each context is evaluated on every
context of the test users (accuracy matrix), stream accuracy follows, and the test accuracy is the
stream accuracy after the last context. Activation densities (IP methods, datasets listed in
``assess.activation_datasets``; the papers' Fig. 3 and 5) are computed for every retrain, on each
test user and context: ``activation`` = {edges, users, models ("final": the trained reservoir;
"after_each_context": a continual model after each context), density [retrain][model][context]
[bin] pooled over the test users, user_density [retrain][model][user][context][bin], and the fit to
the IP target: target {mu, sigma}, kl and unit_kl [retrain][model] (every unit's states together,
and per unit averaged; every test user and context), no_ip_kl and no_ip_unit_kl [retrain] of the
same reservoir without IP (g = 1, b = 0)}.
Stationary ESN methods also list each retrain's ridge λ (``lambda``: chosen on validation users
for each retrain by default, see retrain.py). Heterogeneous methods (local, ensemble, align-α;
docs/heterogeneous.md) list only the shares of heterogeneity.pcts for the budget; their
``test_accuracy`` is the ensemble's accuracy (ensemble) or the mean over clients (local, align: each
client through its own reservoir), and ``client_test_accuracy`` [retrain][client] each client's own;
their document records the heterogeneity settings used (``params``; the report refuses other ones).
On runner.device torch-cpu | cuda a share's retrains are scored together (esnfed_core.accel.scores:
accuracies, accuracy matrices and activation densities), equal to the numpy path within float32
rounding; heterogeneous and deep methods and the random baseline are scored on the numpy path.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Callable

import numpy as np

from esnfed_core import metrics
from esnfed_core.accel import check_supported, require_torch
from esnfed_core.errors import DataError
from esnfed_core.heterogeneity import heterogeneity_of
from esnfed_core.heterogeneous import assess_scores
from esnfed_core.method import Method
from esnfed_core.scoring import accuracy, activation_densities, context_matrix, random_accuracy
from esnfed_core.trial import FittedModel
from esnfed_core.quote import quote
from esnfed_stages._io import output_lock, read_json, write_json
from esnfed_core.vocabulary import PCTS
from esnfed_stages.experiment import heterogeneity
from esnfed_stages import provenance
from esnfed_stages.params.experiment import ExperimentParams
from esnfed_stages.layout import assess_dir, assess_path, model_dir
from esnfed_stages.experiment.models import load_model, model_paths
from esnfed_stages.experiment.trial_data import Dataset, open_dataset

# Methods whose training-user accuracy the IncFed tables (ijcnn-*) print.
TRAIN_SCORED = ("random", "ridge", "incfed", "fedavg")
Progress = Callable[[int, int], None]


def _floats(values: Any) -> Any:
    """Nested lists of Python floats, NaN (a context without data) as null."""
    if isinstance(values, (list, tuple, np.ndarray)):
        return [_floats(v) for v in values]
    v = float(values)
    return None if math.isnan(v) else v


def _batched(method: Method, models: list[FittedModel], test, train, device: str) -> list[dict[str, Any]]:
    """The scores of every retrain at once on the torch kernels (runner.device torch-cpu | cuda):
    test (and training) accuracies of a stationary method; a continual method's accuracy matrix
    and stream, every retrain's model after each context together. Same numbers as ``_scores``
    within float32 rounding."""
    from esnfed_core.accel.scores import accuracies, context_matrices  # noqa: PLC0415 (imports torch)

    if method.continual:
        matrices = context_matrices([(m.context_reservoirs(), list(m.context_readout)) for m in models],
                                    list(test.values()), device)
        return [{"train": None, "clients": None, **_continual_scores(c, t)} for c, t in matrices]
    res, w = [m.reservoir for m in models], [m.readout for m in models]
    test_acc = accuracies(res, w, list(test.values()), device)
    train_acc = accuracies(res, w, list(train.values()), device) if method.family.train_scored else None
    return [{"test": t, "train": None if train_acc is None else train_acc[i], "stream": None, "matrix": None}
            for i, t in enumerate(test_acc)]


def _density_models(method: Method, model: FittedModel) -> list:
    """The reservoirs whose activation densities a retrain gets: a continual model's after each
    context, else the final one."""
    return model.context_reservoirs() if method.continual else [model.reservoir]


def _without_ip(model: FittedModel):
    """The model's reservoir with IP undone (g = 1, b = 0): a plain ESN on the same weights and
    leak, the reference of its fit to the IP target."""
    res = model.reservoir
    return res.with_ip(np.ones(res.units), np.zeros(res.units))


def _add_fit(activation: dict[str, Any], dens, plain) -> None:
    """One retrain's KL divergences to the IP target ``activation["target"]`` (ActivationDensities
    .target_kl): of each density model's states and of the plain reservoir's, on every test user
    and context together."""
    mu, sigma = activation["target"]["mu"], activation["target"]["sigma"]
    pooled, unit = dens.target_kl(mu, sigma)
    activation["kl"].append(_floats(pooled))
    activation["unit_kl"].append(_floats(unit))
    pooled, unit = plain.target_kl(mu, sigma)
    activation["no_ip_kl"].append(_floats(pooled[0]))
    activation["no_ip_unit_kl"].append(_floats(unit[0]))


def _continual_scores(correct: np.ndarray, total: np.ndarray) -> dict[str, Any]:
    """A continual model's scores from its context_matrix counts: the stream accuracy after each
    context, the final one as the test accuracy, and the accuracy matrix (PROTOCOL §6)."""
    stream = metrics.stream_accuracy(correct, total)
    return {"test": float(stream[-1]), "stream": _floats(stream),
            "matrix": _floats(metrics.accuracy_matrix(correct, total))}


def _scores(method: Method, model: FittedModel, test, train, batch_size: int,
            combine: str = "softmax") -> dict[str, Any]:
    out: dict[str, Any] = {"train": None, "stream": None, "matrix": None, "clients": None}
    if method.heterogeneous:
        het = assess_scores(model, list(test.values()), batch_size, combine)
        out.update(test=het["score"], clients=het["clients"])
    elif method.baseline:
        out["test"] = random_accuracy(list(test.values()), model.n_classes, model.seeds["test"])
        out["train"] = random_accuracy(list(train.values()), model.n_classes, model.seeds["train"])
    elif method.continual:
        out.update(_continual_scores(*context_matrix(model.context_reservoirs(), list(model.context_readout),
                                                     list(test.values()), batch_size)))
    else:
        out["test"] = accuracy(model.reservoir, model.readout, list(test.values()), batch_size)
        if method.family.train_scored:
            out["train"] = accuracy(model.reservoir, model.readout, list(train.values()), batch_size)
    return out


def _share(method: Method, exp: ExperimentParams, data: Dataset, test: dict, directory: Path, pct: str,
           one_done: Callable[[], None]) -> dict[str, Any]:
    """The assess entry of one training share: every retrain of ``directory`` scored."""
    batch = exp.settings.batch_size
    train = data.load(data.train_users(pct)) if method.family.train_scored else {}
    rows: dict[str, list] = {"seeds": [], "test": [], "train": [], "stream": [], "matrix": [],
                             "lambda": [], "clients": []}
    combine = heterogeneity_of(exp.settings).combine if method.heterogeneous else "softmax"
    first_meta: dict[str, Any] | None = None
    loaded = [load_model(directory, k) for k in range(exp.retrains)]
    activation = None
    if method.uses_ip and data.name in exp.activation_datasets:
        # target: the IP target N(μ, σ²) the models were trained toward (σ: the selected config's)
        activation = {"edges": None, "users": list(test),
                      "models": "after_each_context" if method.continual else "final",
                      "density": [], "user_density": [],
                      "target": {"mu": exp.settings.ip.mu, "sigma": float(loaded[0][0].config["sigma"])},
                      "kl": [], "unit_kl": [], "no_ip_kl": [], "no_ip_unit_kl": []}
    batched = exp.settings.accelerated(method)
    if batched:
        for model, _ in loaded:
            check_supported(method, model.config, exp.settings.device)
    batch_scores = (_batched(method, [m for m, _ in loaded], test, train, exp.settings.device)
                    if batched else None)
    batch_densities = batch_plain = None
    if batched and activation is not None:
        from esnfed_core.accel.scores import activation_densities as device_densities  # noqa: PLC0415

        def on_device(models: list) -> list:
            return device_densities(models, list(test.values()), data.n_contexts, exp.activation_bins,
                                    exp.settings.device)

        batch_densities = on_device([_density_models(method, m) for m, _ in loaded])
        batch_plain = on_device([[_without_ip(m)] for m, _ in loaded])
    for k, (model, meta) in enumerate(loaded):
        if first_meta is None:
            first_meta = meta
        if activation is not None:
            if batch_densities is not None:
                dens, plain = batch_densities[k], batch_plain[k]
            else:
                dens, plain = (activation_densities(models, list(test.values()), data.n_contexts,
                                                    exp.activation_bins, batch)
                               for models in (_density_models(method, model), [_without_ip(model)]))
            activation["edges"] = _floats(dens.edges)
            activation["density"].append(_floats(dens.pooled))
            activation["user_density"].append(_floats(dens.per_user))
            _add_fit(activation, dens, plain)
        s = batch_scores[k] if batch_scores is not None else _scores(method, model, test, train, batch, combine)
        rows["seeds"].append(model.seed)
        rows["lambda"].append(model.lam)
        for name in ("test", "train", "stream", "matrix", "clients"):
            rows[name].append(s.get(name))
        one_done()
    entry = {
        "seeds": rows["seeds"],
        "test_accuracy": rows["test"],
        "train_accuracy": rows["train"] if method.family.train_scored else None,
        "stream_accuracy": rows["stream"] if method.continual else None,
        "accuracy_matrix": rows["matrix"] if method.continual else None,
        "communication": first_meta.get("communication") if method.federated else None,
        "config": first_meta["config"],
        "lambda": rows["lambda"] if not method.baseline else None,
        "activation": activation,
    }
    if method.heterogeneous:
        entry["client_test_accuracy"] = rows["clients"]
    return entry


def check_retrained(runs_dir: Path, data: Dataset, method: Method, pcts: list[str], exp: ExperimentParams) -> None:
    """Before anything is scored: every share has its ``retrains`` models, else one DataError
    naming the first incomplete share's folder, its seeds missing (failed or never retrained) and
    the retrain command to run (for that share, or every share when several are incomplete). Then
    every model was retrained for what is scored now (``check_trained_for``)."""
    dataset, retrains = data.name, exp.retrains
    missing = {pct: [k for k in range(retrains)
                     if not all(p.exists() for p in model_paths(model_dir(runs_dir, dataset, method.id, pct), k))]
               for pct in pcts}
    incomplete = [pct for pct in pcts if missing[pct]]
    if not incomplete:
        check_trained_for(runs_dir, data, method, pcts, exp)
        return
    pct, seeds = incomplete[0], missing[incomplete[0]]
    directory = model_dir(runs_dir, dataset, method.id, pct)
    share = f" --pct {pct}" if len(incomplete) == 1 else ""
    command = _retrain_command(dataset, method, share)
    others = f" (also shares {', '.join(incomplete[1:])})" if len(incomplete) > 1 else ""
    failed = [f"seed-{k}.failed.json" for k in seeds if (directory / f"seed-{k}.failed.json").exists()]
    names = ", ".join(f"seed-{k}" for k in seeds[:3]) + (", ..." if len(seeds) > 3 else "")
    why = f"retrain failed ({', '.join(failed[:3])}{', ...' if len(failed) > 3 else ''}: the error is in " \
          f"the file); rerun {command}" if failed else f"run {command} first"
    raise DataError(f"{directory}: {len(seeds)} of {retrains} models not found ({names}){others}: {why}")


def _retrain_command(dataset: str, method: Method, share: str) -> str:
    return f"`esnfed retrain --dataset {dataset} {method.cli_options}{share}`"


def check_trained_for(runs_dir: Path, data: Dataset, method: Method, pcts: list[str],
                      exp: ExperimentParams) -> None:
    """Every model's .json says it was retrained for what assess scores now: the same dataset and
    method, under params.yaml's budget as it is now (``params_budget`` and ``params_budget_digest``,
    experiment_params.BudgetSpec.check; a model written before they were recorded is trusted), with
    params.yaml's heterogeneity settings (a heterogeneous method's ``params``, heterogeneity.record;
    likewise trusted without them) and on the share's training users as the partition lists them
    now; else one DataError naming the .json, what differs and the retrain command to run. The
    assess file records params.yaml's budget and settings, so a model of another budget, or of the
    same one edited since, or of other settings, would be scored under a wrong label."""
    for pct in pcts:
        directory = model_dir(runs_dir, data.name, method.id, pct)
        command = _retrain_command(data.name, method, f" --pct {pct}")
        users = data.train_users(pct)
        for k in range(exp.retrains):
            js = model_paths(directory, k)[1]
            meta = read_json(js)
            if not isinstance(meta, dict):
                raise DataError(f"{js}: expected a JSON object, got {type(meta).__name__}")
            for key, expected in (("dataset", data.name), ("method", method.id), ("pct", pct)):
                if key in meta and meta[key] != expected:
                    raise DataError(f"{js}: {key} is {quote(meta[key])}, expected {quote(expected)}: "
                                    f"a file of another run: rerun {command}")
            exp.budget_spec.check(js, meta, "params_budget", "retrained", data.name, method, command)
            provenance.check(js, meta, heterogeneity.record(exp, method), command, verb="retrained")
            if "train_users" in meta and meta["train_users"] != users:
                raise DataError(f"{js}: trained on users {quote(meta['train_users'])} but share {pct} of "
                                f"the partition now has {quote(users)}: rerun {command}")


def run(
    dataset: str,
    method: Method,
    exp: ExperimentParams,
    *,
    data_dir: Path = Path("data"),
    runs_dir: Path = Path("runs"),
    progress: Progress | None = None,
    device: str | None = None,
) -> dict[str, Any]:
    """Assess every share and write the JSON; returns the document written. ``exp``: params.yaml's
    experiment sections, parsed once (``experiment_params``). ``device`` (default runner.device)
    torch-cpu | cuda scores every retrain of a share at once on torch (continual methods too)."""
    exp = exp.on_device(device or exp.runner.device)
    if exp.settings.accelerated(method):
        require_torch(exp.settings.device)
    data = open_dataset(data_dir, dataset, exp.processed.get(dataset))
    pcts = heterogeneity.shares(exp, method, list(PCTS))  # heterogeneous methods: the budget's shares
    exp = heterogeneity.settings_for(exp, method, dataset)
    check_retrained(runs_dir, data, method, pcts, exp)
    test = data.load(data.test_users)
    total = len(pcts) * exp.retrains
    done = [0]
    if progress:
        progress(0, total)

    def one_done() -> None:
        done[0] += 1
        if progress:
            progress(done[0], total)

    shares = {pct: _share(method, exp, data, test, model_dir(runs_dir, dataset, method.id, pct), pct, one_done)
              for pct in pcts}
    doc = {
        "dataset": dataset, "method": method.id, "algo": method.algo, "strategy": method.strategy,
        **({"alpha": method.alpha} if method.family.takes_alpha else {}),
        **exp.budget_spec.labels("budget", dataset, method, assessed=True),
        "source": data.manifest.get("source"), "pcts": shares,
        **heterogeneity.labels(exp, method),
    }
    path = assess_path(assess_dir(runs_dir), dataset, method.id)
    with output_lock(path):
        write_json(path, doc)
    return doc
