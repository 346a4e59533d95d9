"""esnfed import: CSV / Parquet / .npz tables -> the processed-data contract, checked against a
hand computation of the windows; chunked reads equal whole reads; bad input is one line naming
file, row and column; failures leave no output."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
from typer.testing import CliRunner

from esnfed_cli.main import app
from esnfed_core.data.processed import load_manifest, load_user
from esnfed_core.errors import ConfigError, DataError
from esnfed_core.data.tabular import Rows, default_max_gap, fill_missing, user_windows
from esnfed_stages.data.check_data import check_folder
from esnfed_stages.data.import_data import run
from esnfed_stages.params.imports import import_params

# Two users (u10 after u2: natural order), 2 features, samples every 10 ms, 2 sessions.
N = 14


def _table(shuffle: bool = True) -> pd.DataFrame:
    rows = []
    for user, offset in (("u2", 0.0), ("u10", 100.0)):
        for i in range(N):
            session = "s1" if i < 8 else "s2"
            rows.append({"who": user, "t": 1000 + 10 * i, "act": "walk" if i % 4 < 2 else "rest",
                         "sess": session, "a": offset + i * i, "b": offset - 3.0 * i})
    df = pd.DataFrame(rows)
    return df.sample(frac=1.0, random_state=1) if shuffle else df


def _params(src, **kw):
    base = {"source": str(src), "user": "who", "time": "t", "time_unit": "ms", "label": "act",
            "context": "sess", "features": ["a", "b"], "window": 2, "rate": 50.0}
    base.update(kw)
    return import_params(base, "imports.mine")


def _hand(df: pd.DataFrame, user: str):
    """The windows by hand: 50 Hz from 100 Hz samples = every other sample of each session
    (grid times fall on samples), windows of 2 steps, tail dropped, z-score over the user's steps."""
    u = df[df.who == user].sort_values("t")
    xs, ys, cs = [], [], []
    for ctx, sess in enumerate(("s1", "s2")):
        s = u[u.sess == sess].iloc[::2]  # s1: 8 samples -> 4 steps; s2: 6 samples -> 3 steps
        w = len(s) // 2
        xs.append(s[["a", "b"]].to_numpy(float)[: 2 * w].reshape(w, 2, 2))
        ys.append((s["act"] == "walk").to_numpy()[: 2 * w].reshape(w, 2).astype(int))  # rest=0, walk=1
        cs += [ctx] * w
    x = np.concatenate(xs)
    x = (x - x.reshape(-1, 2).mean(0)) / x.reshape(-1, 2).std(0)
    return x.astype(np.float32), np.concatenate(ys), np.array(cs)


def test_csv_matches_hand_computation_and_contract(tmp_path):
    df = _table()
    df.to_csv(tmp_path / "rec.csv", index=False)
    manifest = run("mine", _params(tmp_path / "rec.csv"), out_root=tmp_path / "out")
    folder = tmp_path / "out" / "mine"
    assert check_folder(folder) == []
    assert list(manifest["users"]) == ["u2", "u10"]
    assert manifest["label_map"] == {"rest": 0, "walk": 1}
    assert manifest["context_map"] == {"s1": 0, "s2": 1}
    assert manifest["window"] == 2 and manifest["feature_names"] == ["a", "b"]
    for user in ("u2", "u10"):
        x, y, ctx = _hand(df, user)
        got = load_user(folder, user)
        np.testing.assert_allclose(got.x, x, rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(got.y, y)
        np.testing.assert_array_equal(got.context, ctx)


def test_no_rate_keeps_rows_and_interpolates_between_samples(tmp_path):
    df = pd.DataFrame({"user": ["a"] * 5, "time": [0.0, 1.0, 2.0, 3.0, 4.0], "label": ["x"] * 3 + ["y"] * 2,
                       "f": [0.0, 2.0, 4.0, 6.0, 8.0]})
    df.to_csv(tmp_path / "r.csv", index=False)
    # rate 2 Hz on 1 Hz samples: grid 0, 0.5, ..., 4 -> 9 steps of f = 0, 1, ..., 8 (linear)
    run("lin", import_params({"source": str(tmp_path / "r.csv"), "features": ["f"], "window": 9, "rate": 2.0}),
        out_root=tmp_path / "o")
    x = load_user(tmp_path / "o" / "lin", "a").x[0, :, 0]
    np.testing.assert_allclose(x, (np.arange(9) - 4) / np.arange(9).std(), rtol=1e-6)
    run("raw", import_params({"source": str(tmp_path / "r.csv"), "features": ["f"], "window": 2}),
        out_root=tmp_path / "o")
    m = load_manifest(tmp_path / "o" / "raw")
    assert m["users"]["a"]["windows"] == 2 and m["context_names"] == ["all"]


def test_chunked_reading_gives_the_same_bytes(tmp_path):
    _table().to_csv(tmp_path / "rec.csv", index=False)
    run("m", _params(tmp_path / "rec.csv", chunk_rows=3), out_root=tmp_path / "small")
    run("m", _params(tmp_path / "rec.csv"), out_root=tmp_path / "big")
    for user in ("u2", "u10"):
        assert (tmp_path / "small/m" / f"{user}.npz").read_bytes() == (tmp_path / "big/m" / f"{user}.npz").read_bytes()


def test_folder_parquet_and_npz_inputs_equal_the_csv(tmp_path):
    df = _table()
    df.to_csv(tmp_path / "rec.csv", index=False)
    run("m", _params(tmp_path / "rec.csv"), out_root=tmp_path / "csv")
    folder = tmp_path / "parts"
    folder.mkdir()
    df.iloc[:10].to_parquet(folder / "part1.parquet")
    df.iloc[10:].to_csv(folder / "part2.csv", index=False)
    run("m", _params(folder), out_root=tmp_path / "mixed")
    np.savez(tmp_path / "rec.npz", **{c: (df[c].to_numpy().astype(str) if df[c].dtype == object or c in ("who", "act", "sess") else df[c].to_numpy()) for c in df.columns})
    run("m", _params(tmp_path / "rec.npz"), out_root=tmp_path / "npz")
    for other in ("mixed", "npz"):
        for user in ("u2", "u10"):
            a, b = load_user(tmp_path / "csv/m", user), load_user(tmp_path / other / "m", user)
            np.testing.assert_array_equal(a.x, b.x)
            np.testing.assert_array_equal(a.y, b.y)


@pytest.mark.parametrize("column, value, expected", [
    ("a", "abc", "row 5 (line 6), column 'a': 'abc' is not a finite number"),
    ("t", "", "row 5 (line 6), column 't': '' is not a finite number"),
    ("who", "x/y", "row 5 (line 6), column 'who': user 'x/y' is not a plain name (letters, digits, _ or -): it becomes a file name"),
    ("act", "", "row 5 (line 6), column 'act': empty cell"),
    ("a", "1e308", "row 5 (line 6), column 'a': '1e308' is beyond float32's range (magnitude at most "
                   "3.403e+38): features are stored as float32"),
    ("b", "-1e40", "row 5 (line 6), column 'b': '-1e40' is beyond float32's range (magnitude at most "
                   "3.403e+38): features are stored as float32"),
])
def test_bad_cell_names_file_row_and_column(tmp_path, column, value, expected):
    df = _table(shuffle=False).astype(object)
    df.loc[4, column] = value
    df.to_csv(tmp_path / "rec.csv", index=False)
    with pytest.raises(DataError) as err:
        run("m", _params(tmp_path / "rec.csv", chunk_rows=3), out_root=tmp_path / "out")
    assert str(err.value) == f"{tmp_path / 'rec.csv'}: {expected}"
    assert not (tmp_path / "out").exists()  # not even the output root


def test_unknown_class_and_missing_column(tmp_path):
    _table(shuffle=False).to_csv(tmp_path / "rec.csv", index=False)
    with pytest.raises(DataError, match=r"row 3 \(line 4\), column 'act': 'rest' is not among imports.mine.classes"):
        run("m", _params(tmp_path / "rec.csv", classes=["walk"]), out_root=tmp_path / "o")
    with pytest.raises(DataError, match=r"rec.csv: column 'zz' not found"):
        run("m", _params(tmp_path / "rec.csv", features=["a", "zz"]), out_root=tmp_path / "o")


@pytest.mark.parametrize("kw, tail", [
    ({}, ""),
    ({"classes": ["walk", "rest"]}, ""),  # a class listed but absent from the rows is no second class
    ({"drop_labels": ["rest"], "table": "both"}, " once drop_labels are dropped"),
])
def test_a_label_column_with_one_class_is_refused(tmp_path, kw, tail):
    """Every step the same class: any classifier would score 100 %; one line, no output."""
    df = _table(shuffle=False)
    if kw.pop("table", None) is None:
        df = df.assign(act="walk")
    df.to_csv(tmp_path / "rec.csv", index=False)
    with pytest.raises(DataError, match=rf"rec.csv: column 'act' holds one class only \(walk\){tail}; "
                                        "classification needs at least 2"):
        run("m", _params(tmp_path / "rec.csv", **kw), out_root=tmp_path / "o")
    assert not (tmp_path / "o" / "m").exists()


@pytest.mark.parametrize("chunk_rows", [100_000, 2])
def test_a_row_longer_than_the_header_is_refused(tmp_path, chunk_rows):
    """A decimal comma ("4,5") gives a row one field more than the header: pandas with usecols
    dropped the extra field silently, shifting that row's values; now one line naming the line."""
    lines = _table(shuffle=False).to_csv(index=False).splitlines()
    lines[5] = lines[5].rsplit(",", 1)[0] + ",4,5"  # row 5 (line 6): b = "4,5"
    (tmp_path / "rec.csv").write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"rec.csv: row \d+ or after .*Expected 6 fields in line 6, saw 7"):
        run("m", _params(tmp_path / "rec.csv", chunk_rows=chunk_rows), out_root=tmp_path / "o")
    assert not (tmp_path / "o" / "m").exists()


