"""The WESAD study protocol as the synthetic data follows it (DATA-FACTS A): each subject's order
of conditions, real recording length and readme quirks, and the labelled schedule of blocks a
synthetic recording is generated on (:func:`schedule`, :func:`labels`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from esnfed_core.data.wesad import LABEL_RATE

FS = LABEL_RATE
# Protocol orders (DATA-FACTS A, checked against the quest files): baseline first, then either
# amusement first (8 subjects) or stress first (the rest, including S14).
FUN_FIRST = {"S4", "S5", "S7", "S8", "S10", "S13", "S15", "S17"}
NO_BREAD = {"S2"}  # S2 has no bRead block
WEAK_STRESS = {"S6", "S15"}  # readme: weak stress response
LOOSE_TEMP = {"S2", "S17"}  # readme: chest temperature sensor loose
# Real recording lengths in seconds (N = 700 T).
LENGTH_S = {"S2": 6079, "S3": 6493, "S4": 6423, "S5": 6258, "S6": 7071, "S7": 5238, "S8": 5466,
            "S9": 5223, "S10": 5496, "S11": 5233, "S13": 5537, "S14": 5548, "S15": 5252,
            "S16": 5631, "S17": 5920}
# Label codes: 0 transient, 1 baseline, 2 stress (TSST), 3 amusement, 4 meditation, 5/6/7 reading
# after baseline / stress / amusement.
QUEST_NAME = {1: "Base", 2: "TSST", 3: "Fun", 4: "Medi", 5: "bRead", 6: "sRead", 7: "fRead"}
MIN_CONDITION_S = 3.0  # floor of a scaled condition run: every context keeps >= 2 windows
MIN_OTHER_S = 0.5  # floor of scaled reading and transient runs


@dataclass(frozen=True)
class Block:
    code: int
    start: int  # sample index on the 700 Hz timeline
    stop: int


def _block_codes(subject: str) -> list[int]:
    if subject in FUN_FIRST:
        codes = [1, 5, 3, 7, 4, 2, 6, 4]  # Base bRead Fun fRead Medi1 TSST sRead Medi2
    else:
        codes = [1, 5, 2, 6, 4, 3, 7, 4]  # Base bRead TSST sRead Medi1 Fun fRead Medi2
    if subject in NO_BREAD:
        codes.remove(5)
    return codes


def schedule(subject: str, rng: np.random.Generator, scale: float) -> tuple[list[Block], int]:
    """Labelled blocks separated by transient (code 0) runs; returns the blocks and N samples."""
    codes = _block_codes(subject)
    dur = []
    medi = 0
    for c in codes:
        if c == 1:
            d = rng.uniform(1140, 1198)
        elif c == 2:
            d = rng.uniform(615, 725)
        elif c == 3:
            d = rng.uniform(362, 382)
        elif c == 4:
            d = (337.0 if medi == 0 else 394.0) if subject == "S17" else rng.uniform(380, 400)
            medi += 1
        else:
            d = rng.uniform(25, 63)
        dur.append(max(d * scale, MIN_CONDITION_S if c <= 4 else MIN_OTHER_S))
    # Transient runs fill the real recording length: one before, between and after the blocks.
    n_gaps = len(codes) + 1
    transient = max(LENGTH_S[subject] - sum(d / scale for d in dur), 60.0 * n_gaps)
    weights = rng.dirichlet(np.full(n_gaps, 2.0))
    gaps = [max(transient * w * scale, MIN_OTHER_S) for w in weights]
    blocks, t = [], gaps[0]
    for c, d, g in zip(codes, dur, gaps[1:]):
        blocks.append(Block(c, int(round(t * FS)), int(round((t + d) * FS))))
        t += d + g
    return blocks, int(round(t * FS))


def labels(blocks: list[Block], n: int) -> np.ndarray:
    out = np.zeros(n, dtype=np.int32)
    for b in blocks:
        out[b.start:b.stop] = b.code
    return out

