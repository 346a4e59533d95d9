"""WESAD reader and preprocessing (PROTOCOL §1): one subject's original pickle -> validated signals
-> kept labels 1-4, per-subject z-score, contexts = contiguous label runs, 1 s windows."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

import numpy as np

from esnfed_core.data import safe_pickle
from esnfed_core.data.paths import check_input
from esnfed_core.data.processed import USER_NAME_HINT, UserData, is_user_name
from esnfed_core.errors import DataError
from esnfed_core.quote import quote
from esnfed_core.validation import ParameterError, check_param

DIRNAME = "WESAD"
SUBJECTS = tuple(f"S{k}" for k in range(2, 18) if k != 12)
LABEL_RATE = 700  # Hz: labels and every chest channel
KEPT_LABELS = (1, 2, 3, 4)  # baseline, stress, amusement, meditation -> classes 0..3
CLASSES = ("baseline", "stress", "amusement", "meditation")
CHEST_KEYS = {"ACC": 3, "ECG": 1, "EMG": 1, "EDA": 1, "Temp": 1, "Resp": 1}  # key -> columns
# The papers' input order: (key, column, feature name).
CHEST_FEATURES = (("ACC", 0, "ACC_x"), ("ACC", 1, "ACC_y"), ("ACC", 2, "ACC_z"), ("Resp", 0, "Resp"),
                  ("EDA", 0, "EDA"), ("ECG", 0, "ECG"), ("EMG", 0, "EMG"), ("Temp", 0, "Temp"))
WRIST_RATES = {"ACC": 32, "BVP": 64, "EDA": 4, "TEMP": 4}  # Hz
WRIST_KEYS = {"ACC": 3, "BVP": 1, "EDA": 1, "TEMP": 1}
WRIST_FEATURES = (("ACC", 0, "ACC_x"), ("ACC", 1, "ACC_y"), ("ACC", 2, "ACC_z"), ("BVP", 0, "BVP"),
                  ("EDA", 0, "EDA"), ("TEMP", 0, "TEMP"))
WRIST_TOLERANCE_S = 1.0  # real wrist streams match the label duration to within 0.25 s
MODALITIES = ("chest", "wrist")

DEFAULT_PARAMS: dict[str, Any] = {
    "modality": "chest", "window": 700, "wrist_rate": 32, "contexts": 5, "subjects": list(SUBJECTS),
}


# ---------------------------------------------------------------- parameters and paths

def check_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """Fill defaults and validate; errors name the params.yaml key."""
    unknown = set(params) - set(DEFAULT_PARAMS)
    if unknown:
        raise ParameterError(f"preprocess.wesad.{sorted(unknown)[0]}: unknown key "
                             f"(expected one of {', '.join(sorted(DEFAULT_PARAMS))})")
    p = {**DEFAULT_PARAMS, **params}
    if p["modality"] not in MODALITIES:
        raise ParameterError(f"preprocess.wesad.modality: expected one of {', '.join(MODALITIES)}, "
                             f"got {quote(p['modality'])}")
    check_param("preprocess.wesad.window", p["window"], integer=True, low=1)
    check_param("preprocess.wesad.wrist_rate", p["wrist_rate"], low=0, low_open=True, high=LABEL_RATE)
    check_param("preprocess.wesad.contexts", p["contexts"], integer=True, low=1, high=127)
    subjects = p["subjects"]
    if not isinstance(subjects, list) or not subjects or not all(isinstance(s, str) for s in subjects):
        raise ParameterError(f"preprocess.wesad.subjects: expected a non-empty list of names, got {quote(subjects)}")
    for s in subjects:
        if not is_user_name("wesad", s):
            raise ParameterError(f"preprocess.wesad.subjects: {quote(s)} is not a subject name "
                                 f"({USER_NAME_HINT['wesad']})")
    if len(set(subjects)) != len(subjects):
        twice = next(s for s in subjects if subjects.count(s) > 1)
        raise ParameterError(f"preprocess.wesad.subjects: lists {quote(twice)} twice")
    return p


def describe(params: Mapping[str, Any]) -> dict[str, Any]:
    """Dataset-level facts of the processed output for the manifest."""
    p = check_params(params)
    features = CHEST_FEATURES if p["modality"] == "chest" else WRIST_FEATURES
    return {
        "window": p["window"],
        "feature_names": [f[2] for f in features],
        "classes": list(CLASSES),
        "context_names": [f"run{i}" for i in range(p["contexts"])],
        "rate": LABEL_RATE if p["modality"] == "chest" else p["wrist_rate"],
    }


def dataset_dir(raw_root: str | Path) -> Path:
    """``<raw_root>/WESAD``, or ``raw_root`` itself when it is the WESAD folder."""
    raw_root = Path(raw_root)
    if (raw_root / DIRNAME).is_dir():
        return raw_root / DIRNAME
    if raw_root.name == DIRNAME and raw_root.is_dir():
        return raw_root
    raise DataError(f"{raw_root / DIRNAME}: WESAD folder not found")


def subject_path(raw_root: str | Path, subject: str) -> Path:
    """``.../WESAD/S<k>/S<k>.pkl``; a missing folder or file is a DataError naming it. ``subject``
    must be a subject name (``S<digits>``): no path outside the WESAD folder is built."""
    if not is_user_name("wesad", subject):
        raise DataError(f"{raw_root}: {quote(subject)} is not a WESAD subject name ({USER_NAME_HINT['wesad']})")
    folder = check_input(dataset_dir(raw_root) / subject, "subject folder not found", folder=True)
    return check_input(folder / f"{subject}.pkl")


# ---------------------------------------------------------------- reading and validation

@dataclass(frozen=True, eq=False)
class Subject:
    """One validated WESAD recording: the arrays of the requested modality plus the labels."""

    subject: str
    label: np.ndarray  # (N,) integer, 700 Hz
    chest: dict[str, np.ndarray] | None  # key -> (N, k)
    wrist: dict[str, np.ndarray] | None  # key -> (n_key, k)


def _get(mapping: Any, key: str, where: str, path: Path) -> Any:
    if not isinstance(mapping, dict):
        raise DataError(f"{path}: {where or 'top level'} is a {type(mapping).__name__}, expected a dict")
    if key not in mapping:
        raise DataError(f"{path}: missing key '{(where + '/' if where else '') + key}'")
    return mapping[key]


def _as_columns(arr: Any, name: str, cols: int, path: Path, kind: str = "f") -> np.ndarray:
    """Check an array is numeric of ``kind`` and shaped (n, cols) (or (n,) when cols == 1)."""
    if not isinstance(arr, np.ndarray):
        raise DataError(f"{path}: {name} is a {type(arr).__name__}, expected a numpy array")
    ok_kind = arr.dtype.kind in ("f",) if kind == "f" else arr.dtype.kind in ("i", "u")
    if not ok_kind:
        expected = "a float array" if kind == "f" else "an integer array"
        raise DataError(f"{path}: {name} has dtype {arr.dtype}, expected {expected}")
    if cols == 1 and arr.ndim == 1:
        arr = arr[:, None]
    if arr.ndim != 2 or arr.shape[1] != cols:
        raise DataError(f"{path}: {name} has shape {arr.shape}, expected (N, {cols})")
    return arr


def _check_finite(arr: np.ndarray, name: str, path: Path) -> None:
    finite = np.isfinite(arr)
    if not finite.all():
        bad = arr.size - int(np.count_nonzero(finite))
        raise DataError(f"{path}: {name} holds {bad} NaN or infinite value(s)")


def read_subject(path: str | Path, subject: str | None = None, modality: str = "chest") -> Subject:
    """Load one ``S<k>.pkl`` with the restricted unpickler and validate what ``modality`` needs."""
    path = Path(path)
    obj = safe_pickle.load_path(path)
    signal = _get(obj, "signal", "", path)
    label = _get(obj, "label", "", path)
    name = _get(obj, "subject", "", path)
    if isinstance(name, bytes):
        name = name.decode("latin1")
    expected = subject if subject is not None else path.stem
    if name != expected:
        raise DataError(f"{path}: subject is {quote(name)}, expected {quote(expected)}")
    label = _as_columns(label, "label", 1, path, kind="i")[:, 0]
    n = label.shape[0]
    if n == 0:
        raise DataError(f"{path}: label is empty")
    chest = wrist = None
    if modality == "chest":
        group = _get(signal, "chest", "signal", path)
        chest = {}
        for key, cols in CHEST_KEYS.items():
            arr = _as_columns(_get(group, key, "signal/chest", path), f"signal/chest/{key}", cols, path)
            if arr.shape[0] != n:
                raise DataError(f"{path}: signal/chest/{key} has {arr.shape[0]} rows but label has {n}")
            _check_finite(arr, f"signal/chest/{key}", path)
            chest[key] = arr
    else:
        group = _get(signal, "wrist", "signal", path)
        wrist = {}
        duration = n / LABEL_RATE
        for key, cols in WRIST_KEYS.items():
            arr = _as_columns(_get(group, key, "signal/wrist", path), f"signal/wrist/{key}", cols, path)
            covers = arr.shape[0] / WRIST_RATES[key]
            if abs(covers - duration) > WRIST_TOLERANCE_S:
                raise DataError(f"{path}: signal/wrist/{key} covers {covers:.2f} s at {WRIST_RATES[key]} Hz "
                                f"but label covers {duration:.2f} s")
            _check_finite(arr, f"signal/wrist/{key}", path)
            wrist[key] = arr
    return Subject(str(name), label, chest, wrist)


# ---------------------------------------------------------------- preprocessing

def kept_rows(subject: Subject, modality: str, wrist_rate: float = 32) -> tuple[np.ndarray, np.ndarray]:
    """Rows with labels 1-4 in time order: (features float64 (n, F), classes int8 (n,))."""
    if modality == "chest":
        mask = np.isin(subject.label, KEPT_LABELS)
        x = np.empty((int(np.count_nonzero(mask)), len(CHEST_FEATURES)), dtype=np.float64)
        for j, (key, col, _) in enumerate(CHEST_FEATURES):
            x[:, j] = subject.chest[key][mask, col]
        return x, (subject.label[mask] - 1).astype(np.int8)
    # Wrist: resample every stream linearly onto one grid t_k = k / rate over the common span;
    # the label of t_k is the 700 Hz label sample at or before it.
    spans = [subject.label.shape[0] / LABEL_RATE]
    spans += [a.shape[0] / WRIST_RATES[k] for k, a in subject.wrist.items()]
    t = np.arange(int(np.floor(min(spans) * wrist_rate + 1e-9))) / wrist_rate
    label = subject.label[np.minimum((t * LABEL_RATE + 1e-9).astype(np.int64), subject.label.shape[0] - 1)]
    mask = np.isin(label, KEPT_LABELS)
    x = np.empty((int(np.count_nonzero(mask)), len(WRIST_FEATURES)), dtype=np.float64)
    for j, (key, col, _) in enumerate(WRIST_FEATURES):
        src = subject.wrist[key][:, col]
        x[:, j] = np.interp(t[mask], np.arange(src.shape[0]) / WRIST_RATES[key], src)
    return x, (label[mask] - 1).astype(np.int8)


def label_runs(classes: np.ndarray) -> list[tuple[int, int, int]]:
    """Contiguous runs of equal class: [(start, stop, class), ...] in time order."""
    if classes.size == 0:
        return []
    cut = np.flatnonzero(np.diff(classes) != 0) + 1
    starts = np.concatenate([[0], cut])
    stops = np.concatenate([cut, [classes.size]])
    return [(int(a), int(b), int(classes[a])) for a, b in zip(starts, stops)]


def zscore(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-column z-score with the population std; a constant column is only centred."""
    mean = x.mean(axis=0)
    std = x.std(axis=0)  # ddof=0: population std, as PROTOCOL §1
    safe = np.where(std > 0, std, 1.0)
    return ((x - mean) / safe).astype(np.float32), mean, std


