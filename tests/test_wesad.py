"""WESAD reader and preprocessing on hand-made tiny subjects: windows, contexts and z-scores against
an independent loop computation, the wrist resampling, and one clear error per kind of bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from esnfed_core.data import py2pickle, wesad
from esnfed_core.errors import DataError
from esnfed_core.validation import ParameterError

# Labels of a tiny chest recording: transients (0), a reading block (5), both meditations (4);
# the two baseline pieces are separated only by a transient, so they form ONE run after filtering.
LABELS = [0, 0] + [1] * 6 + [0] + [1] * 5 + [0, 0] + [2] * 9 + [6, 6] + [4] * 6 + [3] * 8 + [0] + [4] * 5 + [7, 0]
N = len(LABELS)
PARAMS = {"window": 4, "contexts": 5, "subjects": ["S2"]}


def chest_subject(n: int = N, labels=None, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    label = np.asarray(LABELS if labels is None else labels, dtype=np.int32)
    chest = {"ACC": rng.normal(size=(n, 3)), "ECG": rng.normal(size=(n, 1)), "EMG": rng.normal(size=(n, 1)),
             "EDA": rng.uniform(1, 3, size=(n, 1)), "Temp": rng.normal(34, 1, size=(n, 1)).astype(np.float32),
             "Resp": rng.normal(size=(n, 1))}
    return {"signal": {"chest": chest, "wrist": {}}, "label": label, "subject": "S2"}


def write(tmp_path, obj, subject="S2"):
    folder = tmp_path / "WESAD" / subject
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{subject}.pkl"
    with open(path, "wb") as f:
        py2pickle.dump(obj, f)
    return path


def reference(obj: dict, window: int):
    """Plain-loop PROTOCOL §1: keep labels 1-4, z-score per channel (population std), runs in
    time order after filtering, non-overlapping windows inside each run, tail dropped."""
    order = [("ACC", 0), ("ACC", 1), ("ACC", 2), ("Resp", 0), ("EDA", 0), ("ECG", 0), ("EMG", 0), ("Temp", 0)]
    chest, label = obj["signal"]["chest"], [int(v) for v in obj["label"]]
    kept = [i for i in range(len(label)) if label[i] in (1, 2, 3, 4)]
    cols = []
    for key, c in order:
        vals = [float(chest[key][i, c]) for i in kept]
        mean = sum(vals) / len(vals)
        std = math.sqrt(sum((v - mean) ** 2 for v in vals) / len(vals))
        cols.append([(v - mean) / std for v in vals])
    classes = [label[i] - 1 for i in kept]
    runs, start = [], 0
    for j in range(1, len(classes) + 1):
        if j == len(classes) or classes[j] != classes[start]:
            runs.append((start, j))
            start = j
    xs, ys, ctx = [], [], []
    for r, (a, b) in enumerate(runs):
        for k in range((b - a) // window):
            rows = range(a + k * window, a + (k + 1) * window)
            xs.append([[cols[f][i] for f in range(8)] for i in rows])
            ys.append([classes[i] for i in rows])
            ctx.append(r)
    return np.array(xs), np.array(ys), np.array(ctx), [classes[a] for a, _ in runs]


def test_windows_contexts_and_zscore_match_an_independent_computation(tmp_path):
    obj = chest_subject()
    path = write(tmp_path, obj)
    data, info = wesad.preprocess_subject(path, PARAMS, "S2")
    x, y, ctx, run_classes = reference(obj, 4)
    assert data.x.dtype == np.float32 and data.y.dtype == np.int8 and data.context.dtype == np.int8
    np.testing.assert_allclose(data.x, x, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(data.y, y)
    np.testing.assert_array_equal(data.context, ctx)
    # Runs: baseline (6+5 merged across the transient), stress, meditation, amusement, meditation.
    assert info["context_labels"] == run_classes == [0, 1, 3, 2, 3]
    assert info["run_samples"] == [11, 9, 6, 8, 5]
    assert np.bincount(data.context).tolist() == [2, 2, 1, 2, 1]
    assert info["sources"] == [path]


def test_stats_cover_all_kept_rows_including_dropped_tails(tmp_path):
    obj = chest_subject()
    data, _ = wesad.preprocess_subject(write(tmp_path, obj), PARAMS)
    kept = np.isin(obj["label"], [1, 2, 3, 4])
    eda = obj["signal"]["chest"]["EDA"][kept, 0]
    # The windows hold 32 of the 39 kept rows; the mean is taken over all 39.
    first = (obj["signal"]["chest"]["EDA"][2, 0] - eda.mean()) / eda.std()
    assert data.x[0, 0, 4] == pytest.approx(first, rel=1e-5)
    assert data.windows * 4 < kept.sum()


def test_preprocess_wesad_yields_subjects_in_params_order(tmp_path):
    for k, s in enumerate(["S3", "S2"]):
        obj = chest_subject(seed=k)
        obj["subject"] = s
        write(tmp_path, obj, s)
    out = list(wesad.preprocess_wesad(tmp_path, {**PARAMS, "subjects": ["S3", "S2"]}))
    assert [u for u, _, _ in out] == ["S3", "S2"]
    # The WESAD folder itself is accepted as the root too.
    again = list(wesad.preprocess_wesad(tmp_path / "WESAD", {**PARAMS, "subjects": ["S2"]}))
    np.testing.assert_array_equal(again[0][1].x, out[1][1].x)


def test_wrist_modality_resamples_every_stream_onto_one_grid(tmp_path):
    seconds, rate = 8, 4
    n = 700 * seconds
    t700 = np.arange(n) / 700
    label = np.where(t700 < 3, 1, np.where(t700 < 5, 0, 2)).astype(np.int32)
    # Linear streams make linear interpolation exact: value(t) = slope * t.
    wrist = {"ACC": np.stack([np.arange(32 * seconds) / 32 * s for s in (1, 2, 3)], axis=1),
             "BVP": (np.arange(64 * seconds) / 64 * 5)[:, None],
             "EDA": (np.arange(4 * seconds) / 4 * 0.5 + 1)[:, None],
             "TEMP": (33 - np.arange(4 * seconds) / 4 * 0.1)[:, None]}
    obj = {"signal": {"wrist": wrist}, "label": label, "subject": "S2"}
    data, info = wesad.preprocess_subject(write(tmp_path, obj), {"modality": "wrist", "wrist_rate": rate,
                                                                  "window": 4, "contexts": 2})
    grid = np.arange(seconds * rate) / rate
    lab = label[(grid * 700).astype(int)]
    keep = lab > 0
    tk = grid[keep]
    raw = np.stack([tk, 2 * tk, 3 * tk, 5 * tk, 0.5 * tk + 1, 33 - 0.1 * tk], axis=1)
    z = (raw - raw.mean(0)) / raw.std(0)
    assert info["context_labels"] == [0, 1]
    assert info["run_samples"] == [12, 12]  # 3 s and 3 s at 4 Hz
    np.testing.assert_allclose(data.x.reshape(-1, 6), z, rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(data.context, [0, 0, 0, 1, 1, 1])
    assert wesad.describe({"modality": "wrist"})["feature_names"] == ["ACC_x", "ACC_y", "ACC_z", "BVP", "EDA", "TEMP"]


# ---------------------------------------------------------------- bad input: one line naming the file

def _mutate(fn):
    obj = chest_subject()
    fn(obj)
    return obj


BAD = {
    "missing label": (lambda o: o.pop("label"), "missing key 'label'"),
    "missing subject": (lambda o: o.pop("subject"), "missing key 'subject'"),
    "missing chest": (lambda o: o["signal"].pop("chest"), "missing key 'signal/chest'"),
    "missing Temp": (lambda o: o["signal"]["chest"].pop("Temp"), "missing key 'signal/chest/Temp'"),
    "signal not a dict": (lambda o: o.update(signal=[1, 2]), "signal is a list"),
    "ACC two columns": (lambda o: o["signal"]["chest"].update(ACC=np.zeros((N, 2))),
                        "signal/chest/ACC has shape (%d, 2), expected (N, 3)" % N),
    "ECG two columns": (lambda o: o["signal"]["chest"].update(ECG=np.zeros((N, 2))), "signal/chest/ECG has shape"),
    "label 2-D": (lambda o: o.update(label=np.zeros((N, 3), np.int32)), "label has shape"),
    "label float": (lambda o: o.update(label=np.zeros(N)), "label has dtype float64, expected an integer array"),
    "EDA integer": (lambda o: o["signal"]["chest"].update(EDA=np.ones((N, 1), np.int64)),
                    "signal/chest/EDA has dtype int64, expected a float array"),
    "EMG a list": (lambda o: o["signal"]["chest"].update(EMG=[0.0] * N), "signal/chest/EMG is a list"),
    "lengths differ": (lambda o: o["signal"]["chest"].update(ECG=np.zeros((N - 1, 1))),
                       "signal/chest/ECG has %d rows but label has %d" % (N - 1, N)),
    "NaN": (lambda o: o["signal"]["chest"]["EDA"].__setitem__((3, 0), np.nan),
            "signal/chest/EDA holds 1 NaN or infinite value(s)"),
    "inf": (lambda o: o["signal"]["chest"]["ACC"].__setitem__((0, 1), np.inf), "signal/chest/ACC holds 1 NaN"),
    "no usable rows": (lambda o: o.update(label=np.where(o["label"] > 4, o["label"], 0).astype(np.int32)),
                       "no rows with labels 1, 2, 3, 4"),
    "wrong subject": (lambda o: o.update(subject="S9"), "subject is 'S9', expected 'S2'"),
    "four runs": (lambda o: o.update(label=np.where(np.arange(N) > 40, 0, o["label"]).astype(np.int32)),
                  "runs of labels 1, 2, 3, 4 after filtering, expected 5 contexts"),
    # Clearing labels from index 36 on leaves an amusement run of 3 samples (< window 4).
    "run shorter than a window": (lambda o: o.update(label=np.where(np.arange(N) >= 36, 0, o["label"]).astype(
        np.int32)), "run 3 (amusement) has 3 samples, fewer than one window of 4"),
    "empty label": (lambda o: o.update(label=np.zeros(0, np.int32)), "label is empty"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_subject_gives_one_line_naming_file_and_problem(tmp_path, case):
    mutate, expected = BAD[case]
    path = write(tmp_path, _mutate(mutate))
    params = PARAMS if case != "run shorter than a window" else {**PARAMS, "contexts": 4}
    with pytest.raises(DataError) as err:
        wesad.preprocess_subject(path, params, "S2")
    msg = str(err.value)
    assert msg.startswith(str(path)) and expected in msg and "\n" not in msg


def test_wrist_stream_of_wrong_duration(tmp_path):
    n = 700 * 8
    wrist = {"ACC": np.zeros((256, 3)), "BVP": np.zeros((300, 1)), "EDA": np.zeros((32, 1)), "TEMP": np.zeros((32, 1))}
    path = write(tmp_path, {"signal": {"wrist": wrist}, "label": np.ones(n, np.int32), "subject": "S2"})
    with pytest.raises(DataError, match=r"signal/wrist/BVP covers 4.69 s at 64 Hz but label covers 8.00 s"):
        wesad.read_subject(path, "S2", "wrist")


def test_missing_folder_subject_and_file(tmp_path):
    with pytest.raises(DataError, match="WESAD folder not found"):
        list(wesad.preprocess_wesad(tmp_path, PARAMS))
    (tmp_path / "WESAD" / "S2").mkdir(parents=True)
    with pytest.raises(DataError, match=r"S2/S2.pkl: file not found"):
        list(wesad.preprocess_wesad(tmp_path, PARAMS))
    with pytest.raises(DataError, match=r"WESAD/S3: subject folder not found"):
        list(wesad.preprocess_wesad(tmp_path, {**PARAMS, "subjects": ["S3"]}))


@pytest.mark.parametrize("params, key", [
    ({"window": 0}, "preprocess.wesad.window"),
    ({"modality": "ankle"}, "preprocess.wesad.modality"),
    ({"contexts": 200}, "preprocess.wesad.contexts"),
    ({"subjects": []}, "preprocess.wesad.subjects"),
    ({"subjects": ["S2", "S3", "S2"]}, "preprocess.wesad.subjects: lists 'S2' twice$"),  # not ['S2', ...]
    ({"windw": 700}, "preprocess.wesad.windw"),
])
def test_bad_params_name_the_key(params, key):
    with pytest.raises(ParameterError, match=key):
        wesad.check_params(params)
