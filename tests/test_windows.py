"""Lazy windows on disk: reads equal np.load for every kind of index, bad files fail with one line
naming the file, and trials on lazy data give the same bytes as on data loaded into memory."""

from __future__ import annotations

import io
import pickle
import zipfile
from pathlib import Path

import numpy as np
import pytest

from esnfed_core import metrics
from esnfed_core.data.processed import UserData, load_user, save_user
from esnfed_core.data.windows import Concatenation, NpyMember, Selection, concat, take
from esnfed_core.errors import DataError
from esnfed_core.scoring import accuracy, activation_density, context_matrix
from esnfed_core.settings import Settings
from esnfed_core.trial import TrialData, fit
from experiment_data import TRAIN, VALIDATION, make_dataset

W, T, F = 23, 5, 3


@pytest.fixture(scope="module")
def stored(tmp_path_factory) -> tuple[Path, UserData]:
    rng = np.random.default_rng(0)
    data = UserData(rng.standard_normal((W, T, F)).astype(np.float32), rng.integers(0, 3, (W, T)).astype(np.int8),
                    np.repeat(np.arange(3, dtype=np.int8), [8, 7, 8]))
    path = tmp_path_factory.mktemp("win") / "u.npz"
    save_user(path, data)
    return path, data


KEYS = [0, 5, -1, -W, np.int64(7), slice(None), slice(3, 9), slice(None, None, 3), slice(20, 2, -4), slice(5, 5),
        slice(-100, 100), [], np.array([], np.intp), [4, 1, 1, 22, 0, 4], np.array([-1, 3, -1]),
        np.array([[2, 0], [0, 9]]), np.arange(W) % 2 == 0, np.zeros(W, bool), [3, 4, 5, 10, 11]]


@pytest.mark.parametrize("key", KEYS, ids=repr)
def test_reads_equal_np_load_for_every_index(stored, key):
    path, _ = stored
    lazy = load_user(path.parent, "u", lazy=True).x
    with np.load(path) as z:
        x = z["x"]
    got = lazy[key]
    assert isinstance(got, np.ndarray) and got.dtype == np.float32
    assert got.shape == x[key].shape
    assert got.tobytes() == x[key].tobytes()


def test_shape_tuple_keys_asarray_and_pickle(stored):
    path, data = stored
    lazy = NpyMember(path, "x", np.float32)
    assert (lazy.shape, lazy.ndim, len(lazy), lazy.dtype, lazy.size) == (data.x.shape, 3, W, np.float32, data.x.size)
    assert np.array_equal(lazy[2:6, 1:3], data.x[2:6, 1:3]) and np.array_equal(lazy[4, -1], data.x[4, -1])
    assert np.array_equal(lazy[[1, 0], :, 2], data.x[[1, 0], :, 2])
    assert np.asarray(lazy).tobytes() == data.x.tobytes()
    assert np.asarray(lazy, np.float64).dtype == np.float64
    again = pickle.loads(pickle.dumps(lazy))
    assert np.array_equal(again[[3, 1]], data.x[[3, 1]])
    for bad in (W, -W - 1, [0, W]):
        with pytest.raises(IndexError):
            lazy[bad]
    with pytest.raises(IndexError):
        lazy[np.ones(W - 1, bool)]
    with pytest.raises(IndexError):
        lazy[[0.5]]


