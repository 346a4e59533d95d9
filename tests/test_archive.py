"""Bounded, conflict-free unpacking (esnfed_core.data.archive): crafted zips are built here, each
limit and each conflict is refused with one line naming the archive and the member."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest

from esnfed_core.data import archive
from esnfed_core.errors import DataError


def _zip(members: list[tuple[str, bytes]], method: int = zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", method) as z:
        for name, data in members:
            if name.endswith("/"):
                z.mkdir(name.rstrip("/"))
            else:
                z.writestr(name, data)
    return buf.getvalue()


def _extract(tmp_path: Path, payload: bytes, budget: archive.Budget | None = None) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    src = tmp_path / "in.zip"
    src.write_bytes(payload)
    dest = tmp_path / "out"
    dest.mkdir()
    with archive.open_zip(src, "in.zip") as zf:
        archive.extract_all(zf, dest, "in.zip", budget=budget)
    archive.unpack_nested(dest, "in.zip", budget=budget)
    return dest


def _refused(tmp_path, payload, pattern, budget=None) -> str:
    with pytest.raises(DataError, match=pattern) as info:
        _extract(tmp_path, payload, budget)
    message = str(info.value)
    assert "\n" not in message and message.startswith("in.zip")
    return message


def test_real_layouts_fit_the_default_caps(tmp_path):
    e4 = _zip([("ACC.csv", b"1,2,3\n" * 1000), ("tags.csv", b"")])
    hhar_inner = _zip([("Activity recognition exp/", b""), ("Activity recognition exp/Phones_gyroscope.csv", b"x,y\n" * 100)])
    payload = _zip([("WESAD/S2/S2.pkl", b"p" * 5000), ("WESAD/S2/S2_E4_Data.zip", e4),
                    ("Activity recognition exp.zip", hhar_inner)])
    out = _extract(tmp_path, payload)
    assert (out / "WESAD/S2/S2_E4_Data/ACC.csv").read_bytes() == b"1,2,3\n" * 1000
    assert (out / "Activity recognition exp/Phones_gyroscope.csv").is_file()
    # The documented sizes of the real archives are within the caps (DATA-FACTS: WESAD ~17 GiB
    # unpacked, 92 + 15 x 8 members, two zip levels; HHAR ~3 GB).
    assert archive.MAX_UNPACKED_BYTES >= 2 * 17 * 2**30 and archive.MAX_MEMBERS >= 10 * (92 + 15 * 8)
    assert archive.MAX_NESTING >= 2


def test_total_bytes_cap(tmp_path):
    payload = _zip([("a.bin", b"a" * 3000), ("b.bin", b"b" * 3000)], zipfile.ZIP_STORED)
    message = _refused(tmp_path, payload, "MAX_UNPACKED_BYTES", archive.Budget(bytes_left=5000))
    assert "in.zip:b.bin" in message
    assert _extract(tmp_path / "ok", payload, archive.Budget(bytes_left=6000))  # exactly enough


def test_total_bytes_cap_counts_nested_zips(tmp_path):
    inner = _zip([("big.bin", b"x" * 4000)], zipfile.ZIP_STORED)
    payload = _zip([("n.zip", inner), ("a.bin", b"a" * 1000)], zipfile.ZIP_STORED)
    _refused(tmp_path, payload, r"in.zip:n.zip:big.bin: .*MAX_UNPACKED_BYTES",
             archive.Budget(bytes_left=len(inner) + 1000 + 3999))


def test_compression_ratio_cap(tmp_path):
    payload = _zip([("bomb.bin", b"\0" * (4 << 20))])  # deflates over 1000 times
    _refused(tmp_path, payload, r"in.zip:bomb.bin: expands more than 200 times.*MAX_RATIO",
             archive.Budget(ratio_floor=1 << 20))
    # the same ratio under the floor (a small member) is fine
    assert (_extract(tmp_path / "ok", payload) / "bomb.bin").stat().st_size == 4 << 20


def test_member_count_cap(tmp_path):
    inner = _zip([(f"f{i}.txt", b"x") for i in range(5)])
    payload = _zip([("a.txt", b"a"), ("n.zip", inner)])
    _refused(tmp_path, payload, r"in.zip:n.zip: 5 members, more than the 4 .*MAX_MEMBERS",
             archive.Budget(members_left=6))


def test_nesting_depth_cap(tmp_path):
    level3 = _zip([("deep.txt", b"d")])
    level2 = _zip([("l3.zip", level3)])
    payload = _zip([("l2.zip", level2)])
    _refused(tmp_path, payload, r"in.zip:l2/l3.zip: zips nested more than 2 deep .*MAX_NESTING",
             archive.Budget(max_nesting=2))
    assert (_extract(tmp_path / "ok", payload) / "l2/l3/deep.txt").read_bytes() == b"d"  # 3 levels: allowed


@pytest.mark.parametrize("members, pattern", [
    ([("a", b"file"), ("a/b.txt", b"x")], r"in.zip:a/b.txt: conflicts with the file 'a'"),
    ([("a/b.txt", b"x"), ("a", b"file")], r"in.zip:a: a folder of that name was already unpacked"),
    ([("a", b"file"), ("a/", b"")], r"in.zip:a/: duplicate member name"),
    ([("x.txt", b"1"), ("x.txt", b"2")], r"in.zip:x.txt: duplicate member name"),
    ([("d/x.txt", b"1"), ("d//x.txt", b"2")], r"in.zip:d//x.txt: duplicate member name"),
])
def test_conflicting_members(tmp_path, members, pattern):
    with pytest.warns(UserWarning, match="Duplicate name") if members[0][0] == members[1][0] else _nothing():
        payload = _zip(members)
    _refused(tmp_path, payload, pattern)


def test_nested_zip_may_not_overwrite_the_outer_archive(tmp_path):
    # a rooted nested zip (members under its own stem) unpacks beside itself: onto the outer file
    inner = _zip([("exp/data.csv", b"inner")])
    payload = _zip([("exp/data.csv", b"outer"), ("exp.zip", inner)])
    _refused(tmp_path, payload, r"in.zip:exp.zip:exp/data.csv: a file of that name was already unpacked")
    # an unrooted nested zip may not unpack into a folder the outer archive made
    payload = _zip([("S2_E4_Data/ACC.csv", b"outer"), ("S2_E4_Data.zip", _zip([("ACC.csv", b"inner")]))])
    _refused(tmp_path / "2", payload, r"in.zip:S2_E4_Data.zip: would unpack into 'S2_E4_Data'")


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False
