"""Typed client/server messages and the ledger that counts what crosses the wire.

A message can hold only what an algorithm sends (statistics, readouts, gains and biases, counts):
there is no message type for raw windows or states. Vocabulary after Flower: a server
*configures* a round, clients *fit* and answer, the server *aggregates*; ``num_examples`` weighs.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Literal

import numpy as np

from esnfed_core.readout import RidgeStats
from esnfed_core.validation import ParameterError, check_param

Direction = Literal["up", "down"]


class Message:
    """Base of every message: counts its floats (array elements) and bytes (arrays + ints)."""

    def _arrays(self) -> list[np.ndarray]:
        raise NotImplementedError

    def _ints(self) -> int:
        return 0

    @property
    def floats(self) -> int:
        return int(sum(a.size for a in self._arrays()))

    @property
    def nbytes(self) -> int:
        return int(sum(a.nbytes for a in self._arrays())) + 8 * self._ints()


def _payload(msg: Message, name: str, ndim: int) -> np.ndarray:
    """Check a field's dimensionality and store a read-only float copy (what was sent stays sent)."""
    value = getattr(msg, name)
    if not isinstance(value, np.ndarray) or value.ndim != ndim or value.dtype.kind != "f":
        raise ParameterError(
            f"{type(msg).__name__}.{name}: expected a {ndim}-D float array, got "
            f"{type(value).__name__} {getattr(value, 'dtype', '')} shape {np.shape(value)}"
        )
    arr = value.copy()
    arr.setflags(write=False)
    object.__setattr__(msg, name, arr)
    return arr


def _count(msg: Message, name: str) -> None:
    check_param(f"{type(msg).__name__}.{name}", getattr(msg, name), integer=True, low=0)


@dataclass(frozen=True, eq=False)
class StatsMessage(Message):
    """IncFed upload: a client's ridge statistics A (C×N), B (N×N) and counts."""

    stats: RidgeStats

    def __post_init__(self) -> None:
        if not isinstance(self.stats, RidgeStats):
            raise ParameterError(
                f"StatsMessage.stats: expected RidgeStats, got {type(self.stats).__name__}"
            )

    def _arrays(self):
        return [self.stats.a, self.stats.b]

    def _ints(self):
        return 2


@dataclass(frozen=True, eq=False)
class ReadoutMessage(Message):
    """A readout matrix W (C×N): IncFed/FedAvg download, FedAvg upload with ``num_examples``."""

    w: np.ndarray
    num_examples: int = 0

    def __post_init__(self) -> None:
        _payload(self, "w", 2)
        _count(self, "num_examples")

    def _arrays(self):
        return [self.w]

    def _ints(self):
        return 1


@dataclass(frozen=True, eq=False)
class PlasticityMessage(Message):
    """FedIP: the IP gain and bias (2N floats), with the sender's ``num_examples``."""

    gain: np.ndarray
    bias: np.ndarray
    num_examples: int = 0

    def __post_init__(self) -> None:
        if _payload(self, "gain", 1).shape != _payload(self, "bias", 1).shape:
            raise ParameterError(
                f"PlasticityMessage: gain {self.gain.shape} and bias {self.bias.shape} differ"
            )
        _count(self, "num_examples")

    def _arrays(self):
        return [self.gain, self.bias]

    def _ints(self):
        return 1


@dataclass(frozen=True, eq=False)
class ReservoirMessage(Message):
    """The one-off broadcast of the reservoir (W_in, Ŵ, leak, g, b) before training."""

    w_in: np.ndarray
    w: np.ndarray
    gain: np.ndarray
    bias: np.ndarray
    leak: float

    def __post_init__(self) -> None:
        n = _payload(self, "w_in", 2).shape[0]
        for name, shape in (("w", (n, n)), ("gain", (n,)), ("bias", (n,))):
            if _payload(self, name, len(shape)).shape != shape:
                raise ParameterError(
                    f"ReservoirMessage.{name}: expected shape {shape}, got {getattr(self, name).shape}"
                )
        check_param("ReservoirMessage.leak", self.leak, low=0.0, high=1.0, low_open=True)

    def _arrays(self):
        return [self.w_in, self.w, self.gain, self.bias, np.asarray([self.leak])]


@dataclass(frozen=True, eq=False)
class ModelMessage(Message):
    """A whole client model (ensemble upload): the client's own reservoir (W_in, Ŵ, g, b,
    leak), which the server cannot know when clients are provisioned independently, and its
    readout W (C×N, or C×(N+1) with readout.bias), with ``num_examples``. Unlike the setup broadcast it is always counted."""

    w_in: np.ndarray
    w: np.ndarray
    gain: np.ndarray
    bias: np.ndarray
    leak: float
    readout: np.ndarray
    num_examples: int = 0

    def __post_init__(self) -> None:
        n = _payload(self, "w_in", 2).shape[0]
        for name, shape in (("w", (n, n)), ("gain", (n,)), ("bias", (n,))):
            if _payload(self, name, len(shape)).shape != shape:
                raise ParameterError(f"ModelMessage.{name}: expected shape {shape}, got {getattr(self, name).shape}")
        if _payload(self, "readout", 2).shape[1] not in (n, n + 1):  # N+1: readout.bias
            raise ParameterError(f"ModelMessage.readout: expected (C, {n}) or (C, {n + 1}), got {self.readout.shape}")
        check_param("ModelMessage.leak", self.leak, low=0.0, high=1.0, low_open=True)
        _count(self, "num_examples")

    def _arrays(self):
        return [self.w_in, self.w, self.gain, self.bias, np.asarray([self.leak]), self.readout]

    def _ints(self):
        return 1


@dataclass(frozen=True)
class LedgerEntry:
    algorithm: str
    round: int
    client: str
    direction: Direction
    kind: str
    floats: int
    nbytes: int


@dataclass
class CommLedger:
    """Every message sent, with its size; summaries feed the communication-cost report."""

    entries: list[LedgerEntry] = field(default_factory=list)

    def record(self, algorithm: str, rnd: int, client: str, direction: Direction, msg: Message) -> Message:
        self.entries.append(
            LedgerEntry(algorithm, rnd, client, direction, type(msg).__name__, msg.floats, msg.nbytes)
        )
        return msg

    def totals(self, algorithm: str | None = None, *, include_setup: bool = False) -> dict[str, int]:
        """Floats and bytes in each direction (summed over clients and rounds)."""
        out = {"up_floats": 0, "up_bytes": 0, "down_floats": 0, "down_bytes": 0, "rounds": 0}
        rounds = set()
        for e in self.entries:
            if algorithm is not None and e.algorithm != algorithm:
                continue
            if e.kind == "ReservoirMessage" and not include_setup:
                continue
            out[f"{e.direction}_floats"] += e.floats
            out[f"{e.direction}_bytes"] += e.nbytes
            rounds.add(e.round)
        out["rounds"] = len(rounds)
        return out

    def as_records(self) -> list[dict]:
        return [{f.name: getattr(e, f.name) for f in fields(LedgerEntry)} for e in self.entries]