def test_selections_and_concatenations_stay_lazy_and_read_like_numpy(stored):
    path, data = stored
    lazy = load_user(path.parent, "u", lazy=True)
    assert isinstance(lazy.x, NpyMember) and np.array_equal(lazy.y, data.y)
    for c in range(3):
        part = lazy.of_context(c)
        assert isinstance(part.x, Selection) and part.x.base is lazy.x  # one level, no copy
        assert np.asarray(part.x).tobytes() == data.of_context(c).x.tobytes()
    sub = take(take(lazy.x, [5, 2, 9, 2]), np.array([True, False, True, True]))
    assert isinstance(sub, Selection) and sub.base is lazy.x
    assert np.array_equal(sub[:], data.x[[5, 9, 2]])
    pooled = UserData.concat([lazy.of_context(2), lazy, UserData.concat([lazy.select([]), lazy.of_context(0)])])
    eager = UserData.concat([data.of_context(2), data, data.select([]), data.of_context(0)])
    assert isinstance(pooled.x, Concatenation) and all(not isinstance(p, Concatenation) for p in pooled.x.parts)
    assert pooled.x.shape == eager.x.shape
    assert np.array_equal(pooled.y, eager.y) and np.array_equal(pooled.context, eager.context)
    rng = np.random.default_rng(1)
    for key in (slice(None), rng.permutation(len(eager.x)), rng.integers(0, len(eager.x), 40), [], -1, slice(7, 31, 5)):
        assert pooled.x[key].tobytes() == eager.x[key].tobytes()
    # In-memory parts keep numpy's behaviour (a copy); mixed parts promote like np.concatenate.
    assert type(concat([data.x, data.x])) is np.ndarray and type(take(data.x, [1])) is np.ndarray
    mixed = concat([data.x.astype(np.float64)[:2], lazy.x])
    assert mixed.dtype == np.float64 and np.array_equal(mixed[1:4], np.concatenate([data.x[1:2], data.x[:2]]))
    assert concat([lazy.x]) is lazy.x
    with pytest.raises(ValueError, match="different shapes"):
        concat([lazy.x, data.x[:, :2]])


def _rewrite(path: Path, **arrays) -> None:
    with open(path, "wb") as f:
        np.savez(f, **arrays)


@pytest.mark.parametrize("case, fragment", [
    ("truncated", "cannot read"),
    ("compressed", "compressed"),
    ("float64", "x has dtype float64, expected float32"),
    ("fortran", "Fortran order"),
    ("missing", "missing arrays x"),
    ("bad header", "cannot read"),
])
def test_bad_files_are_one_line_data_errors_naming_the_file(tmp_path, stored, case, fragment):
    _, data = stored
    path = tmp_path / "u.npz"
    arrays = {"x": data.x, "y": data.y, "context": data.context}
    if case == "truncated":
        save_user(path, data)
        path.write_bytes(path.read_bytes()[:-200])
    elif case == "compressed":
        np.savez_compressed(path, **arrays)
    elif case == "float64":
        _rewrite(path, **{**arrays, "x": data.x.astype(np.float64)})
    elif case == "fortran":
        _rewrite(path, **{**arrays, "x": np.asfortranarray(data.x)})
    elif case == "missing":
        _rewrite(path, y=data.y, context=data.context)
    else:  # the .npy magic of x overwritten in place: the zip itself is intact
        save_user(path, data)
        raw = bytearray(path.read_bytes())
        at = raw.index(b"\x93NUMPY")
        raw[at : at + 6] = b"garbge"
        path.write_bytes(bytes(raw))
    with pytest.raises(DataError) as err:
        load_user(tmp_path, "u", lazy=True)
    msg = str(err.value)
    assert msg.startswith(str(path)) and fragment in msg and "\n" not in msg


