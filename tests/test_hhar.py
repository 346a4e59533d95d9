"""HHAR reader: real rows from ../shared, hand-computed alignment/decimation/windows, an independent
pandas implementation of PROTOCOL §1, and one test per kind of bad input."""

from __future__ import annotations

import csv
import zipfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from esnfed_core.data import hhar, hhar_csv, hhar_join, hhar_source
from esnfed_core.errors import ConfigError, DataError

HEAD = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "hhar-head"
HEADER = "Index,Arrival_Time,Creation_Time,x,y,z,User,Model,Device,gt"
FOLDER = "Activity recognition exp"


def _head_root(tmp_path: Path) -> Path:
    if not HEAD.is_dir():
        pytest.skip("../shared/data/hhar-head is not available")
    root = tmp_path / "raw"
    (root / "HHAR").mkdir(parents=True)
    (root / "HHAR" / FOLDER).symlink_to(HEAD, target_is_directory=True)
    return root


# ----------------------------------------------------------------------------------------------
# An independent implementation of PROTOCOL §1 with pandas (as the authors' code is written)
# ----------------------------------------------------------------------------------------------
def reference(folder: Path, devices: list[str], rates: dict, target=100, window=200, tol=5,
              drop_null="at_read"):
    """``drop_null`` "at_read": the authors' order (`dropna(subset=['gt'])` right after reading);
    "after_decimation": the NaN labels go through the join and the copy choice, dropped with
    the NaN rows after decimation."""
    frames = {}
    for kind in ("Phones", "Watch"):
        for sensor in ("accelerometer", "gyroscope"):
            path = folder / f"{kind}_{sensor}.csv"
            if path.exists():
                frame = pd.read_csv(path)  # pandas' default: `null` -> NaN
                frames[(kind, sensor)] = frame.dropna(subset=["gt"]) if drop_null == "at_read" else frame
    out = {}
    for ci, dev in enumerate(devices):
        kind = "Watch" if dev in ("gear", "lgwatch") else "Phones"
        acc_df, gyr_df = frames[(kind, "accelerometer")], frames[(kind, "gyroscope")]
        for user in sorted(set(acc_df.User) | set(gyr_df.User)):
            copies = {}
            for copy in sorted(set(acc_df.Device[acc_df.Model == dev]) | set(gyr_df.Device[gyr_df.Model == dev])):
                def part(df, sd):
                    sel = df[(df.User == user) & (df.Device == copy)][["Arrival_Time", "x", "y", "z", "gt"]]
                    return sel.sort_values("Arrival_Time", kind="stable").rename(
                        columns={"x": f"x_{sd}", "y": f"y_{sd}", "z": f"z_{sd}"}).reset_index(drop=True)
                a, g = part(acc_df, "acc"), part(gyr_df, "gyr")
                left = pd.merge_asof(a, g[["Arrival_Time", "x_gyr", "y_gyr", "z_gyr"]], on="Arrival_Time",
                                     direction="nearest", tolerance=tol)
                right = pd.merge_asof(g, a[["Arrival_Time", "x_acc", "y_acc", "z_acc"]], on="Arrival_Time",
                                      direction="nearest", tolerance=tol)
                df = pd.concat([left, right[right.x_acc.isnull()]]).sort_values("Arrival_Time", kind="stable")
                copies[copy] = df[["Arrival_Time", "x_acc", "y_acc", "z_acc", "x_gyr", "y_gyr", "z_gyr", "gt"]]
            if not copies:
                continue
            perc = {c: d.isna().sum().max() / len(d) for c, d in copies.items()}
            best = min(sorted(perc), key=lambda c: perc[c])
            df = copies[best]
            idx = np.around(np.arange(0, len(df) - 1, rates[dev] / target)).astype(int)
            df = df.iloc[idx].dropna()
            cols = ["x_acc", "y_acc", "z_acc", "x_gyr", "y_gyr", "z_gyr"]
            vals = df[cols].to_numpy()
            vals = (vals - vals.mean(0)) / vals.std(0)
            lab = df["gt"].map({c: i for i, c in enumerate(hhar.CLASSES)}).to_numpy()
            w = len(vals) // window
            out.setdefault(user, []).append((ci, vals[: w * window].reshape(w, window, 6),
                                             lab[: w * window].reshape(w, window), best))
    return out