def test_failure_keeps_the_previous_output(tmp_path):
    df = _table(shuffle=False)
    df.to_csv(tmp_path / "rec.csv", index=False)
    run("m", _params(tmp_path / "rec.csv"), out_root=tmp_path / "o")
    before = (tmp_path / "o/m/manifest.json").read_bytes()
    df.astype(object).assign(b=["oops"] * len(df)).to_csv(tmp_path / "rec.csv", index=False)
    with pytest.raises(DataError, match=r"rec\.csv: row 1 \(line 2\), column 'b': 'oops' is not a finite number$"):
        run("m", _params(tmp_path / "rec.csv"), out_root=tmp_path / "o")
    assert (tmp_path / "o/m/manifest.json").read_bytes() == before
    assert sorted(p.name for p in (tmp_path / "o").iterdir()) == ["m"]  # no scratch left behind


@pytest.mark.parametrize("change, message", [
    ({"window": 0}, "imports.mine.window: "),
    ({"rate": -1.0}, "imports.mine.rate: "),
    ({"time_unit": "h"}, "imports.mine.time_unit: expected one of s, ms, us, ns"),
    ({"features": []}, "imports.mine.features: expected a non-empty list"),
    ({"colour": 1}, "imports.mine.colour: unknown key"),
])
def test_params_checked_once_with_the_key(tmp_path, change, message):
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        _params(tmp_path / "x.csv", **change)


@pytest.mark.parametrize("change, message", [
    ({"classes": ["walk", "walk"]}, "imports.mine.classes: expected a list of distinct strings, got ['walk', 'walk']"),
    ({"features": ["who"]}, "imports.mine: a column is named twice among user, time, label, context and features: "
                            "['who', 't', 'act', 'sess', 'who']"),
])
def test_lists_in_messages_read_as_plain_text(tmp_path, change, message):
    # a YAML flow list, not a Python tuple repr such as ('walk', 'walk')
    with pytest.raises(ConfigError) as exc:
        _params(tmp_path / "x.csv", **change)
    assert str(exc.value) == message


def _cli_args(tmp_path):
    return ["import", str(tmp_path / "rec.csv"), "--dataset", "mine", "--user", "who", "--time", "t",
            "--time-unit", "ms", "--label", "act", "--context", "sess", "--features", "a,b", "--rate", "50",
            "--window", "2", "--out", str(tmp_path / "out")]


