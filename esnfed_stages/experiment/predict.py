"""`esnfed predict`: a model saved by `esnfed retrain` (models.py) applied to a processed folder
(docs/data-contract.md: what `esnfed preprocess` and `esnfed import` write) -> a CSV of per-window
predictions with class names and, on request, one of per-step predictions.

The folder must describe its data as the data the model was trained on does: the model's .json
names its dataset, whose manifest (``<data-dir>/processed/<dataset>/manifest.json``) gives the
feature names, window length and classes the folder's manifest must repeat. A continual model is
applied as it was after its last context (the model assess scores) unless ``context`` names
another. Of the heterogeneous models (a reservoir per client), the ensemble combines its clients
as assess does (the model's heterogeneity.combine); local and align apply the one client
``client`` names (assess's accuracy of them is the clients' pooled). Predictions are the argmax of the readout at every step, computed as assess computes them,
so the share of steps predicted right equals assess's accuracy on the same users. A folder imported
without labels (`esnfed import --unlabelled`: ``labelled: false``, no classes) is predicted all the
same, its label and correct_steps cells left empty.
"""

from __future__ import annotations

import contextlib
import csv
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from esnfed_core.errors import ConfigError, DataError
from esnfed_core.heterogeneous import ensemble_step_predictions
from esnfed_core.method import Method
from esnfed_core.quote import quote
from esnfed_core.scoring import step_predictions
from esnfed_stages._io import atomic_path
from esnfed_core.data.processed import MANIFEST
from esnfed_stages.data.check_data import checked_manifest
from esnfed_stages.layout import PROCESSED_DIR
from esnfed_stages.experiment.models import load_model
from esnfed_stages.experiment.trial_data import Dataset

_MODEL_NAME = re.compile(r"^seed-(\d+)\.(json|npz)$")
# The manifest fields a folder must share with the data the model was trained on.
_SAME = ("feature_names", "window", "classes")
WINDOW_COLUMNS = ("user", "window", "context", "steps", "label", "predicted", "correct_steps")
STEP_COLUMNS = ("user", "window", "step", "label", "predicted")


@dataclass(frozen=True)
class PredictSummary:
    """What predict wrote: the model, the users and their windows and steps, and how many steps
    the model predicted right (against the folder's labels; None for an unlabelled folder)."""

    model: Path
    method: str
    context: int | None
    client: int | None
    users: list[str]
    windows: int
    steps: int
    correct: int | None
    out: Path
    steps_out: Path | None

    @property
    def accuracy(self) -> float | None:
        return None if self.correct is None else self.correct / max(self.steps, 1)


def model_file(path: Path) -> tuple[Path, int]:
    """(folder, k) of a model named by its ``seed-<k>.json`` or ``seed-<k>.npz``."""
    m = _MODEL_NAME.match(Path(path).name)
    if m is None:
        raise DataError(f"{path}: not a saved model (expected runs/models/<dataset>/<method>/<pct>/seed-<k>.json "
                        "or .npz, written by `esnfed retrain`)")
    return Path(path).parent, int(m.group(1))


def check_compatible(folder_manifest: Path, manifest: Mapping[str, Any], trained_manifest: Path,
                     trained: Mapping[str, Any], js: Path, meta: Mapping[str, Any]) -> None:
    """One DataError naming the file and the field where the folder's manifest differs from that of
    the data the model was trained on, or where that data no longer fits the model (re-imported or
    preprocessed since retraining). An unlabelled folder has no classes to compare."""
    for key, value in (("n_features", meta.get("n_inputs")), ("n_classes", meta.get("n_classes"))):
        if trained.get(key) != value:
            raise DataError(f"{trained_manifest}: {key} is {quote(trained.get(key))} but model {js} was trained "
                            f"with {quote(value)} (the data changed since retraining: rerun `esnfed retrain`)")
    if manifest.get("n_features") != meta.get("n_inputs"):
        raise DataError(f"{folder_manifest}: n_features is {quote(manifest.get('n_features'))} but model {js} "
                        f"takes {quote(meta.get('n_inputs'))} input channels")
    for key in _SAME:
        if key == "classes" and manifest.get("labelled") is False:
            continue
        if manifest.get(key) != trained.get(key):
            raise DataError(f"{folder_manifest}: {key} is {quote(manifest.get(key))} but the data model {js} was "
                            f"trained on ({trained_manifest}) has {quote(trained.get(key))}")


def predictor(fitted: Any, meta: Mapping[str, Any], js: Path, context: int | None, client: int | None,
              batch_size: int) -> Callable[[np.ndarray], np.ndarray]:
    """The function windows (W, T, U) -> per-step classes (W, T) of a saved model: its one reservoir
    and readout (a continual model's after ``context``), the ensemble of its clients, or (local,
    align) the reservoir and readout of ``client``. DataError naming ``js`` for a model or an
    option that does not fit."""
    family = Method.parse(fitted.method).family
    if family.baseline:
        raise DataError(f"{js}: {fitted.method}: the random baseline has no model to apply (it draws its labels)")
    if fitted.clients is None:
        if client is not None:
            raise DataError(f"{js}: client: {fitted.method} has no model per client (local and align have)")
        try:
            res, readout = fitted.predictor(context)
        except ConfigError as exc:
            raise DataError(f"{js}: {exc}") from None
        return lambda x: step_predictions(res, readout, x, batch_size)
    if context is not None:
        raise DataError(f"{js}: context: not a continual model, it has no model per context")
    readouts = fitted.client_readouts if fitted.client_readouts is not None else [fitted.readout] * len(fitted.clients)
    if family.ensemble:
        if client is not None:
            raise DataError(f"{js}: client: the ensemble predicts with every client; local and align apply one")
        combine = (meta.get("params") or {}).get("heterogeneity.combine", "softmax")
        return lambda x: ensemble_step_predictions(fitted.clients, readouts, x, batch_size, combine)
    if client is None or not 0 <= client < len(fitted.clients):
        raise DataError(f"{js}: {fitted.method} keeps a reservoir and readout per client: give --client, one of "
                        f"0..{len(fitted.clients) - 1}" + ("" if client is None else f" (got {client})"))
    res, readout = fitted.clients[client], readouts[client]
    return lambda x: step_predictions(res, readout, x, batch_size)