def _assert_matches_reference(results, ref):
    assert sorted(u for u, _, _ in results) == sorted(ref)
    for user, data, info in results:
        parts = ref[user]
        x = np.concatenate([p[1] for p in parts]).astype(np.float32)
        np.testing.assert_allclose(data.x, x, rtol=0, atol=2e-6)
        np.testing.assert_array_equal(data.y, np.concatenate([p[2] for p in parts]))
        np.testing.assert_array_equal(data.context, np.concatenate([np.full(len(p[1]), p[0]) for p in parts]))
        assert [info["devices"][d]["copy"] for d in info["devices"]] == [p[3] for p in parts]


# ----------------------------------------------------------------------------------------------
# Real rows (../shared/data/hhar-head: user a, nexus4_1 and gear_1, first 10,000 rows each)
# ----------------------------------------------------------------------------------------------
def test_real_rows_parse_with_their_quirks(tmp_path):
    root = _head_root(tmp_path)
    source = hhar_source.locate_source(root)
    chunks = list(hhar_csv.iter_chunks(source, "Watch_accelerometer", chunk_rows=3000))
    assert [len(c) for c in chunks] == [3000, 3000, 3000, 1000]
    df = pd.concat(chunks)
    assert df["Creation_Time"].dtype == np.int64 and df["Arrival_Time"].dtype == np.int64
    with open(HEAD / "Watch_accelerometer.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    # since-boot nanoseconds (14 digits) read exactly, as Python ints would
    assert df["Creation_Time"].tolist() == [int(r["Creation_Time"]) for r in rows]
    assert df["Index"].tolist() == [int(r["Index"]) for r in rows]
    # `null` stays a label, not a missing value; the count matches a plain csv read
    assert (df["gt"] == "null").sum() == sum(r["gt"] == "null" for r in rows) > 0
    assert set(df["User"]) == {"a"} and set(df["Model"]) == {"gear"}

    phones = hhar_csv.read_streams(source, "Phones_accelerometer", ["nexus4"], chunk_rows=4000)
    assert list(phones.streams) == [("a", "nexus4", "nexus4_1")]
    s = phones.streams[("a", "nexus4", "nexus4_1")]
    assert len(s) == phones.rows_read == 10_000
    first = pd.read_csv(HEAD / "Phones_accelerometer.csv", nrows=1)
    assert first["Creation_Time"].iloc[0] == 1424696631913248572  # 19 digits, no float rounding
    assert s.time[0] == 1424696633908 and s.values[0].tolist() == [-5.958191, 0.6880646, 8.135345]
    watch = hhar_csv.read_streams(source, "Watch_accelerometer", ["gear"])
    assert (watch.streams[("a", "gear", "gear_1")].label == -1).sum() == 344


def test_real_rows_match_independent_pandas_pipeline(tmp_path):
    root = _head_root(tmp_path)
    rates = hhar.DEFAULT_PARAMS["rates"]
    for drop_null in ("at_read", "after_decimation"):
        for devices in (["nexus4"], ["gear"], ["nexus4", "gear"]):
            results = list(hhar.preprocess_hhar(root, {"devices": devices, "drop_null": drop_null}))
            _assert_matches_reference(results, reference(HEAD, devices, rates, drop_null=drop_null))
    # the default is the authors' order
    default = list(hhar.preprocess_hhar(root, {"devices": ["nexus4", "gear"]}))
    _assert_matches_reference(default, reference(HEAD, ["nexus4", "gear"], rates, drop_null="at_read"))
    user, data, info = default[0]
    assert user == "a" and data.x.dtype == np.float32 and data.y.dtype == np.int8
    assert info["windows_per_device"] == [info["devices"][d]["rows_kept"] // 200 for d in ("nexus4", "gear")]
    # nexus4 at 200 Hz keeps every other row; gear's 344 `null` rows are dropped before the join
    assert info["devices"]["nexus4"]["rows_decimated"] == info["devices"]["nexus4"]["rows_joined"] // 2
    assert info["devices"]["gear"]["rows_kept"] <= 10_000 - 344
    watch = hhar_csv.read_streams(hhar_source.locate_source(root), "Watch_accelerometer", ["gear"], drop_null=True)
    assert len(watch.streams[("a", "gear", "gear_1")]) == watch.rows_kept == 10_000 - 344


def test_drop_null_orders_on_real_rows(tmp_path):
    root = _head_root(tmp_path)
    at_read = list(hhar.preprocess_hhar(root, {"devices": ["gear"]}))[0]
    after = list(hhar.preprocess_hhar(root, {"devices": ["gear"], "drop_null": "after_decimation"}))[0]
    gear_read, gear_after = at_read[2]["devices"]["gear"], after[2]["devices"]["gear"]
    # at read, the 344 `null` rows never reach the join nor the copy choice's NaN fraction
    assert gear_after["rows_joined"] - gear_read["rows_joined"] >= 344
    assert gear_read["nan_fraction"]["gear_1"] < gear_after["nan_fraction"]["gear_1"]
    assert gear_after["nan_fraction"]["gear_1"] >= 344 / gear_after["rows_joined"]
    # gear is at 100 Hz, so decimation keeps every row and both orders keep the same rows
    # except the last one (decimation stops below len - 1)
    assert abs(at_read[1].windows - after[1].windows) <= 1


def test_drop_null_order_changes_copy_and_decimation_phase(tmp_path):
    """A recording where the two orders disagree: copy 1 is complete but a third of its rows are
    `null`; copy 2 has no `null` rows but misses the gyroscope on a tenth of them. Dropping at read
    (the authors' order) keeps copy 1; dropping after decimation counts the `null` rows as missing
    and keeps copy 2. Copy 1's 41 `null` rows (an odd count) also shift the 200 Hz decimation."""
    folder = tmp_path / "raw" / "HHAR" / FOLDER
    n = 120
    acc, gyro = [], []
    for k in range(n):
        t = 1000 + 5 * k
        gt = "null" if 40 <= k < 81 else ("walk" if k < 40 else "sit")
        acc.append(_row(k, t, np.sin(k), np.cos(0.3 * k), k % 7, gt=gt))
        gyro.append(_row(k, t + 1, np.sin(0.7 * k), k % 5, np.cos(k), gt=gt))
        acc.append(_row(k, t, np.cos(k), np.sin(0.2 * k), k % 4, device="nexus4_2", gt="bike"))
        if k % 10:  # copy 2: no gyroscope on every tenth row -> NaN fraction 0.1 after the join
            gyro.append(_row(k, t + 1, np.sin(0.5 * k), k % 3, np.cos(2 * k), device="nexus4_2", gt="bike"))
    _write(folder, "Phones_accelerometer", acc)
    _write(folder, "Phones_gyroscope", gyro)
    rates = hhar.DEFAULT_PARAMS["rates"]
    p = {"devices": ["nexus4"], "window": 10}
    default = list(hhar.preprocess_hhar(tmp_path / "raw", p))
    after = list(hhar.preprocess_hhar(tmp_path / "raw", {**p, "drop_null": "after_decimation"}))
    assert default[0][2]["devices"]["nexus4"]["copy"] == "nexus4_1"
    assert after[0][2]["devices"]["nexus4"]["copy"] == "nexus4_2"
    _assert_matches_reference(default, reference(folder, ["nexus4"], rates, window=10, drop_null="at_read"))
    _assert_matches_reference(after, reference(folder, ["nexus4"], rates, window=10,
                                               drop_null="after_decimation"))
    # the decimation phase: at read, copy 1's kept rows 0..39, 81..119 are decimated together,
    # so after row 38 comes row 81 (the 41st kept row is the 40th index, even); dropping after
    # decimation with copy 1 forced (copy 2 removed) keeps the even rows 0..38, 82..118 instead
    single = [r for r in gyro if "nexus4_2" not in r]
    _write(folder, "Phones_gyroscope", single)
    _write(folder, "Phones_accelerometer", [r for r in acc if "nexus4_2" not in r])
    (_, d_read, i_read), = hhar.preprocess_hhar(tmp_path / "raw", p)
    (_, d_after, i_after), = hhar.preprocess_hhar(tmp_path / "raw", {**p, "drop_null": "after_decimation"})
    assert i_read["devices"]["nexus4"]["rows_joined"] == n - 41
    assert i_after["devices"]["nexus4"]["rows_joined"] == n
    assert not np.allclose(d_read.x[:, :, 2], d_after.x[:, :, 2])
    read = [k for k in range(n) if not 40 <= k < 81]
    kept_read = [read[i] for i in range(0, len(read) - 1, 2)]
    kept_after = [k for k in range(0, n - 1, 2) if not 40 <= k < 81]
    assert 81 in kept_read and 82 in kept_after and 81 not in kept_after
    acc_z = np.array([k % 7 for k in range(n)], dtype=float)
    for d, kept in ((d_read, kept_read), (d_after, kept_after)):
        rows = acc_z[kept][: d.windows * 10]
        np.testing.assert_allclose(d.x[:, :, 2].ravel(), (rows - acc_z[kept].mean()) / acc_z[kept].std(),
                                   atol=1e-5)


# ----------------------------------------------------------------------------------------------
# Hand computations on a tiny hand-made recording
# ----------------------------------------------------------------------------------------------
def _write(folder: Path, name: str, rows: list[str], header: str = HEADER) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.csv"
    path.write_text(header + "\n" + "".join(r + "\n" for r in rows))
    return path


def _row(i, t, x, y, z, user="a", model="nexus4", device="nexus4_1", gt="walk"):
    return f"{i},{t},{t * 1_000_000},{x},{y},{z},{user},{model},{device},{gt}"


def test_asof_nearest_by_hand_and_against_pandas():
    left = np.array([0, 5, 10, 15, 20, 25, 30, 35, 40])
    right = np.array([1, 7, 11, 22, 26, 38, 42, 50])
    # by hand: 0->1, 5->7 (2 < 4), 10->11, 15->11 (22 is 7 away), 20->22, 25->26, 30->26,
    # 35->38 (3), 40: 38 and 42 tie at 2 -> the earlier (38)
    assert hhar_join.asof_nearest(left, right, 5).tolist() == [0, 1, 2, 2, 3, 4, 4, 5, 5]
    assert hhar_join.asof_nearest(left, right, 1).tolist() == [0, -1, 2, -1, -1, 4, -1, -1, -1]
    assert hhar_join.asof_nearest(left, np.array([], dtype=np.int64), 5).tolist() == [-1] * 9
    # equal times (batched arrival) and random cases: the same choice as pandas.merge_asof
    rng = np.random.default_rng(0)
    for _ in range(20):
        a = np.sort(rng.integers(0, 200, 60))
        b = np.sort(rng.integers(0, 200, 50))
        mine = hhar_join.asof_nearest(a, b, 5)
        ref = pd.merge_asof(pd.DataFrame({"t": a}), pd.DataFrame({"t": b, "j": np.arange(b.size)}),
                            on="t", direction="nearest", tolerance=5)["j"].fillna(-1).astype(int).to_numpy()
        np.testing.assert_array_equal(mine, ref)


def test_decimation_indices_by_hand():
    """PROTOCOL §1 as the authors' np.around(np.arange(0, len - 1, f / 100)): the positions k·f/100
    are kept while below len − 1, then rounded half to even."""
    # 200 Hz -> 100 Hz: positions 0, 2, 4, 6 (8 is not < 8): every other row, never the last one
    assert hhar_join.decimation_indices(9, 200, 100).tolist() == [0, 2, 4, 6]
    assert hhar_join.decimation_indices(10, 200, 100).tolist() == [0, 2, 4, 6, 8]
    # 150 Hz: positions 0, 1.5, 3, 4.5, 6, 7.5 (9 is not < 9) -> half to even: 0, 2, 3, 4, 6, 8
    assert hhar_join.decimation_indices(10, 150, 100).tolist() == [0, 2, 3, 4, 6, 8]
    # Where bounding the rounded row instead would differ: len 9, positions 0 ... 7.5 (< 8); 7.5
    # rounds to 8 = len − 1, a row the authors keep (the old rule, row < len − 1, dropped it).
    assert hhar_join.decimation_indices(9, 150, 100).tolist() == [0, 2, 3, 4, 6, 8]
    assert hhar_join.decimation_indices(9, 150, 100).tolist() == np.around(np.arange(0, 8, 1.5)).astype(int).tolist()
    # len 4: positions 0, 1.5 (3 is not < 3) -> 0, 2 (1.5 to even)
    assert hhar_join.decimation_indices(4, 150, 100).tolist() == [0, 2]
    assert hhar_join.decimation_indices(5, 100, 100).tolist() == [0, 1, 2, 3]
    assert hhar_join.decimation_indices(2, 150, 100).tolist() == [0]
    assert hhar_join.decimation_indices(1, 200, 100).size == 0
    assert hhar_join.decimation_indices(0, 200, 100).size == 0
    for n in range(2, 400):  # the authors' expression, every length and device rate
        for rate in (100, 150, 200):
            want = np.around(np.arange(0, n - 1, rate / 100)).astype(int)
            np.testing.assert_array_equal(hhar_join.decimation_indices(n, rate, 100), want)


def test_join_choose_decimate_normalise_window_by_hand(tmp_path):
    folder = tmp_path / "raw" / "HHAR" / FOLDER
    acc_t = [0, 5, 10, 15, 20, 25, 30, 35, 40]
    gyro_t = [1, 7, 11, 22, 26, 38, 42, 50]
    labels = ["walk", "walk", "sit", "sit", "null", "sit", "bike", "bike", "bike"]
    # rows written out of time order (batched arrival): the reader sorts them
    acc = [_row(k, 1000 + t, k + 1, 10 * (k + 1), (k + 1) ** 2, gt=g) for k, (t, g) in enumerate(zip(acc_t, labels))]
    gyro = [_row(k, 1000 + t, -(k + 1), 0.5 * k, 3.0 * (k % 3), gt="walk") for k, t in enumerate(gyro_t)]
    # copy 2: the same signals but its gyroscope is missing: worst NaN fraction 1 -> copy 1 kept
    acc2 = [r.replace("nexus4_1", "nexus4_2") for r in acc]
    _write(folder, "Phones_accelerometer", acc[::-1] + acc2)
    _write(folder, "Phones_gyroscope", gyro[3:] + gyro[:3])

    source = hhar_source.locate_source(tmp_path / "raw")
    acc_s = hhar_csv.read_streams(source, "Phones_accelerometer", ["nexus4"]).streams
    gyr_s = hhar_csv.read_streams(source, "Phones_gyroscope", ["nexus4"]).streams
    j = hhar_join.join_copy(acc_s[("a", "nexus4", "nexus4_1")], gyr_s[("a", "nexus4", "nexus4_1")], 5)
    # acc rows take gyro rows 0,1,2,2,3,4,4,5,5 (see the as-of test); gyro t=50 has no acc within 5
    # ms and is appended; gyro t=42 is 2 ms from acc t=40, so it is matched and not appended
    assert (j.time - 1000).tolist() == acc_t + [50]
    np.testing.assert_array_equal(j.values[:9, 0], np.arange(1, 10))
    np.testing.assert_array_equal(j.values[:9, 3], -np.array([1, 2, 3, 3, 4, 5, 5, 6, 6]))
    assert np.isnan(j.values[9, :3]).all() and j.values[9, 3] == -8
    assert j.label.tolist() == [2, 2, 1, 1, -1, 1, 5, 5, 5, 2]
    # worst column: acc (1 of 10 missing) and gt (1 `null` of 10) -> 0.1
    assert j.nan_fraction() == pytest.approx(0.1)
    j2 = hhar_join.join_copy(acc_s[("a", "nexus4", "nexus4_2")], hhar_csv.Stream(np.zeros(0, np.int64), np.zeros((0, 3)),
                                                                       np.zeros(0, np.int8)), 5)
    assert j2.nan_fraction() == 1.0
    assert hhar_join.choose_copy({"nexus4_2": j2, "nexus4_1": j})[0] == "nexus4_1"
    assert hhar_join.choose_copy({"nexus4_1": j2, "nexus4_2": j2})[0] == "nexus4_1"  # tie: copy 1

    # decimation at 200 Hz over 10 rows: rows 0, 2, 4, 6, 8; row 4 is `null` and dropped
    params = {"devices": ["nexus4"], "window": 2, "drop_null": "after_decimation"}
    (user, data, info), = hhar.preprocess_hhar(tmp_path / "raw", params)
    kept = [0, 2, 6, 8]
    raw = np.c_[np.arange(1, 10), 10 * np.arange(1, 10), np.arange(1, 10) ** 2,
                -np.array([1, 2, 3, 3, 4, 5, 5, 6, 6]), 0.5 * np.array([0, 1, 2, 2, 3, 4, 4, 5, 5]),
                3.0 * (np.array([0, 1, 2, 2, 3, 4, 4, 5, 5]) % 3)][kept]
    z = (raw - raw.mean(0)) / raw.std(0)  # population std
    np.testing.assert_allclose(data.x, z.reshape(2, 2, 6).astype(np.float32), atol=1e-6)
    assert data.y.tolist() == [[2, 1], [5, 5]]
    assert data.context.tolist() == [0, 0]
    assert info["devices"]["nexus4"] | {"mean": None, "std": None} == {
        "copy": "nexus4_1", "nan_fraction": {"nexus4_1": pytest.approx(0.1), "nexus4_2": 1.0},
        "rows_joined": 10, "rows_decimated": 5, "rows_kept": 4, "windows": 2, "mean": None, "std": None}

    # a window of 3 drops the tail row; ddof=1 divides by the sample std
    (_, data3, _), = hhar.preprocess_hhar(tmp_path / "raw", {**params, "window": 3, "std_ddof": 1})
    z1 = (raw - raw.mean(0)) / raw.std(0, ddof=1)
    np.testing.assert_allclose(data3.x, z1[:3].reshape(1, 3, 6).astype(np.float32), atol=1e-6)


def test_max_nan_fraction_skips_a_device(tmp_path):
    folder = tmp_path / "raw" / "HHAR" / FOLDER
    acc = [_row(k, 1000 + 5 * k, k % 7, k % 5, k % 3, gt="null" if k < 100 else "walk") for k in range(1000)]
    gyro = [_row(k, 1001 + 5 * k, k % 4, k % 6, k % 9) for k in range(1000)]
    _write(folder, "Phones_accelerometer", acc)
    _write(folder, "Phones_gyroscope", gyro)
    p = {"devices": ["nexus4"], "drop_null": "after_decimation"}  # the `null` rows count as missing
    (_, data, info), = hhar.preprocess_hhar(tmp_path / "raw", p)
    assert data.windows == 2 and info["devices"]["nexus4"]["nan_fraction"]["nexus4_1"] == pytest.approx(0.1)
    (_, data, info), = hhar.preprocess_hhar(tmp_path / "raw", {**p, "max_nan_fraction": 0.1})
    assert data.windows == 0 and "skipped" in info["devices"]["nexus4"]
    # dropped at read (the default), they are not missing values: the device is kept
    (_, data, info), = hhar.preprocess_hhar(tmp_path / "raw", {"devices": ["nexus4"], "max_nan_fraction": 0.1})
    assert data.windows > 0 and "skipped" not in info["devices"]["nexus4"]


# ----------------------------------------------------------------------------------------------
# Bad input: one line naming the file and the problem
# ----------------------------------------------------------------------------------------------
def _valid(folder: Path, users=("a",), n=500) -> None:
    acc, gyro = [], []
    for u in users:
        acc += [_row(k, 1000 + 5 * k, np.sin(k), np.cos(k), k % 7, user=u) for k in range(n)]
        gyro += [_row(k, 1002 + 5 * k, np.sin(2 * k), k % 3, np.cos(3 * k), user=u) for k in range(n)]
    _write(folder, "Phones_accelerometer", acc)
    _write(folder, "Phones_gyroscope", gyro)


def _error(root: Path, params=None) -> str:
    with pytest.raises(DataError) as exc:
        list(hhar.preprocess_hhar(root, params or {"devices": ["nexus4"]}))
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_valid_tiny_dataset_reads(tmp_path):
    _valid(tmp_path / "HHAR" / FOLDER, users=("a", "b"))
    out = list(hhar.preprocess_hhar(tmp_path, {"devices": ["nexus4"]}))
    assert [u for u, _, _ in out] == ["a", "b"] and all(d.windows == 1 for _, d, _ in out)


def test_missing_folder(tmp_path):
    assert "raw data folder not found" in _error(tmp_path / "nowhere")
    msg = _error(tmp_path)
    assert "HHAR data not found" in msg and FOLDER in msg


def test_missing_file(tmp_path):
    folder = tmp_path / "HHAR" / FOLDER
    _valid(folder)
    (folder / "Phones_gyroscope.csv").unlink()
    assert _error(tmp_path) == f"{folder / 'Phones_gyroscope.csv'}: file not found"
    # the watch files are read only when a watch is requested
    assert "Watch_accelerometer.csv: file not found" in _error(tmp_path, {"devices": ["lgwatch"]})


@pytest.mark.parametrize("header, missing", [
    (HEADER.replace(",gt", ",label"), "gt"),
    (HEADER.replace(",x,", ",acc_x,"), "x"),
    (HEADER.replace("Arrival_Time,", ""), "Arrival_Time"),
])
def test_missing_or_renamed_column(tmp_path, header, missing):
    folder = tmp_path / "HHAR" / FOLDER
    _valid(folder)
    _write(folder, "Phones_accelerometer", [_row(0, 1000, 1, 2, 3)], header=header)
    msg = _error(tmp_path)
    assert msg.startswith(f"{folder / 'Phones_accelerometer.csv'}: missing column(s) {missing} ")


@pytest.mark.parametrize("value, column", [("abc", "x"), ("1.2.3", "z")])
def test_non_numeric_signal(tmp_path, value, column):
    folder = tmp_path / "HHAR" / FOLDER
    _valid(folder)
    rows = (folder / "Phones_gyroscope.csv").read_text().splitlines()
    parts = rows[7].split(",")
    parts[HEADER.split(",").index(column)] = value
    rows[7] = ",".join(parts)
    (folder / "Phones_gyroscope.csv").write_text("\n".join(rows) + "\n")
    assert _error(tmp_path) == (f"{folder / 'Phones_gyroscope.csv'}: line 8, column {column}: "
                                f"'{value}' is not a number")


@pytest.mark.parametrize("column, edit, model", [
    ("x", lambda v: v.replace(".", ",", 1), "a"),  # a decimal comma: one field too many
    ("Index", lambda v: v + ",5", "a"),
    ("User", lambda v: v + ",z", "z"),
])
def test_row_with_a_field_too_many_is_refused(tmp_path, column, edit, model):
    """The reader takes its columns by position, so an extra field before Model shifts the row and
    its user letter lands in Model: one line naming the row, not a row dropped unseen."""
    folder = tmp_path / "HHAR" / FOLDER
    _valid(folder)
    rows = (folder / "Phones_accelerometer.csv").read_text().splitlines()
    parts = rows[7].split(",")
    i = HEADER.split(",").index(column)
    parts[i] = edit(parts[i])
    rows[7] = ",".join(parts)
    (folder / "Phones_accelerometer.csv").write_text("\n".join(rows) + "\n")
    assert _error(tmp_path) == (f"{folder / 'Phones_accelerometer.csv'}: line 8, column Model: unknown device "
                                f"model '{model}' (expected one of nexus4, s3, s3mini, samsungold, gear, "
                                "lgwatch; a field too many in that row?)")


def test_non_numeric_time_is_located_across_chunks(tmp_path):
    folder = tmp_path / "HHAR" / FOLDER
    _valid(folder)
    rows = (folder / "Phones_accelerometer.csv").read_text().splitlines()
    parts = rows[301].split(",")
    parts[1] += ".5"  # Arrival_Time 2500.5: not an integer
    rows[301] = ",".join(parts)
    (folder / "Phones_accelerometer.csv").write_text("\n".join(rows) + "\n")
    msg = _error(tmp_path, {"devices": ["nexus4"], "chunk_rows": 100})
    assert msg.startswith(f"{folder / 'Phones_accelerometer.csv'}: line 302, column Arrival_Time: ")
    assert msg.endswith("is not an integer")


@pytest.mark.parametrize("value", ["NaN", "inf", "-inf", ""])
def test_nan_or_inf_in_signal(tmp_path, value):
    folder = tmp_path / "HHAR" / FOLDER
    _valid(folder)
    rows = (folder / "Phones_accelerometer.csv").read_text().splitlines()
    parts = rows[42].split(",")
    parts[4] = value  # column y
    rows[42] = ",".join(parts)
    (folder / "Phones_accelerometer.csv").write_text("\n".join(rows) + "\n")
    msg = _error(tmp_path)
    assert msg.startswith(f"{folder / 'Phones_accelerometer.csv'}: line 43, column y: value is ")
    assert "(missing, NaN or infinite)" in msg


def test_empty_file_and_header_only(tmp_path):
    folder = tmp_path / "HHAR" / FOLDER
    _valid(folder)
    (folder / "Phones_accelerometer.csv").write_bytes(b"")
    assert _error(tmp_path) == f"{folder / 'Phones_accelerometer.csv'}: empty file (no header line)"
    _write(folder, "Phones_accelerometer", [])
    assert _error(tmp_path) == f"{folder / 'Phones_accelerometer.csv'}: no data rows (header only)"


def test_unknown_activity(tmp_path):
    folder = tmp_path / "HHAR" / FOLDER
    _valid(folder)
    text = (folder / "Phones_accelerometer.csv").read_text().splitlines()
    text[5] = text[5].replace(",walk", ",jump")
    (folder / "Phones_accelerometer.csv").write_text("\n".join(text) + "\n")
    assert "line 6, column gt: unknown activity 'jump'" in _error(tmp_path)


def test_user_without_usable_rows(tmp_path):
    folder = tmp_path / "HHAR" / FOLDER
    _valid(folder, users=("a", "b"))
    for name in ("Phones_accelerometer", "Phones_gyroscope"):
        path = folder / f"{name}.csv"
        lines = path.read_text().splitlines()
        path.write_text("\n".join(ln.replace(",walk", ",null") if ",b," in ln else ln for ln in lines) + "\n")
    msg = _error(tmp_path)
    assert msg.startswith(f"{folder / 'Phones_accelerometer.csv'}: user 'b', device 'nexus4': no usable rows")


def test_too_few_rows_for_one_window(tmp_path):
    _valid(tmp_path / "HHAR" / FOLDER, n=300)
    assert "fewer than one window of 200" in _error(tmp_path)


def test_device_without_rows(tmp_path):
    folder = tmp_path / "HHAR" / FOLDER
    _valid(folder, users=("a", "b"))
    # user a also has an s3, user b does not
    extra = [_row(k, 1000 + 5 * k, np.sin(k), k % 4, k % 5, model="s3", device="s3_1") for k in range(600)]
    for name in ("Phones_accelerometer", "Phones_gyroscope"):
        path = folder / f"{name}.csv"
        path.write_text(path.read_text() + "".join(r + "\n" for r in extra))
    msg = _error(tmp_path, {"devices": ["nexus4", "s3"]})
    assert msg == f"{folder / 'Phones_accelerometer.csv'}: user 'b' has no rows for device 's3'"
    msg = _error(tmp_path, {"devices": ["nexus4", "s3mini"]})
    assert msg == f"{folder / 'Phones_accelerometer.csv'}: no rows for device 's3mini'"


def test_constant_column(tmp_path):
    folder = tmp_path / "HHAR" / FOLDER
    acc = [_row(k, 1000 + 5 * k, 1.0, np.cos(k), k % 7) for k in range(500)]
    gyro = [_row(k, 1002 + 5 * k, np.sin(2 * k), k % 3, np.cos(3 * k)) for k in range(500)]
    _write(folder, "Phones_accelerometer", acc)
    _write(folder, "Phones_gyroscope", gyro)
    assert "column acc_x is constant" in _error(tmp_path)


def test_corrupt_zip(tmp_path):
    (tmp_path / "HHAR").mkdir()
    (tmp_path / "HHAR" / hhar_source.OUTER_ZIP).write_bytes(b"PK\x03\x04 this is not a zip")
    assert "not a valid zip archive" in _error(tmp_path)


def test_zip_without_the_inner_zip(tmp_path):
    (tmp_path / "HHAR").mkdir()
    with zipfile.ZipFile(tmp_path / "HHAR" / hhar_source.OUTER_ZIP, "w") as z:
        z.writestr("Still exp.zip", b"")
    assert "member 'Activity recognition exp.zip' not found" in _error(tmp_path)


@pytest.mark.parametrize("params, key", [
    ({"devices": ["iphone"]}, "preprocess.hhar.devices"),
    ({"window": 0}, "preprocess.hhar.window"),
    ({"rates": {"nexus4": 50}}, "preprocess.hhar.rates.nexus4"),
    ({"drop_null": "never"}, "preprocess.hhar.drop_null"),
    ({"windw": 200}, "preprocess.hhar.windw"),
])
def test_bad_params(params, key):
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        hhar.resolve_params(params)
