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


@dataclass(frozen=True, eq=False)
class StatsMessage(Message):
    """IncFed upload: a client's ridge statistics A (C×N), B (N×N) and counts."""

    stats: RidgeStats

    def _arrays(self):
        return [self.stats.a, self.stats.b]

    def _ints(self):
        return 2


@dataclass(frozen=True, eq=False)
class ReadoutMessage(Message):
    """A readout matrix W (C×N): IncFed/FedAvg download, FedAvg upload with ``num_examples``."""

    w: np.ndarray
    num_examples: int = 0

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

    def _arrays(self):
        return [self.w_in, self.w, self.gain, self.bias, np.asarray([self.leak])]


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