def _majority(values: np.ndarray, n: int) -> np.ndarray:
    """The most frequent class of each row of ``values`` (W, T) (ties: the lowest index)."""
    counts = np.zeros((len(values), n), np.int64)
    np.add.at(counts, (np.repeat(np.arange(len(values)), values.shape[1]), values.reshape(-1)), 1)
    return counts.argmax(axis=1)


def run(
    model: Path,
    folder: Path,
    out: Path,
    *,
    users: Sequence[str] | None = None,
    context: int | None = None,
    client: int | None = None,
    steps_out: Path | None = None,
    data_dir: Path = PROCESSED_DIR.parent,
    batch_size: int = 256,
) -> PredictSummary:
    """Apply the saved ``model`` (its seed-<k>.json or .npz) to the windows of ``users`` (default:
    every user of the folder's manifest, in its order) of the processed ``folder``; write ``out``
    (WINDOW_COLUMNS) and, given ``steps_out``, the per-step CSV (STEP_COLUMNS). ``data_dir``: the
    data root whose processed/<dataset>/ the model was trained on; ``client``: the client of a
    local or align model to apply (see :func:`predictor`). Both files are written under a
    temporary name and renamed only when complete; nothing is written on an error."""
    if steps_out is not None and Path(steps_out).absolute() == Path(out).absolute():
        raise DataError(f"{out}: the per-window and the per-step predictions need two files")
    directory, k = model_file(model)
    fitted, meta = load_model(directory, k)
    js = directory / f"seed-{k}.json"
    predict = predictor(fitted, meta, js, context, client, batch_size)
    if not isinstance(meta.get("dataset"), str):
        raise DataError(f"{js}: dataset: expected the name of the dataset the model was trained on, got "
                        f"{quote(meta.get('dataset'))}")
    trained_dir = Path(data_dir) / "processed" / meta["dataset"]
    trained = checked_manifest(trained_dir)
    manifest = checked_manifest(folder, unlabelled=True)
    labelled = manifest.get("labelled") is not False
    folder_manifest = Path(folder) / MANIFEST
    if meta.get("n_inputs") is None and fitted.clients:  # local, ensemble: no target reservoir, the clients' inputs
        meta = {**meta, "n_inputs": fitted.clients[0].n_inputs}
    check_compatible(folder_manifest, manifest, trained_dir / MANIFEST, trained, js, meta)
    chosen = list(manifest["users"]) if users is None else list(users)
    unknown = [u for u in chosen if u not in manifest["users"]]
    if unknown:
        raise DataError(f"{folder_manifest}: users: no user {quote(unknown[0])} (the folder has "
                        f"{', '.join(list(manifest['users'])[:5])}{', ...' if len(manifest['users']) > 5 else ''})")
    data = Dataset(str(manifest["dataset"]), Path(folder), manifest, {}).load(chosen)
    classes, contexts = list(trained["classes"]), list(manifest["context_names"])  # the folder's, when labelled
    windows = steps = correct = 0
    with atomic_path(out) as tmp, _steps_file(steps_out) as steps_tmp:
        with open(tmp, "w", newline="", encoding="utf-8") as f, _open(steps_tmp) as g:
            per_window = csv.writer(f)
            per_window.writerow(WINDOW_COLUMNS)
            per_step = csv.writer(g) if g is not None else None
            if per_step is not None:
                per_step.writerow(STEP_COLUMNS)
            for user, u in data.items():
                if not u.windows:
                    continue
                pred = predict(u.x)
                y = np.asarray(u.y, np.int64)
                hits = (pred == y).sum(axis=1)
                label, predicted = _majority(y, len(classes)), _majority(pred, len(classes))
                for w in range(len(pred)):
                    per_window.writerow((user, w, contexts[int(u.context[w])], pred.shape[1],
                                         classes[label[w]] if labelled else "", classes[predicted[w]],
                                         int(hits[w]) if labelled else ""))
                    if per_step is not None:
                        per_step.writerows((user, w, t, classes[y[w, t]] if labelled else "", classes[pred[w, t]])
                                           for t in range(pred.shape[1]))
                windows += len(pred)
                steps += pred.size
                correct += int(hits.sum())
    return PredictSummary(Path(model), fitted.method, None if fitted.context_gain is None else
                          (len(fitted.context_gain) - 1 if context is None else context), client,
                          chosen, windows, steps, correct if labelled else None, Path(out), steps_out)


def _steps_file(path: Path | None):
    """The per-step file's temporary path (atomic_path), or None when none is asked for."""
    return contextlib.nullcontext() if path is None else atomic_path(path)


def _open(tmp: Path | None):
    return contextlib.nullcontext() if tmp is None else open(tmp, "w", newline="", encoding="utf-8")