def test_a_file_truncated_after_opening_fails_on_read(tmp_path, stored):
    _, data = stored
    save_user(tmp_path / "u.npz", data)
    lazy = load_user(tmp_path, "u", lazy=True).x
    assert np.array_equal(lazy[-1], data.x[-1])
    raw = (tmp_path / "u.npz").read_bytes()
    (tmp_path / "u.npz").write_bytes(raw[: len(raw) // 2])
    assert np.array_equal(lazy[0], data.x[0])  # the first windows are still there
    with pytest.raises(DataError, match=r"u\.npz: truncated"):
        lazy[-1]


def test_the_member_offset_follows_the_zip_local_header(tmp_path, stored):
    # A member preceded by another one and written with an extra field: the offset is still found.
    _, data = stored
    buf = io.BytesIO()
    np.save(buf, data.x)
    path = tmp_path / "odd.npz"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("pad.npy", b"0" * 77)
        info = zipfile.ZipInfo("x.npy")
        info.extra = b"\xfe\xca\x03\x00abc"
        z.writestr(info, buf.getvalue())
    assert NpyMember(path, "x", np.float32)[[4, 0]].tobytes() == data.x[[4, 0]].tobytes()


# ---------------------------------------------------------------- trials: lazy == in memory
CFG = {"units": 12, "spectral_radius": 0.9, "leak": 0.5, "input_scaling": 0.8}
IP = {"mu": 0.0, "eta": 0.01, "batch_size": 4, "normalize_step": True}
TRIALS = {
    "ridge": CFG, "incfed": CFG, "fedavg": CFG, "ip": {**CFG, "sigma": 0.4, "rounds": 2},
    "fedip": {**CFG, "sigma": 0.4, "rounds": 2, "local_epochs": 2},
    "clip-joint": {**CFG, "sigma": 0.4},
    "fedclip-replay": {**CFG, "sigma": 0.4, "budget": 2, "local_epochs": 2},
}


@pytest.fixture(scope="module")
def processed(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("proc")
    make_dataset(root, windows_per_context=9, steps=6, features=3)
    return root / "data" / "processed" / "wesad"


def _trial_data(directory: Path, lazy: bool) -> TrialData:
    load = {u: load_user(directory, u, lazy=lazy) for u in TRAIN["75"] + VALIDATION}
    return TrialData({u: load[u] for u in TRAIN["75"]}, {u: load[u] for u in VALIDATION}, 3, 3)


def _model_bytes(model) -> dict:
    arrays = {k: getattr(model, k) for k in ("readout", "context_gain", "context_bias", "context_readout")}
    arrays.update(gain=model.reservoir.gain, bias=model.reservoir.bias)
    return {k: None if v is None else np.asarray(v).tobytes() for k, v in arrays.items()} | {
        "validation": repr(model.validation), "communication": model.communication, "lam": model.lam}


@pytest.mark.parametrize("method", sorted(TRIALS))
def test_trials_on_lazy_windows_give_the_same_bytes_and_never_read_more_than_a_batch(processed, method,
                                                                                    monkeypatch):
    settings = Settings(batch_size=5, ip=IP, continual={"replay_fraction": 0.2, "replay_batch": 3, "joint_max_rounds": 3})
    eager = fit(method, TRIALS[method], 3, _trial_data(processed, False), settings)
    reads: list[int] = []
    real = NpyMember._rows
    monkeypatch.setattr(NpyMember, "_rows", lambda self, idx: reads.append(len(idx)) or real(self, idx))
    lazy_data = _trial_data(processed, True)
    assert all(isinstance(u.x, NpyMember) for u in lazy_data.train.values())
    lazy = fit(method, TRIALS[method], 3, lazy_data, settings)
    assert _model_bytes(lazy) == _model_bytes(eager)
    assert reads  # the windows came from disk
    if not method.startswith(("clip", "fedclip")):
        # Streamed in batches of 5 (readout) or 4 (IP), never a user or the pool at once.
        # (Continual ridge statistics and evaluations use batches of 256: more than this data.)
        assert max(reads) <= 5


def test_assessment_scores_on_lazy_windows_equal_those_in_memory(processed):
    model = fit("clip-naive", {**CFG, "sigma": 0.4, "budget": 1}, 2, _trial_data(processed, False),
                Settings(ip=IP))
    users = {lazy: [load_user(processed, u, lazy=lazy) for u in ("t0", "t1")] for lazy in (False, True)}
    res, ws = model.context_reservoirs(), list(model.context_readout)
    for f in (lambda us: context_matrix(res, ws, us, 4), lambda us: activation_density(res[-1], us, 3, 10, 4),
              lambda us: accuracy(res[0], ws[0], us, 7)):
        a, b = f(users[False]), f(users[True])
        assert pickle.dumps(a) == pickle.dumps(b)


def test_histograms_in_chunks_equal_one_pass(monkeypatch):
    values = np.random.default_rng(2).uniform(-1.2, 1.2, (9, 4, 6)).astype(np.float32)
    whole = metrics.histogram_values(values, 13)
    monkeypatch.setattr(metrics, "_HIST_CHUNK_ELEMENTS", 7)  # one row of 6 units per chunk
    parts = metrics.histogram_values(values, 13)
    assert np.array_equal(parts.counts, whole.counts) and parts.counts.sum() == values.size

