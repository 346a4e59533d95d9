"""Names and headers are checked before use: subjects and users from params.yaml are matched in
full before any path is built (no file outside the data root is opened), and the lazy .npz header
check uses exact integer arithmetic and refuses negative dimensions."""

from __future__ import annotations

import io
import zipfile

import numpy as np
import pytest

from esnfed_core.data import processed, wesad
from esnfed_core.data.processed import UserData, load_user, save_user, user_path
from esnfed_core.data.windows import NpyMember
from esnfed_core.errors import ConfigError, DataError
from esnfed_core.validation import ParameterError
from esnfed_stages.params import schema as params_schema
from esnfed_stages.data import partition
from test_wesad import PARAMS, chest_subject, write

BAD_NAMES = ["../S2", "S2/../../S2", "S2\n", "S2 ", "s2", "S", "S2x", "S\u0662", "", "S2\x00"]


@pytest.fixture
def outside(tmp_path, monkeypatch):
    """A raw root whose WESAD folder has S2, plus valid pickles just outside it (../S2.pkl and an
    absolute path); every pickle opened is recorded."""
    root = tmp_path / "raw"
    write(root, chest_subject())
    (root / "S2").mkdir()
    write(tmp_path / "elsewhere", chest_subject())  # tmp/elsewhere/WESAD/S2/S2.pkl
    (root / "S2.pkl").write_bytes((root / "WESAD" / "S2" / "S2.pkl").read_bytes())
    opened = []
    real = wesad.safe_pickle.load_path
    monkeypatch.setattr(wesad.safe_pickle, "load_path", lambda p: (opened.append(p), real(p))[1])
    return root, opened


@pytest.mark.parametrize("name", BAD_NAMES + ["ABSOLUTE"])
def test_wesad_subjects_are_matched_in_full_before_any_path_is_built(outside, tmp_path, name):
    root, opened = outside
    if name == "ABSOLUTE":
        name = str(tmp_path / "elsewhere" / "WESAD" / "S2" / "S2")  # <name>.pkl exists
    with pytest.raises(ParameterError) as err:
        list(wesad.preprocess_wesad(root, {**PARAMS, "subjects": [name]}))
    msg = str(err.value)
    assert msg.startswith("preprocess.wesad.subjects: ") and "not a subject name" in msg and "\n" not in msg
    assert opened == []
    with pytest.raises(DataError, match="not a WESAD subject name"):
        wesad.subject_path(root, name)


def test_good_subject_names_still_read(outside):
    root, opened = outside
    (name, data, _), = wesad.preprocess_wesad(root, PARAMS)
    assert name == "S2" and data.windows > 0 and opened == [root / "WESAD" / "S2" / "S2.pkl"]


def _spec(user: str, dataset: str) -> dict:
    ok = {"wesad": ["S2", "S3", "S4"], "hhar": ["a", "b", "c"]}[dataset]
    return {"train": {25: [ok[0]], 100: [ok[0], user]}, "validation": [ok[1]], "test": [ok[2]]}


@pytest.mark.parametrize("dataset, user", [("wesad", n) for n in BAD_NAMES] + [
    ("hhar", n) for n in ["../a", "a\n", "j", "A", "ab", "/tmp/a", "", "a/"]])
def test_partition_users_are_matched_in_full(dataset, user):
    with pytest.raises(ConfigError) as err:
        partition.check_spec(dataset, _spec(user, dataset))
    msg = str(err.value)
    assert f"partition.{dataset}.train.100" in msg and f"not a {dataset} user name" in msg and "\n" not in msg
    with pytest.raises(ConfigError, match="not a .* user name"):
        params_schema.validate({"partition": {dataset: _spec(user, dataset)}})


@pytest.mark.parametrize("dataset, user", [("wesad", "S17"), ("hhar", "i")])
def test_partition_accepts_the_real_names(dataset, user):
    assert user in partition.check_spec(dataset, _spec(user, dataset))["train"]["100"]


@pytest.mark.parametrize("user", ["../u", "/abs/u", "u\n", "a/b", ".."])
def test_processed_files_are_never_looked_up_outside_their_folder(tmp_path, user):
    rng = np.random.default_rng(0)
    data = UserData(rng.standard_normal((2, 3, 1)).astype(np.float32), np.zeros((2, 3), np.int8),
                    np.zeros(2, np.int8))
    (tmp_path / "processed").mkdir()
    save_user(tmp_path / "u.npz", data)  # ../u.npz from processed/
    with pytest.raises(DataError, match="is not a plain name"):
        user_path(tmp_path / "processed", user)
    with pytest.raises(DataError, match="is not a plain name"):
        load_user(tmp_path / "processed", user)
    assert processed.is_user_name("hhar", "i") and not processed.is_user_name("hhar", "i\n")


# ---------------------------------------------------------------- .npy headers of the lazy windows

def _npz_with_x_header(path, shape, data: bytes) -> None:
    """An uncompressed .npz whose x.npy header says ``shape`` (float32) followed by ``data``."""
    head = io.BytesIO()
    np.lib.format.write_array_header_1_0(head, {"descr": "<f4", "fortran_order": False, "shape": shape})
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as z:
        z.writestr("x.npy", head.getvalue() + data)


@pytest.mark.parametrize("shape, data, fragment", [
    # 2**62 * 4 * 10 float32 = 5 * 2**67 bytes, 0 modulo 2**64: an int64 product says "0 bytes"
    ((2**62, 4, 10), b"", f"says {5 * 2**67} bytes of data"),
    ((2**61, 2**3, 1), b"", f"says {2**66} bytes of data"),
    ((-2, -5, 3), b"\x00" * 120, "shape (-2, -5, 3)"),  # the product is positive and matches the data
    ((-1, 5, 3), b"", "shape (-1, 5, 3)"),
    ((4, 0, -3), b"", "shape (4, 0, -3)"),
])
def test_npy_headers_with_overflowing_or_negative_shapes_are_refused(tmp_path, shape, data, fragment):
    path = tmp_path / "u.npz"
    _npz_with_x_header(path, shape, data)
    with pytest.raises(DataError) as err:
        NpyMember(path, "x", np.float32)
    msg = str(err.value)
    # the header's own checks (esnfed_core.data.npz) say "array 'x'", NpyMember's size check "x"
    assert msg.startswith((f"{path}: x", f"{path}: array 'x'")) and fragment in msg and "\n" not in msg, msg


def test_a_valid_header_still_gives_the_windows(tmp_path):
    x = np.arange(2 * 3 * 4, dtype=np.float32).reshape(2, 3, 4)
    _npz_with_x_header(tmp_path / "u.npz", x.shape, x.tobytes())
    lazy = NpyMember(tmp_path / "u.npz", "x", np.float32)
    assert lazy.shape == (2, 3, 4) and lazy.size == 24 and np.array_equal(lazy[1], x[1])
