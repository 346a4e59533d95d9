"""Synthetic WESAD in the original layout (WESAD/S<k>/S<k>.pkl as a Python 2 pickle, plus quest and
readme files): plausible chest and wrist physiology per condition, deterministic from a seed.

Each subject has their own baselines and condition responses (DATA-FACTS D: between-subject
spread larger than the effects); what the cohort shares (sensor placement, the way posture
changes between conditions) is one draw per seed, so that a model trained on more subjects
generalises better to new ones, as in the published tables.

This module writes the files (:func:`synthesize_wesad`, the quest and readme texts); the study
protocol and schedule are :mod:`esnfed_core.data.wesad_protocol`, the cohort and subjects'
physiology :mod:`esnfed_core.data.wesad_physiology`, the signals of a subject's pickle
:mod:`esnfed_core.data.wesad_signals`."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from esnfed_core.data import py2pickle
from esnfed_core.data.wesad import DIRNAME, SUBJECTS
from esnfed_core.data.wesad_protocol import FS, LENGTH_S, LOOSE_TEMP, QUEST_NAME, Block
from esnfed_core.data.wesad_signals import generate_subject
from esnfed_core.quote import quote
from esnfed_core.validation import check_param


def _minsec(seconds: float) -> str:
    """The quest files' minutes.seconds notation: 50:30 -> '50.3', 2:00 -> '2'."""
    s = int(round(seconds))
    text = f"{s // 60}.{s % 60:02d}".rstrip("0").rstrip(".")
    return text or "0"


def quest_csv(subject: str, blocks: list[Block], crop_s: float, shrink_s: float,
              rng: np.random.Generator) -> str:
    """``S<k>_quest.csv``: protocol order and times (raw-file clock: the pkl starts ``crop_s`` s in,
    label runs are the quest intervals shrunk by ``shrink_s``), then random questionnaire answers."""
    medi = iter(["Medi 2", "Medi 1"] if subject == "S14" else ["Medi 1", "Medi 2"])
    conds = [b for b in blocks if b.code <= 4]
    reads = [b for b in blocks if b.code >= 5]
    names = [next(medi) if b.code == 4 else QUEST_NAME[b.code] for b in conds] + \
        [QUEST_NAME[b.code] for b in reads]
    ordered = conds + reads
    starts = [_minsec(crop_s + b.start / FS - shrink_s) for b in ordered]
    ends = [_minsec(crop_s + b.stop / FS + shrink_s) for b in ordered]
    width = 27

    def row(cells: list[str]) -> str:
        return ";".join(cells + [""] * (width - len(cells)))

    lines = [row(["# Subj", subject]), row(["# ORDER"] + names), row(["# START"] + starts),
             row(["# END"] + ends), row([])]
    for tag, count, items, top in (("# PANAS", 5, 24, 5), ("# STAI", 5, 6, 4), ("# DIM", 5, 2, 9),
                                   ("# SSSQ", 1, 6, 5)):
        for _ in range(count):
            lines.append(row([tag] + [str(v) for v in rng.integers(1, top + 1, items)]))
        if tag != "# SSSQ":
            lines.append(row([]))
    return "\n".join(lines) + "\n"


def readme_txt(subject: str, rng: np.random.Generator) -> str:
    yes_no = lambda p: "YES" if rng.random() < p else "NO"  # noqa: E731
    note = "Chest temperature sensor was loose." if subject in LOOSE_TEMP else "-"
    return (
        "### Personal information ###\n"
        f"Age: {int(rng.integers(24, 36))}\nHeight (cm): {int(rng.integers(160, 195))}\n"
        f"Weight (kg): {int(rng.integers(55, 95))}\n"
        f"Gender: {'female' if rng.random() < 0.2 else 'male'}\n"
        f"Dominant hand: {'left' if rng.random() < 0.1 else 'right'}\n\n"
        "### Study pre-requisites ###\n"
        f"Did you drink coffee today? {yes_no(0.4)}\n"
        f"Did you drink coffee within the last hour? {yes_no(0.1)}\n"
        f"Did you do any sports today? {yes_no(0.2)}\n"
        f"Are you a smoker? {yes_no(0.1)}\n"
        "Did you smoke within the last hour? NO\n"
        f"Do you feel ill today? {yes_no(0.05)}\n\n"
        "### Additional notes ###\n"
        f"{note}\n"
    )


def synthesize_wesad(out_root: str | Path, seed: int, scale: float = 0.02,
                     subjects: list[str] | None = None, protocol: int = 2, progress=None) -> list[Path]:
    """Write ``<out_root>/WESAD/S<k>/{S<k>.pkl, S<k>_quest.csv, S<k>_readme.txt}``.

    ``scale`` multiplies every run duration (1 = the real 87-118 min per subject; the default
    0.02 gives about 60 one-second windows per subject). ``protocol`` of the Python 2 pickle: 2
    (compact binary) or 0 (Python 2's default text protocol, about 3x larger: at scale 1 the
    ~0.9 GB per subject of the real files). Same arguments -> same bytes.
    ``progress(subject)`` is called after each subject. Returns the written paths.
    """
    check_param("synthetic.wesad.seed", seed, integer=True, low=0)
    check_param("synthetic.wesad.scale", scale, low=0, low_open=True, high=1)
    if protocol not in py2pickle.PROTOCOLS:
        raise ValueError(f"synthetic.wesad.protocol: expected one of {', '.join(map(str, py2pickle.PROTOCOLS))}, got {quote(protocol)}")
    subjects = list(SUBJECTS) if subjects is None else subjects
    root = Path(out_root) / DIRNAME
    written = []
    for subject in subjects:
        if subject not in LENGTH_S:
            raise ValueError(f"synthetic.wesad.subjects: unknown subject {quote(subject)}")
        folder = root / subject
        folder.mkdir(parents=True, exist_ok=True)
        obj, blocks = generate_subject(subject, seed, scale)
        pkl = folder / f"{subject}.pkl"
        with open(pkl, "wb") as f:
            py2pickle.dump(obj, f, protocol)
        del obj
        # Side files come from their own stream so they never shift the signals' draws.
        side = np.random.default_rng(np.random.SeedSequence([seed, int(subject[1:]), 1]))
        quest = folder / f"{subject}_quest.csv"
        quest.write_text(quest_csv(subject, blocks, side.uniform(43, 165) * scale, 10 * scale, side), encoding="utf-8")
        readme = folder / f"{subject}_readme.txt"
        readme.write_text(readme_txt(subject, side), encoding="utf-8")
        written += [pkl, quest, readme]
        if progress is not None:
            progress(subject)
    return written
