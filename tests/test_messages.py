"""Tests of the client/server messages: their float and byte counts, the ledger totals, and that a
message can only carry what the algorithms send (no raw windows or states)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import esnfed_core.messages as messages
from esnfed_core.messages import (
    CommLedger,
    Message,
    ModelMessage,
    PlasticityMessage,
    ReadoutMessage,
    ReservoirMessage,
    StatsMessage,
)
from esnfed_core.readout import RidgeStats
from esnfed_core.validation import ParameterError

N, C, U = 12, 3, 5


def stats_msg():
    rng = np.random.default_rng(0)
    return StatsMessage(RidgeStats(rng.standard_normal((C, N)), np.eye(N), 100, 4))


def all_messages():
    rng = np.random.default_rng(1)
    return {
        "stats": stats_msg(),
        "readout": ReadoutMessage(rng.standard_normal((C, N)), num_examples=4),
        "plasticity": PlasticityMessage(np.ones(N), np.zeros(N), num_examples=4),
        "reservoir": ReservoirMessage(
            np.ones((N, U)), np.eye(N), np.ones(N), np.zeros(N), leak=0.3
        ),
    }


def test_message_sizes():
    m = all_messages()
    assert m["stats"].floats == N * N + N * C
    assert m["readout"].floats == N * C
    assert m["plasticity"].floats == 2 * N
    assert m["reservoir"].floats == N * U + N * N + 2 * N + 1
    # float64 payloads plus 8 bytes per integer count.
    assert m["stats"].nbytes == 8 * (N * N + N * C) + 2 * 8
    assert m["readout"].nbytes == 8 * N * C + 8
    assert m["plasticity"].nbytes == 8 * 2 * N + 8


def test_ledger_totals_per_algorithm_direction_and_round():
    m = all_messages()
    ledger = CommLedger()
    ledger.record("incfed", 0, "setup", "down", m["reservoir"])
    for client in ("a", "b"):
        ledger.record("incfed", 0, client, "up", m["stats"])
        ledger.record("incfed", 0, client, "down", m["readout"])
    for rnd in range(3):
        ledger.record("fedip", rnd, "a", "up", m["plasticity"])
    inc = ledger.totals("incfed")
    assert inc["up_floats"] == 2 * (N * N + N * C)
    assert inc["down_floats"] == 2 * N * C  # the reservoir broadcast is set-up, not counted
    assert inc["up_bytes"] == 2 * m["stats"].nbytes and inc["rounds"] == 1
    with_setup = ledger.totals("incfed", include_setup=True)
    assert with_setup["down_floats"] == 2 * N * C + m["reservoir"].floats
    assert ledger.totals("fedip") == {
        "up_floats": 3 * 2 * N, "up_bytes": 3 * m["plasticity"].nbytes,
        "down_floats": 0, "down_bytes": 0, "rounds": 3,
    }
    assert ledger.totals()["up_floats"] == inc["up_floats"] + 3 * 2 * N
    records = ledger.as_records()
    assert len(records) == 8
    assert records[1] == {
        "algorithm": "incfed", "round": 0, "client": "a", "direction": "up",
        "kind": "StatsMessage", "floats": N * N + N * C, "nbytes": m["stats"].nbytes,
    }


def test_messages_are_frozen_and_keep_what_was_sent():
    w = np.random.default_rng(2).standard_normal((C, N))
    msg = ReadoutMessage(w, num_examples=3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        msg.w = np.zeros((C, N))
    with pytest.raises(ValueError, match="read-only"):
        msg.w[0, 0] = 1.0  # read-only payload
    w[:] = 0.0  # the sender changing its array later does not change the message
    assert np.abs(msg.w).max() > 0


def test_message_fields_are_fixed_and_typed():
    """Every message type declares a fixed set of typed fields: statistics, matrices, vectors,
    counts. No field is generic enough to hold a batch of windows or states."""
    kinds = {
        cls for cls in vars(messages).values()
        if isinstance(cls, type) and issubclass(cls, Message) and cls is not Message
    }
    assert kinds == {StatsMessage, ReadoutMessage, PlasticityMessage, ReservoirMessage, ModelMessage}
    allowed = {"RidgeStats", "np.ndarray", "int", "float"}
    for cls in kinds:
        assert dataclasses.is_dataclass(cls)
        for f in dataclasses.fields(cls):
            assert f.type in allowed, (cls.__name__, f.name, f.type)
    with pytest.raises(TypeError, match="unexpected keyword argument 'windows'"):
        ReadoutMessage(np.zeros((C, N)), windows=np.zeros((2, 10, U)))


def test_raw_windows_and_states_cannot_be_sent():
    windows = np.zeros((4, 10, U), np.float32)  # (W, T, U)
    states = np.zeros((10, 4, N), np.float32)  # (T, B, N)
    with pytest.raises(ParameterError, match="StatsMessage.stats: expected RidgeStats"):
        StatsMessage(windows)
    with pytest.raises(ParameterError, match="RidgeStats"):
        StatsMessage(RidgeStats(states, np.eye(N), 1, 1))
    with pytest.raises(ParameterError, match="ReadoutMessage.w: expected a 2-D float array"):
        ReadoutMessage(windows)
    with pytest.raises(ParameterError, match="PlasticityMessage.gain"):
        PlasticityMessage(states, np.zeros(N))
    with pytest.raises(ParameterError, match="ReservoirMessage.w"):
        ReservoirMessage(np.ones((N, U)), states, np.ones(N), np.zeros(N), leak=0.3)
    with pytest.raises(ParameterError, match=r"ReadoutMessage.num_examples: must be >= 0, got -1"):
        ReadoutMessage(np.zeros((C, N)), num_examples=-1)
