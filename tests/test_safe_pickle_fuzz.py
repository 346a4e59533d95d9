"""Property-based fuzzing of the WESAD unpickler: real-format pickles (the synthetic generator's
subject, protocols 0 and 2, cut to a few rows) mutated byte by byte, spliced and truncated. Every
mutation gives a result or a one-line DataError, never another exception or a crash, and every
array it yields is a plain numeric array holding no more bytes than the file."""

from __future__ import annotations

import io

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from esnfed_core.data import py2pickle, safe_pickle, wesad_signals
from esnfed_core.errors import DataError


def _real_format(protocol: int) -> bytes:
    obj, _ = wesad_signals.generate_subject("S2", 7, 0.001)

    def cut(o):  # a few rows of each array: same structure, dtypes and opcodes, small file
        if isinstance(o, dict):
            return {k: cut(v) for k, v in o.items()}
        return o[:5] if isinstance(o, np.ndarray) else o

    buf = io.BytesIO()
    py2pickle.dump(cut(obj), buf, protocol)
    return buf.getvalue()


BASES = {p: _real_format(p) for p in py2pickle.PROTOCOLS}
INTERESTING = [b"\x00", b"\xff", b"\x7f", b"\x80", b"\xff\xff\xff\x7f", b"\x00\x00\x00\x80", b"(", b"t", b"b",
               b"R", b"\x85", b"\x87", b".", b"\n", b"'", b"I99999999999\n", b"L-1\n", b"N", b"]", b"}"]


@st.composite
def mutated(draw):
    data = bytearray(BASES[draw(st.sampled_from(py2pickle.PROTOCOLS))])
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["set", "interesting", "insert", "delete", "splice", "truncate"]))
        pos = draw(st.integers(0, len(data)))
        if kind == "set" and pos < len(data):
            data[pos] = draw(st.integers(0, 255))
        elif kind == "interesting":
            value = draw(st.sampled_from(INTERESTING))
            data[pos:pos + len(value)] = value
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del data[pos:pos + draw(st.integers(1, 16))]
        elif kind == "splice":  # a piece of the file copied elsewhere (repeats opcodes, states)
            start = draw(st.integers(0, len(data)))
            data[pos:pos] = data[start:start + draw(st.integers(1, 64))]
        elif kind == "truncate":
            del data[pos:]
    return bytes(data)


def _arrays(obj, depth=0):
    if isinstance(obj, np.ndarray):
        yield obj
    elif isinstance(obj, dict):
        for v in obj.values():
            yield from _arrays(v, depth + 1)
    elif isinstance(obj, (list, tuple)):
        for v in obj:
            yield from _arrays(v, depth + 1)


def test_the_bases_load_as_the_generator_wrote_them():
    for data in BASES.values():
        obj = safe_pickle.loads(data)
        assert obj["subject"] == "S2" and obj["signal"]["chest"]["Temp"].dtype == np.float32
        assert sum(1 for _ in _arrays(obj)) == 11  # 6 chest, 4 wrist, label


@settings(max_examples=400, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mutated())
def test_every_mutation_gives_a_result_or_a_one_line_data_error(data):
    try:
        obj = safe_pickle.loads(data, name="S2.pkl")
    except DataError as exc:
        msg = str(exc)
        assert msg.startswith("S2.pkl: ") and "\n" not in msg and len(msg) < 500, msg
        return
    for a in _arrays(obj):
        assert type(a) is np.ndarray and a.dtype.kind in "biuf" and a.dtype.fields is None
        assert a.nbytes <= len(data) and (a.flags.c_contiguous or a.flags.f_contiguous)
        a.sum()  # every element is readable


@pytest.mark.parametrize("protocol", py2pickle.PROTOCOLS)
def test_every_truncation_is_a_data_error(protocol):
    data = BASES[protocol]
    for n in range(len(data) - 1):
        with pytest.raises(DataError, match=r"^S2\.pkl: [^\n]+$"):  # one line naming the file
            safe_pickle.loads(data[:n], name="S2.pkl")