def make_windows(x: np.ndarray, classes: np.ndarray, window: int) -> tuple[UserData, list[tuple[int, int, int]]]:
    """Z-score ``x`` over all rows, then cut non-overlapping windows inside each label run
    (tail of each run dropped); the i-th run is context i. Returns the windows and the runs."""
    runs = label_runs(classes)
    z, _, _ = zscore(x)
    starts = [a + window * np.arange((b - a) // window) for a, b, _ in runs]
    ctx = np.concatenate([np.full(s.size, i, dtype=np.int8) for i, s in enumerate(starts)]) if runs \
        else np.zeros(0, np.int8)
    first = np.concatenate(starts).astype(np.int64) if runs else np.zeros(0, np.int64)
    idx = first[:, None] + np.arange(window)[None, :]
    return UserData(z[idx], classes[idx].astype(np.int8), ctx), runs


def preprocess_subject(path: str | Path, params: Mapping[str, Any], subject: str | None = None
                       ) -> tuple[UserData, dict[str, Any]]:
    """Read and preprocess one subject; every problem is a DataError naming ``path``."""
    p = check_params(params)
    path = Path(path)
    rec = read_subject(path, subject, p["modality"])
    x, classes = kept_rows(rec, p["modality"], p["wrist_rate"])
    del rec  # real recordings are large: keep only the kept rows
    if classes.size == 0:
        raise DataError(f"{path}: no rows with labels {', '.join(map(str, KEPT_LABELS))} (nothing usable)")
    data, runs = make_windows(x, classes, p["window"])
    if len(runs) != p["contexts"]:
        raise DataError(f"{path}: {len(runs)} runs of labels {', '.join(map(str, KEPT_LABELS))} after filtering, "
                        f"expected {p['contexts']} contexts (preprocess.wesad.contexts)")
    for i, (a, b, c) in enumerate(runs):
        if b - a < p["window"]:
            raise DataError(f"{path}: run {i} ({CLASSES[c]}) has {b - a} samples, fewer than one "
                            f"window of {p['window']}")
    info = {
        "sources": [path],
        "context_labels": [c for _, _, c in runs],
        "run_samples": [b - a for a, b, _ in runs],
    }
    return data, info


def preprocess_wesad(raw_root: str | Path, params: Mapping[str, Any]
                     ) -> Iterator[tuple[str, UserData, dict[str, Any]]]:
    """Yield (subject, windows, info) one subject at a time, in the order of ``params['subjects']``.

    All paths are checked before the first (slow) subject is read, so a missing file fails fast.
    """
    p = check_params(params)
    paths = [subject_path(raw_root, s) for s in p["subjects"]]
    for subject, path in zip(p["subjects"], paths):
        data, info = preprocess_subject(path, p, subject)
        yield subject, data, info