def test_cli_import_then_check(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no params.yaml here: the command line gives everything
    _table().to_csv(tmp_path / "rec.csv", index=False)
    runner = CliRunner()
    args = _cli_args(tmp_path)
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "mine (import): 2 users, windows of 2 steps x 2 features" in res.output
    assert "class shares (rest, walk)" in res.output and "{'" not in res.output  # was the label map's dict repr
    assert runner.invoke(app, ["check-data", str(tmp_path / "out" / "mine")]).exit_code == 0
    assert json.loads((tmp_path / "out/mine/manifest.json").read_text())["source"] == "import"


@pytest.mark.parametrize("option, value, code, needle", [
    ("--window", "0", 2, "'--window'"),
    ("--rate", "-1", 2, "'--rate': must be in (0, inf)"),
    ("--time-unit", "h", 2, "'--time-unit'"),
    ("--features", None, 2, "--features: required: give it, or set imports.mine.features in params.yaml"),
    ("--params", "typo.yaml", 1, "error: typo.yaml: params file not found"),
])
def test_cli_import_option_mistakes_name_the_option(tmp_path, monkeypatch, option, value, code, needle):
    """Before: --window 0 was reported as imports.mine.window, --time-unit h likewise, a --params
    file that does not exist was ignored silently, and a missing --features named imports.mine."""
    monkeypatch.chdir(tmp_path)
    _table().to_csv(tmp_path / "rec.csv", index=False)
    args = _cli_args(tmp_path)
    if option in args:
        i = args.index(option)
        del args[i:i + 2]
    res = CliRunner().invoke(app, args + ([option, value] if value is not None else []), env={"COLUMNS": "300"})
    assert res.exit_code == code, res.output
    assert needle in " ".join(res.output.split()), res.output
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("extra, needle", [
    (["--contexts", "a,b"], "row 1 (line 2), column 'sess': 's1' is not among --contexts (a, b)"),
    (["--classes", "walk,jog"], "row 3 (line 4), column 'act': 'rest' is not among --classes (walk, jog)"),
    (["--contexts", "s1,s2,s3"], "error: --contexts: 's3' has no rows in"),
    (["--time-unit", "us"], "is --time-unit right (time read in microseconds)? else shorten --window"),
    (["--features", "a,who"], "error: --user and --features: a column is named twice"),
])
def test_cli_values_are_named_by_their_option_not_a_params_key(tmp_path, monkeypatch, extra, needle):
    """Values given on the command line were named imports.mine.<key> though
    params.yaml has no imports.mine (here no params.yaml at all)."""
    monkeypatch.chdir(tmp_path)
    _table(shuffle=False).to_csv(tmp_path / "rec.csv", index=False)
    args = _cli_args(tmp_path)
    for option in extra[::2]:
        if option in args:
            i = args.index(option)
            del args[i:i + 2]
    res = CliRunner().invoke(app, args + extra, env={"COLUMNS": "300"})
    assert res.exit_code == 1 and needle in res.output and "imports.mine" not in res.output, res.output
    assert not (tmp_path / "out").exists()


def test_a_missing_source_names_the_argument_or_the_params_key(tmp_path, monkeypatch):
    """A missing file given as the argument was named imports.mine.source."""
    monkeypatch.chdir(tmp_path)
    args = _cli_args(tmp_path)
    res = CliRunner().invoke(app, args, env={"COLUMNS": "300"})
    assert res.exit_code == 1 and f"{tmp_path / 'rec.csv'}: input file or folder not found (argument SOURCE)" \
        in res.output, res.output
    with pytest.raises(DataError, match=r"input file or folder not found \(imports\.mine\.source\)"):
        run("m", _params(tmp_path / "rec.csv"), out_root=tmp_path / "o")  # from params.yaml: its key


@pytest.mark.parametrize("cut, fields", [(",s2,", 5), (",s", 4), ("", 3)])
def test_a_csv_cut_short_names_the_row_and_its_field_count(tmp_path, cut, fields):
    """A truncated last line read as empty cells ("'' is not a finite number")."""
    lines = _table(shuffle=False).to_csv(index=False).splitlines()  # who,t,act,sess,a,b
    last = lines[-1].split(",")
    lines[-1] = ",".join(last[:3]) + cut
    (tmp_path / "rec.csv").write_text("\n".join(lines))  # no final newline: the file was cut there
    with pytest.raises(DataError) as err:
        run("m", _params(tmp_path / "rec.csv"), out_root=tmp_path / "o")
    row = len(lines) - 1
    assert str(err.value) == (f"{tmp_path / 'rec.csv'}: row {row} (line {row + 1}) has {fields} fields, expected 6 "
                              "as the header (is the file cut short?)")
    assert not (tmp_path / "o" / "m").exists()


def test_dataset_name_never_escapes_the_output_root(tmp_path):
    _table().to_csv(tmp_path / "rec.csv", index=False)
    with pytest.raises(ConfigError, match="is not a dataset name"):
        run("../escape", _params(tmp_path / "rec.csv"), out_root=tmp_path / "out")
    assert not (tmp_path / "escape").exists()


# ------------------------------------------------------------------ input audit
def test_a_time_far_off_within_a_context_is_a_gap_and_bounded_beyond_max_gap(tmp_path):
    """Before: one row 20 s before its session (a typo, a wrong unit) was resampled into about a
    thousand interpolated steps for 8 rows, without bound (a -1e9 ms time in the example CSV: 514,000
    windows and 3.6 GB from a 1 MB file), exit 0. Now it is a gap (the row alone, no window, is
    warned of); with a max_gap set above it, MAX_UPSAMPLE still refuses the grid."""
    df = _table(shuffle=False)
    df.loc[0, "t"] = 1000 - 20_000  # u2, session s1 (8 rows)
    df.to_csv(tmp_path / "rec.csv", index=False)
    lines = []
    run("m", _params(tmp_path / "rec.csv"), out_root=tmp_path / "out", warn=lines.append)
    assert load_manifest(tmp_path / "out" / "m")["users"]["u2"]["windows_per_context"] == [2, 1]
    assert lines == [f"{tmp_path / 'rec.csv'}: 1 gap in time inside a context (over 1 s, the default max_gap; set "
                     "imports.mine.max_gap or --max-gap) not filled in: the recording is cut at each, no window "
                     "spans one, the time in them is not imported (u2: 1 gap, 20.01 s)"]
    with pytest.raises(DataError) as err:
        run("m", _params(tmp_path / "rec.csv", max_gap=100), out_root=tmp_path / "out2")
    assert str(err.value) == (f"{tmp_path / 'rec.csv'}: user 'u2': the 8 rows from time -19 s to 1.07 s (one context, "
                              "no gap over 100 s) span 1004 steps at 50 Hz, over 100 per row: a time far off? (check "
                              "the time column and time_unit)")
    assert not (tmp_path / "out2" / "m").exists()


def _gapped(tmp_path, rows_per_block: int = 150, gap_s: float = 10.0, users=("u1", "u2")) -> str:
    """Users at 50 Hz, one session, activity a for rows_per_block rows, then (u1 only) a gap of gap_s
    seconds (the sensor off), then activity b for rows_per_block rows; u2 records both blocks
    without a gap. Features: a sine of the time (interpolation across the gap would be a line)."""
    frames = []
    for user in users:
        t = np.arange(2 * rows_per_block) / 50.0
        if user == "u1":
            t[rows_per_block:] += gap_s
        frames.append(pd.DataFrame({"who": user, "t": 1000 * t, "act": ["a"] * rows_per_block + ["b"] * rows_per_block,
                                    "sess": "s1", "a": np.sin(t), "b": np.cos(3 * t)}))
    path = tmp_path / "gap.csv"
    pd.concat(frames).to_csv(path, index=False)
    return str(path)


def test_a_gap_inside_a_context_is_cut_not_filled_in(tmp_path):
    """The audit: a wearable off for 20 min inside a session gave 600 windows of straight lines
    labelled with the activity before it, exit 0, no warning. Now the gap cuts the recording (like a
    context change): each side is resampled and windowed on its own, and the gap is warned of."""
    src = _gapped(tmp_path)
    lines = []
    run("m", _params(src, window=50), out_root=tmp_path / "o", warn=lines.append)
    users = load_manifest(tmp_path / "o" / "m")["users"]
    assert users["u1"]["windows"] == users["u2"]["windows"] == 6  # 3 + 3 on each side of u1's gap
    y = load_user(tmp_path / "o" / "m", "u1").y
    assert [set(w) for w in y.tolist()] == [{0}] * 3 + [{1}] * 3  # no window of a held label
    assert lines == [f"{src}: 1 gap in time inside a context (over 1 s, the default max_gap; set imports.mine.max_gap "
                     "or --max-gap) not filled in: the recording is cut at each, no window spans one, the time in "
                     "them is not imported (u1: 1 gap, 10.02 s)"]
    # max_gap above the gap: filled in as before (3 s + 10 s + 3 s at 50 Hz = 16 windows), no warning
    lines.clear()
    run("m", _params(src, window=50, max_gap=11.0), out_root=tmp_path / "o", warn=lines.append)
    assert load_manifest(tmp_path / "o" / "m")["users"]["u1"]["windows"] == 16 and lines == []


def test_a_gap_cuts_rows_without_rate_and_counts_the_windows_lost(tmp_path):
    """Without rate the rows are windowed as they are: a window spanned the gap; now each side keeps
    its whole windows and the tails cut off are counted."""
    src = _gapped(tmp_path, rows_per_block=140, users=("u1",))
    lines = []
    run("m", _params(src, window=50, rate=None, max_gap=2.5), out_root=tmp_path / "o", warn=lines.append)
    assert load_manifest(tmp_path / "o" / "m")["users"]["u1"]["windows"] == 4  # 2 + 2, not 280 // 50 = 5
    assert lines == [f"{src}: 1 gap in time inside a context (over imports.mine.max_gap = 2.5 s) not filled in: the "
                     "recording is cut at each, no window spans one, the time in them is not imported (u1: 1 gap, "
                     "10.02 s, 1 window lost at the cuts)"]


def test_a_gap_between_contexts_is_no_gap():
    """Sessions hours apart are the normal case: a context change cuts there already, unwarned."""
    t = np.concatenate([np.arange(100), 7200 + np.arange(100)]) / 50.0
    rows = Rows(t, np.zeros(200, np.int64), np.repeat([0, 1], 100), np.sin(t)[:, None])
    data, cuts = user_windows(rows, 10, 50.0)
    assert data.windows == 20 and (cuts.gaps, cuts.gap_seconds, cuts.lost_windows) == (0, 0.0, 0)


@pytest.mark.parametrize("interval, rate, expected", [
    (0.02, None, 1.0),     # 50 Hz: five intervals are 0.1 s, the floor of 1 s wins
    (0.02, 50.0, 1.0),
    (2.0, None, 10.0),     # 0.5 Hz heart rate: five of its own intervals
    (0.02, 0.1, 50.0),     # resampled to 0.1 Hz: five output steps
])
def test_the_default_max_gap(interval, rate, expected):
    t = np.cumsum(np.full(50, interval))
    assert default_max_gap(t, rate) == pytest.approx(expected)


def test_slow_data_is_not_cut_into_gaps_by_default(tmp_path):
    """A 1 s floor alone would cut 0.5 Hz rows (2 s apart, jittered) at every row."""
    rng = np.random.default_rng(0)
    t = np.arange(60) * 2.0 + rng.uniform(-0.2, 0.2, 60)
    pd.DataFrame({"user": "u", "time": t, "label": np.repeat(["x", "y"], 30), "f": np.sin(t)}).to_csv(
        tmp_path / "hr.csv", index=False)
    lines = []
    run("hr", import_params({"source": str(tmp_path / "hr.csv"), "features": ["f"], "window": 10}),
        out_root=tmp_path / "o", warn=lines.append)
    assert load_manifest(tmp_path / "o" / "hr")["users"]["u"]["windows"] == 6 and lines == []


def test_a_column_named_twice_in_the_header_is_refused(tmp_path):
    """Before: pandas renamed the second 'a' to 'a.1' and the first was imported silently."""
    df = _table(shuffle=False)
    df["a2"] = df["a"] * 2
    df.rename(columns={"a2": "a"}).to_csv(tmp_path / "rec.csv", index=False)
    with pytest.raises(DataError) as err:
        run("m", _params(tmp_path / "rec.csv"), out_root=tmp_path / "out")
    assert str(err.value) == f"{tmp_path / 'rec.csv'}: column 'a' appears 2 times in the header"


def test_an_npz_source_that_inflates_beyond_its_size_is_refused(tmp_path):
    """An .npz input is read through esnfed_core.data.npz (before: np.load inflated every column)."""
    import tracemalloc

    from test_npz_bounds import _bomb

    df = _table(shuffle=False)
    cols = {c: df[c].to_numpy() for c in ("who", "t", "act", "sess", "b")}
    _bomb(tmp_path / "rec.npz", "a", 256 << 20, **cols)
    tracemalloc.start()
    try:
        with pytest.raises(DataError) as err:
            run("m", _params(tmp_path / "rec.npz"), out_root=tmp_path / "out")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert str(err.value).startswith(f"{tmp_path / 'rec.npz'}: array 'a' inflates to 268435584 bytes")
    assert peak < 16 << 20, peak


@pytest.mark.parametrize("column, array, expected", [
    ("a", lambda df: df["a"].to_numpy() + 1j, "row 1, column 'a': the column holds complex numbers, dtype complex128; "
                                             "expected real numbers"),
    ("t", lambda df: df["t"].to_numpy().astype("datetime64[ms]"),
     "row 1, column 't': the column holds dates or durations (store times as numbers in time_unit), dtype "
     "datetime64[ms]; expected real numbers"),
    ("act", lambda df: np.where(np.arange(len(df)) == 4, np.nan, 1.0), "row 5, column 'act': empty cell"),
])
def test_npz_columns_of_another_kind_name_the_row_and_column(tmp_path, column, array, expected):
    """Before: complex values lost their imaginary part with a ComplexWarning (exit 0), a date column
    was read as numbers of an unknown unit, and a NaN label was a TypeError traceback (pandas 3
    keeps NaN through astype(str))."""
    df = _table(shuffle=False)
    cols = {c: np.asarray(df[c].tolist()) for c in df.columns}  # text columns as numpy strings
    cols[column] = array(df)
    np.savez(tmp_path / "rec.npz", **cols)
    with pytest.raises(DataError) as err:
        run("m", _params(tmp_path / "rec.npz", classes=["1.0"] if column == "act" else None),
            out_root=tmp_path / "out")
    assert str(err.value) == f"{tmp_path / 'rec.npz'}: {expected}"


def test_a_parquet_declaring_far_more_rows_than_its_bytes_is_refused(tmp_path):
    """Run-length/dictionary encoding stores 4 million equal rows in a few KB; before, import read
    them all (8 bytes per value in memory and in the spill: memory unbounded by the file's size)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 4_000_000
    zeros = pa.array(np.zeros(n))
    table = pa.table({"who": pa.array(np.full(n, "u2")).dictionary_encode(), "t": zeros,
                      "act": pa.array(np.full(n, "walk")).dictionary_encode(),
                      "sess": pa.array(np.full(n, "s1")).dictionary_encode(), "a": zeros, "b": zeros})
    pq.write_table(table, tmp_path / "rec.parquet", compression="zstd")
    size = (tmp_path / "rec.parquet").stat().st_size
    assert size < 1 << 20
    with pytest.raises(DataError) as err:
        run("m", _params(tmp_path / "rec.parquet"), out_root=tmp_path / "out")
    assert str(err.value).startswith(f"{tmp_path / 'rec.parquet'}: declares {n} rows ({n * 6 * 8} bytes as numbers")
    assert str(err.value).endswith(f"in a file of {size} bytes, beyond 64 times its size (a decompression bomb?)")
    assert not (tmp_path / "out" / "m").exists()


@pytest.mark.parametrize("chunk_rows", [100_000, 2])
def test_a_file_not_in_utf8_names_the_line(tmp_path, chunk_rows):
    """Before: pandas' message named a byte position inside its read buffer, not the line."""
    text = _table(shuffle=False).to_csv(index=False).replace("walk", "w\u00e9lk", 6)
    (tmp_path / "rec.csv").write_bytes(text.encode("latin-1"))
    first = next(i for i, line in enumerate(text.splitlines(), 1) if "\u00e9" in line)
    with pytest.raises(DataError) as err:
        run("m", _params(tmp_path / "rec.csv", chunk_rows=chunk_rows), out_root=tmp_path / "o")
    assert str(err.value) == f"{tmp_path / 'rec.csv'}: line {first}: not UTF-8 text (byte 0xe9); save the file as UTF-8"
    assert not (tmp_path / "o" / "m").exists()


@pytest.mark.parametrize("text", ["", "\n\n"])
def test_an_empty_file_says_so(tmp_path, text):
    (tmp_path / "rec.csv").write_text(text)
    with pytest.raises(DataError, match=r"rec\.csv: the file is empty \(expected a header row"):
        run("m", _params(tmp_path / "rec.csv"), out_root=tmp_path / "o")


def test_another_delimiter_is_named(tmp_path):
    _table(shuffle=False).to_csv(tmp_path / "rec.csv", index=False, sep=";")
    with pytest.raises(DataError, match=r"column 'who' not found .*; the header is one column: is the delimiter "
                                        r"';'\? set imports\.mine\.delimiter$"):
        run("m", _params(tmp_path / "rec.csv"), out_root=tmp_path / "o")
    run("m", _params(tmp_path / "rec.csv", delimiter=";"), out_root=tmp_path / "o")  # the hint works
    assert (tmp_path / "o" / "m" / "manifest.json").is_file()


def test_progress_callbacks_see_every_chunk_and_user(tmp_path):
    _table(shuffle=False).to_csv(tmp_path / "rec.csv", index=False)
    read, users = [], []
    run("m", _params(tmp_path / "rec.csv", chunk_rows=10), out_root=tmp_path / "o",
        on_read=lambda file, rows: read.append((file.name, rows)), on_user=lambda user, data: users.append(user))
    assert read == [("rec.csv", 10), ("rec.csv", 20), ("rec.csv", 2 * N)]
    assert users == ["u2", "u10"]


def _warnings(tmp_path, **kw):
    lines = []
    run("m", _params(tmp_path / "in", **kw), out_root=tmp_path / "o", warn=lines.append)
    return lines


def test_regular_input_imports_without_warnings(tmp_path):
    (tmp_path / "in").mkdir()
    _table().to_csv(tmp_path / "in" / "rec.csv", index=False)
    assert _warnings(tmp_path) == [] and _warnings(tmp_path, rate=None) == []


def test_a_user_in_two_files_is_warned_of_its_dropped_rows(tmp_path):
    """Data-contract §5 keeps the first row of equal times: silently, before, so a user's
    recording split over two files (or the wrong user column) lost rows unseen."""
    (tmp_path / "in").mkdir()
    df = _table(shuffle=False)
    df.to_csv(tmp_path / "in" / "a.csv", index=False)
    df[df.who == "u2"].head(5).to_csv(tmp_path / "in" / "b.csv", index=False)
    [line] = _warnings(tmp_path)
    assert line == (f"{tmp_path / 'in'}: rows at a time the user already has were dropped, the first kept "
                    "(u2: 5 rows); is a user in two files, or imports.mine.user the wrong column?")
    assert (tmp_path / "o" / "m" / "manifest.json").is_file()  # a warning, not a failure


def test_mixed_sampling_intervals_without_rate_are_warned_of(tmp_path):
    (tmp_path / "in").mkdir()
    df = _table(shuffle=False)
    df.loc[df.who == "u10", "t"] = 1000 + 40 * np.arange(N)  # u10 at 25 Hz, u2 at 100 Hz
    df.to_csv(tmp_path / "in" / "rec.csv", index=False)
    [line] = _warnings(tmp_path, rate=None)
    assert line.endswith("sampling intervals vary from 0.01 s to 0.04 s (10th to 90th percentile per user) and no "
                         "rate is set, so windows of 2 rows span different durations; set imports.mine.rate "
                         "(--rate) to resample"), line
    assert _warnings(tmp_path) == []  # rate 50 Hz: resampled


def test_cli_prints_warnings_on_stderr_and_succeeds(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    df = _table()
    pd.concat([df, df[df.who == "u2"]]).to_csv(tmp_path / "rec.csv", index=False)
    res = CliRunner().invoke(app, _cli_args(tmp_path), env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    assert res.stderr.startswith("warning: ") and "(u2: 14 rows)" in res.stderr, res.stderr


def test_cli_summary_shows_labels_with_brackets_as_they_are(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _table().replace({"act": {"walk": "[walk]", "rest": "rest[/x]"}}).to_csv(tmp_path / "rec.csv", index=False)
    res = CliRunner().invoke(app, _cli_args(tmp_path), env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    assert "class shares ([walk], rest[/x])" in res.output  # sorted: "[" before "r"


# ------------------------------------------------------------------ user-walkthrough audit
@pytest.mark.parametrize("key, listed, message", [
    # before: a 'run' never seen became a 0 % class column, silently
    ("classes", ["rest", "walk", "run"], "'run' has no rows in {src} (typo? the labels found: rest, walk)"),
    # before: imported, then every continual method failed trials later ("context 2 has no windows")
    ("contexts", ["s1", "s2", "car"], "'car' has no rows in {src} (typo? the contexts found: s1, s2)"),
])
def test_a_listed_class_or_context_without_rows_is_refused_naming_the_key_and_the_value(tmp_path, key, listed,
                                                                                       message):
    """A value of classes or contexts without a row is a typo far more often than a wish for an
    empty class or context: one error naming the key and the value, nothing written."""
    src = tmp_path / "rec.csv"
    _table().to_csv(src, index=False)
    with pytest.raises(DataError) as err:
        run("m", _params(src, **{key: listed}), out_root=tmp_path / "o")
    assert str(err.value) == f"imports.mine.{key}: " + message.format(src=src)
    assert not (tmp_path / "o" / "m").exists()
    assert run("m", _params(src, **{key: listed[:2][::-1]}), out_root=tmp_path / "o")[
        "classes" if key == "classes" else "context_names"] == listed[:2][::-1]  # listed values in that order


def test_a_class_whose_rows_fill_no_window_is_warned_of(tmp_path):
    df = _table(shuffle=False)
    df.loc[(df.who == "u2") & (df.t == 1130), "act"] = "jump"  # one row: the dropped tail of a run
    df.to_csv(tmp_path / "rec.csv", index=False)
    lines = []
    manifest = run("m", _params(tmp_path / "rec.csv"), out_root=tmp_path / "o", warn=lines.append)
    assert manifest["classes"] == ["jump", "rest", "walk"]
    assert lines == [f"{tmp_path / 'rec.csv'}: class 'jump' of imports.mine.label has rows but no step in any window "
                     "(they all fell in skipped users or the dropped tails of segments): no user can learn or be scored on it"]


@pytest.mark.parametrize("name, problem", [
    ("wesad", "'wesad' is one of the papers' datasets (data/processed/wesad is written by `esnfed preprocess` and "
              "read by the paper tables); name your own dataset otherwise"),
    ("hhar", "'hhar' is one of the papers' datasets"),
    ("ip", "'ip' is not a dataset name (ip, fedip, deep are keys of budgets.*.space beside the datasets')"),
    ("my-study", "'my-study' is not a dataset name (lowercase letters, digits and _, starting with a letter: it "
                 "names a folder, dvc stages and params.yaml keys)"),
    ("MyStudy", "'MyStudy' is not a dataset name"),
])
def test_import_and_params_yaml_share_one_dataset_name_rule(tmp_path, monkeypatch, name, problem):
    """Before: --dataset wesad replaced data/processed/wesad (the paper tables' input), imports.wesad
    passed the schema (dvc then failed on duplicate outputs), and my-study / MyStudy imported but
    could not be declared in datasets."""
    from esnfed_stages.params.schema import validate

    monkeypatch.chdir(tmp_path)
    _table().to_csv(tmp_path / "rec.csv", index=False)
    with pytest.raises(ConfigError) as err:
        run(name, _params(tmp_path / "rec.csv"), out_root=tmp_path / "out")
    assert str(err.value).startswith(f"--dataset: {problem}"), str(err.value)
    args = _cli_args(tmp_path)
    args[args.index("mine")] = name
    res = CliRunner().invoke(app, args, env={"COLUMNS": "300"})
    # a usage error naming --dataset (exit 2), as every other command's bad --dataset
    assert res.exit_code == 2 and f"Invalid value for --dataset: {problem}" in " ".join(res.output.split()), res.output
    assert not (tmp_path / "out").exists()
    entry = {"source": "rec.csv", "features": ["a"], "window": 2}
    with pytest.raises(ConfigError) as err:
        validate({"imports": {name: entry}})
    assert str(err.value).startswith(f"params.yaml: imports.{name}: {problem}"), str(err.value)
    if name not in ("wesad", "hhar"):  # the papers' names are declared datasets, not imports
        with pytest.raises(ConfigError, match=f"params.yaml: datasets: '{name}'"):
            validate({"datasets": [name]})


def test_the_example_dataset_is_an_import(tmp_path):
    """`example` is not reserved: dvc.yaml's import@example imports the synthesized CSV."""
    _table().to_csv(tmp_path / "rec.csv", index=False)
    assert run("example", _params(tmp_path / "rec.csv"), out_root=tmp_path / "out")["dataset"] == "example"


def test_a_user_without_a_whole_window_is_skipped_with_a_warning(tmp_path):
    """Before: one short user aborted the whole import."""
    df = _table(shuffle=False)
    short = pd.DataFrame({"who": "p9", "t": [1000, 1010], "act": "walk", "sess": "s1", "a": [1.0, 2.0], "b": 0.0})
    pd.concat([df, short]).to_csv(tmp_path / "rec.csv", index=False)
    lines = []
    manifest = run("m", _params(tmp_path / "rec.csv"), out_root=tmp_path / "o", warn=lines.append)
    assert list(manifest["users"]) == ["u2", "u10"] and check_folder(tmp_path / "o" / "m") == []
    assert lines == [f"{tmp_path / 'rec.csv'}: 1 user skipped, without a whole window of 2 steps at 50 Hz (0.04 s) in "
                     "a run of one context without a gap (p9: 0.01 s recorded, the longest run 0.01 s)"]


def test_no_user_with_a_whole_window_hints_at_the_time_unit(tmp_path):
    """The usual cause: times in ms read as us squeeze each recording into 0.13 ms."""
    _table().to_csv(tmp_path / "rec.csv", index=False)
    with pytest.raises(DataError) as err:
        run("m", _params(tmp_path / "rec.csv", time_unit="us"), out_root=tmp_path / "o")
    assert str(err.value) == (f"{tmp_path / 'rec.csv'}: no user has a whole window of 2 steps at 50 Hz (0.04 s) in a "
                              "run of one context without a gap (longest: 7e-05 s, user 'u2'); is "
                              "imports.mine.time_unit right (time read in microseconds: --time-unit)? "
                              "else shorten imports.mine.window")
    assert not (tmp_path / "o" / "m").exists()


def test_cli_contexts_give_the_order_else_the_summary_names_the_sorted_one(tmp_path, monkeypatch):
    """Before: no --contexts; sessions came out sorted, which silently changed the continual sequence."""
    monkeypatch.chdir(tmp_path)
    _table().to_csv(tmp_path / "rec.csv", index=False)
    res = CliRunner().invoke(app, _cli_args(tmp_path) + ["--contexts", "s2,s1"], env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "out/mine/manifest.json").read_text())["context_map"] == {"s2": 0, "s1": 1}
    assert "sorted order" not in res.output
    res = CliRunner().invoke(app, _cli_args(tmp_path), env={"COLUMNS": "300"})
    assert res.exit_code == 0, res.output
    assert ("contexts in sorted order (s1, s2): the continual methods meet them in this order; to give another (the "
            "recording order), set --contexts or imports.mine.contexts") in res.stdout
    res = CliRunner().invoke(app, _cli_args(tmp_path) + ["--contexts", "s2"], env={"COLUMNS": "300"})
    assert res.exit_code == 1 and "'s1' is not among --contexts (s2)" in res.output, res.output


def test_cli_max_gap_reaches_the_import(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _gapped(tmp_path)
    args = ["import", str(tmp_path / "gap.csv"), "--dataset", "mine", "--user", "who", "--time", "t", "--time-unit",
            "ms", "--label", "act", "--features", "a,b", "--rate", "50", "--window", "50", "--out", str(tmp_path / "o")]
    res = CliRunner().invoke(app, args, env={"COLUMNS": "300"})
    assert res.exit_code == 0 and "warning: " in res.stderr and "(u1: 1 gap, 10.02 s)" in res.stderr, res.output
    res = CliRunner().invoke(app, args + ["--max-gap", "11"], env={"COLUMNS": "300"})
    assert res.exit_code == 0 and res.stderr == "", res.output
    assert load_manifest(tmp_path / "o" / "mine")["users"]["u1"]["windows"] == 16
    res = CliRunner().invoke(app, args + ["--max-gap", "0"], env={"COLUMNS": "300"})
    assert res.exit_code == 2 and "'--max-gap': must be in (0, inf)" in " ".join(res.output.split()), res.output
    with pytest.raises(ConfigError, match=r"imports\.mine\.max_gap: "):
        _params(tmp_path / "x.csv", max_gap=-1)


# ------------------------------------------------------------------ missing feature values
# Rows of one user, irregular times; missing values (empty cells) in both features. With max_gap 3:
# f at t = 2.5, 4 from (2, 4) and (5, 10): 5, 8; f at 7 from (6, 7) and (8, 3): 5; g at 1 from
# (0, 1) and (2, 5): 3; g at 5, 6 from (4, 6) and (7, 0): 4, 2. f at t = 0 and t = 9 starts and
# ends the recording: their rows are dropped (no extrapolation).
HOLES = pd.DataFrame({"user": "a", "time": [0, 1, 2, 2.5, 4, 5, 6, 7, 8, 9], "label": ["x"] * 5 + ["y"] * 5,
                      "f": ["", 2, 4, "", "", 10, 7, "", 3, ""], "g": [1, "", 5, 5, 6, "", "", 0, 2, 4]})
FILLED_F, FILLED_G = [2, 4, 5, 8, 10, 7, 5, 3], [3, 5, 5, 6, 4, 2, 0, 2]  # rows at t = 1 .. 8


def _holes(tmp_path, **kw):
    HOLES.to_csv(tmp_path / "holes.csv", index=False)
    return import_params({"source": str(tmp_path / "holes.csv"), "features": ["f", "g"], "window": 8,
                          "max_gap": 3, **kw}, "imports.mine")


def test_missing_values_are_interpolated_linearly_in_time_and_dropped_at_the_edges(tmp_path):
    """Before: an empty feature cell stopped the import. Now, with missing: interpolate, each is
    interpolated from its channel's neighbours (exactly, by hand above); a value missing at the
    recording's start or end drops its row."""
    time = HOLES.time.to_numpy(float)
    feats = HOLES[["f", "g"]].replace("", np.nan).to_numpy(float)
    keep, filled = fill_missing(time, np.zeros(10, np.int64), feats, 3.0, "interpolate")
    assert keep.tolist() == [False] + [True] * 8 + [False]
    np.testing.assert_array_equal(filled[keep], np.column_stack([FILLED_F, FILLED_G]).astype(float))
    lines = []
    manifest = run("m", _holes(tmp_path, missing="interpolate"), out_root=tmp_path / "o", warn=lines.append)
    expected = np.column_stack([FILLED_F, FILLED_G]).astype(float)
    got = load_user(tmp_path / "o" / "m", "a")
    np.testing.assert_allclose(got.x[0], (expected - expected.mean(0)) / expected.std(0), rtol=1e-6, atol=1e-6)
    assert got.y.tolist() == [[0, 0, 0, 0, 1, 1, 1, 1]]
    assert manifest["params"]["missing"] == "interpolate"  # recorded, as the stale-data check reads it
    assert lines == [f"{tmp_path / 'holes.csv'}: 6 missing feature values interpolated linearly in time, 2 rows "
                     "dropped (imports.mine.missing = interpolate: never across a run of missing values over the "
                     "gap threshold (max_gap), which cuts the recording as a gap in time does, nor at a recording's "
                     "start or end) (a: 6 values interpolated, 2 rows dropped)"]


def test_a_missing_value_is_never_interpolated_across_a_context_change():
    """A context's last (or first) value is a recording's end (start): its row is dropped."""
    time = np.arange(6.0)
    feats = np.array([[0.0], [1.0], [np.nan], [3.0], [np.nan], [5.0]])
    keep, filled = fill_missing(time, np.array([0, 0, 0, 1, 1, 1]), feats, 10.0, "interpolate")
    assert keep.tolist() == [True, True, False, True, True, True] and filled[4, 0] == 4.0


def _holed(tmp_path, first: int, stop: int, **kw):
    """The gapped table of one user without a gap (50 Hz, 6 s), its column a missing in rows
    [first, stop); and the same table without those rows."""
    df = pd.read_csv(_gapped(tmp_path, gap_s=0.0, users=("u1",)))
    holed = df.astype({"a": object})
    holed.loc[first:stop - 1, "a"] = ""
    holed.to_csv(tmp_path / "holed.csv", index=False)
    df.drop(index=range(first, stop)).to_csv(tmp_path / "without.csv", index=False)
    return _params(tmp_path / "holed.csv", window=50, context=None, **kw), _params(tmp_path / "without.csv",
                                                                                   window=50, context=None)


@pytest.mark.parametrize("missing", ["interpolate", "drop"])
def test_a_hole_over_max_gap_cuts_the_recording_as_a_gap_does(tmp_path, missing):
    """100 rows (2 s between the values around them) without a value of a: over the default
    max_gap of 1 s the import equals that of the table without those rows (the gap cuts it, and
    is warned of as a gap); under a max_gap of 3 s interpolate fills the hole in (6 windows)."""
    holed, without = _holed(tmp_path, 40, 140, missing=missing)
    lines, plain = [], []
    run("m", holed, out_root=tmp_path / "holed", warn=lines.append)
    run("m", without, out_root=tmp_path / "without", warn=plain.append)
    a, b = load_user(tmp_path / "holed" / "m", "u1"), load_user(tmp_path / "without" / "m", "u1")
    assert a.windows == b.windows == 3  # 160 rows after the hole; the 40 before it fill no window
    np.testing.assert_array_equal(a.x, b.x)
    np.testing.assert_array_equal(a.y, b.y)
    [gap] = plain
    assert gap.endswith("(u1: 1 gap, 2.02 s, 1 window lost at the cuts)") and lines[1:] == [
        gap.replace(str(tmp_path / "without.csv"), str(tmp_path / "holed.csv"))]
    assert lines[0].startswith(f"{tmp_path / 'holed.csv'}: " + ("0 missing feature values interpolated linearly in "
                               "time, 100 rows dropped" if missing == "interpolate" else
                               "100 rows with a missing feature value dropped (imports.mine.missing = drop: "))
    lines.clear()
    holed = import_params({**holed.recorded(), "max_gap": 3.0}, "imports.mine")
    run("m", holed, out_root=tmp_path / "holed", warn=lines.append)
    assert load_manifest(tmp_path / "holed" / "m")["users"]["u1"]["windows"] == 6
    if missing == "interpolate":
        assert lines == [f"{tmp_path / 'holed.csv'}: 100 missing feature values interpolated linearly in time, 0 rows "
                         "dropped" + lines[0].split("dropped", 1)[1]]


def test_drop_removes_each_row_with_a_missing_value(tmp_path):
    """missing: drop keeps the complete rows only (t = 2 and 8 of HOLES); without a rate they are
    windowed as they are, the 6 s between them cut at max_gap 3 as a gap."""
    lines = []
    run("m", _holes(tmp_path, missing="drop", window=1), out_root=tmp_path / "o", warn=lines.append)
    got = load_user(tmp_path / "o" / "m", "a")
    np.testing.assert_allclose(got.x[:, 0], [[1, 1], [-1, -1]], atol=1e-6)  # (4, 5) and (3, 2), z-scored
    assert lines[0] == (f"{tmp_path / 'holes.csv'}: 8 rows with a missing feature value dropped (imports.mine.missing "
                        "= drop: where the rows left lie over the gap threshold (max_gap) apart, the recording is cut "
                        "as at a gap in time) (a: 8 rows)")
    assert lines[1].startswith(f"{tmp_path / 'holes.csv'}: 1 gap in time inside a context (over imports.mine.max_gap "
                               "= 3 s)")


@pytest.mark.parametrize("kw", [{}, {"missing": "refuse"}])
def test_a_missing_value_is_refused_by_default_as_before(tmp_path, kw):
    df = _table(shuffle=False).astype(object)
    df.loc[4, "a"] = ""
    df.to_csv(tmp_path / "rec.csv", index=False)
    with pytest.raises(DataError) as err:
        run("m", _params(tmp_path / "rec.csv", **kw), out_root=tmp_path / "out")
    assert str(err.value) == f"{tmp_path / 'rec.csv'}: row 5 (line 6), column 'a': '' is not a finite number"
    assert _params(tmp_path / "rec.csv").missing == "refuse"


@pytest.mark.parametrize("missing", ["interpolate", "drop"])
@pytest.mark.parametrize("column, value, expected", [
    ("t", "", "column 't': '' is not a finite number"),
    ("act", "", "column 'act': empty cell"),
    ("who", "", "column 'who': empty cell"),
    ("a", "inf", "column 'a': 'inf' is not a finite number"),
    ("b", "-inf", "column 'b': '-inf' is not a finite number"),
    ("a", "abc", "column 'a': 'abc' is not a finite number"),
])
def test_what_is_not_a_missing_feature_value_stays_an_error(tmp_path, missing, column, value, expected):
    df = _table(shuffle=False).astype(object)
    df.loc[4, column] = value
    df.to_csv(tmp_path / "rec.csv", index=False)
    with pytest.raises(DataError) as err:
        run("m", _params(tmp_path / "rec.csv", missing=missing), out_root=tmp_path / "out")
    assert str(err.value) == f"{tmp_path / 'rec.csv'}: row 5 (line 6), {expected}"


def test_a_nan_from_npz_or_text_is_a_missing_value(tmp_path):
    """An .npz float column holds NaN where a value is missing; a CSV may spell it NaN."""
    df = HOLES.replace("", np.nan)
    np.savez(tmp_path / "holes.npz", **{c: (df[c].to_numpy().astype(str) if c in ("user", "label")
                                           else df[c].to_numpy(float)) for c in df.columns})
    params = _holes(tmp_path, missing="interpolate")
    run("m", params, out_root=tmp_path / "csv")
    df.to_csv(tmp_path / "holes.csv", index=False, na_rep="NaN")
    run("m", params, out_root=tmp_path / "nan")
    run("m", import_params({**params.recorded(),
                            "source": str(tmp_path / "holes.npz")}), out_root=tmp_path / "npz")
    for other in ("nan", "npz"):
        np.testing.assert_array_equal(load_user(tmp_path / other / "m", "a").x, load_user(tmp_path / "csv/m", "a").x)


def test_a_bad_missing_value_is_refused_naming_the_key(tmp_path, monkeypatch):
    with pytest.raises(ConfigError) as err:
        _params(tmp_path / "x.csv", missing="fill")
    assert str(err.value) == "imports.mine.missing: expected one of refuse, interpolate, drop, got 'fill'"
    monkeypatch.chdir(tmp_path)
    _table().to_csv(tmp_path / "rec.csv", index=False)
    res = CliRunner().invoke(app, _cli_args(tmp_path) + ["--missing", "fill"], env={"COLUMNS": "300"})
    assert res.exit_code == 2 and "'--missing'" in res.output, res.output


def test_cli_missing_reaches_the_import(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    df = _table(shuffle=False).astype(object)
    df.loc[4, "a"] = ""
    df.to_csv(tmp_path / "rec.csv", index=False)
    res = CliRunner().invoke(app, _cli_args(tmp_path), env={"COLUMNS": "300"})
    assert res.exit_code == 1 and "column 'a': '' is not a finite number" in res.output, res.output
    res = CliRunner().invoke(app, _cli_args(tmp_path) + ["--missing", "interpolate"], env={"COLUMNS": "300"})
    assert res.exit_code == 0 and "1 missing feature value interpolated" in res.stderr, res.output
    assert load_manifest(tmp_path / "out" / "mine")["params"]["missing"] == "interpolate"


# ---------------------------------------------------------------- new recordings without labels
def test_unlabelled_recordings_import_the_same_windows_without_classes(tmp_path):
    """`labelled: false` (--unlabelled): the recordings without their label column give the windows,
    z-scores and contexts of the labelled import, y all 0, no classes; the folder passes check-data,
    and the stages that train or assess (checked_manifest's default) refuse it in one line."""
    from esnfed_stages.data.check_data import checked_manifest

    df = _table()
    df.to_csv(tmp_path / "rec.csv", index=False)
    df.drop(columns="act").to_csv(tmp_path / "new.csv", index=False)
    run("mine", _params(tmp_path / "rec.csv"), out_root=tmp_path / "labelled")
    manifest = run("mine", _params(tmp_path / "new.csv", labelled=False), out_root=tmp_path / "new")
    folder = tmp_path / "new" / "mine"
    assert check_folder(folder) == []
    assert manifest["labelled"] is False and manifest["classes"] == [] and manifest["n_classes"] == 0
    assert manifest["label_map"] == {} and manifest["context_map"] == {"s1": 0, "s2": 1}
    assert "label" not in manifest["params"] and manifest["params"]["labelled"] is False
    assert all(u["class_counts"] == [] for u in manifest["users"].values())
    assert "labelled" not in load_manifest(tmp_path / "labelled" / "mine")  # a labelled manifest as always
    for user in ("u2", "u10"):
        ref, got = load_user(tmp_path / "labelled" / "mine", user), load_user(folder, user)
        np.testing.assert_array_equal(got.x, ref.x)
        np.testing.assert_array_equal(got.context, ref.context)
        assert got.y.shape == ref.y.shape and not got.y.any()
    with pytest.raises(DataError) as err:
        checked_manifest(folder)
    assert str(err.value).startswith(f"{folder / 'manifest.json'}: labelled: false: the recordings were imported "
                                     "without labels (--unlabelled), for `esnfed predict` only")
    assert checked_manifest(folder, unlabelled=True)["users"] == manifest["users"]


def test_an_unlabelled_import_never_replaces_labelled_data_and_reads_no_classes(tmp_path):
    df = _table()
    df.to_csv(tmp_path / "rec.csv", index=False)
    df.drop(columns="act").to_csv(tmp_path / "new.csv", index=False)
    run("mine", _params(tmp_path / "rec.csv"), out_root=tmp_path / "out")
    before = {p.name: p.read_bytes() for p in (tmp_path / "out" / "mine").iterdir()}
    with pytest.raises(DataError, match=r"out/mine: holds labelled data; an unlabelled import does not replace it"):
        run("mine", _params(tmp_path / "new.csv", labelled=False), out_root=tmp_path / "out")
    assert {p.name: p.read_bytes() for p in (tmp_path / "out" / "mine").iterdir()} == before
    # the declared dataset's label settings are left out; given beside labelled: false, refused
    assert _params(tmp_path / "new.csv", labelled=False, classes=["rest", "walk"]).classes is None
    with pytest.raises(ConfigError, match=r"^--classes: an unlabelled import \(--labelled: false\) reads no label"):
        import_params({"source": "x.csv", "features": ["a"], "window": 2}, "imports.mine", labelled=False,
                      classes=("rest", "walk"))
    with pytest.raises(ConfigError, match=r"^imports.mine.labelled: expected true or false, got 'no'"):
        _params(tmp_path / "new.csv", labelled="no")


def test_cli_imports_unlabelled_recordings_and_check_data_accepts_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _table().drop(columns="act").to_csv(tmp_path / "rec.csv", index=False)
    runner = CliRunner()
    args = [a for a in _cli_args(tmp_path) if a not in ("--label", "act")] + ["--unlabelled"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "mine (import): 2 users, windows of 2 steps x 2 features" in res.output
    assert runner.invoke(app, ["check-data", str(tmp_path / "out" / "mine")]).exit_code == 0
    res = runner.invoke(app, [*args, "--classes", "rest,walk", "--out", str(tmp_path / "other")])
    assert res.exit_code == 1 and res.stderr.strip() == \
        "error: --classes: an unlabelled import (--labelled: false) reads no label column"
