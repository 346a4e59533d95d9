"""The embedded example of a user's own dataset: a plain CSV of wearable recordings,
as a study might export it, for `esnfed import` (params.yaml imports.example).

Layout: <root>/EXAMPLE/recordings.csv with the columns subject, t_ms, session, activity, acc_x,
acc_y, acc_z, hr: one row per sample at about ``rate`` Hz (the clock jitters by a few ms, so the
import must resample), each subject recorded in two sessions (the contexts: the strap sits
differently in the second, which shifts and scales the accelerometer), performing rest, walk and
run for ``seconds_per_activity`` each. Same seed, same bytes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import numpy as np

ACTIVITIES = ("rest", "walk", "run")
SESSIONS = ("morning", "evening")
COLUMNS = ("subject", "t_ms", "session", "activity", "acc_x", "acc_y", "acc_z", "hr")
# (step frequency Hz, acceleration amplitude g, heart rate bpm) per activity
_MOTION = {"rest": (0.3, 0.1, 72.0), "walk": (1.8, 0.35, 80.0), "run": (2.4, 0.5, 88.0)}
NOISE = (0.25, 4.0)  # sd of the accelerometer (g) and heart-rate (bpm) noise: the classes overlap


def _session(rng: np.random.Generator, activity_order: list[str], seconds: float, rate: float,
             start_ms: float, shift: float, gain: float) -> list[tuple]:
    rows = []
    n = int(round(seconds * rate))
    t = start_ms
    for activity in activity_order:
        freq, amp, bpm = _MOTION[activity]
        phase = rng.uniform(0, 2 * np.pi)
        k = np.arange(n)
        times = t + k * 1000.0 / rate + rng.integers(-3, 4, size=n)  # clock jitter, ms
        s = np.sin(2 * np.pi * freq * k / rate + phase)
        acc = np.stack([s, np.cos(2 * np.pi * freq * k / rate + phase), s * s], axis=1) * amp
        acc = gain * (acc + rng.normal(0, NOISE[0], size=acc.shape)) + shift
        acc[:, 2] += 1.0  # gravity on z
        hr = bpm + np.cumsum(rng.normal(0, 0.3, size=n)) + rng.normal(0, NOISE[1], size=n)
        rows += [(int(times[i]), activity, *acc[i], hr[i]) for i in range(n)]
        t += n * 1000.0 / rate
    return rows


def synthesize_example(root: Path, seed: int, subjects: int = 10, seconds_per_activity: float = 8.0,
                       rate: float = 50.0, progress: Callable[..., None] | None = None) -> list[Path]:
    """Write <root>/EXAMPLE/recordings.csv; return the files written."""
    rng = np.random.default_rng(seed)
    folder = Path(root) / "EXAMPLE"
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "recordings.csv"
    lines = [",".join(COLUMNS)]
    for s in range(1, subjects + 1):
        name = f"P{s:02d}"
        for j, session in enumerate(SESSIONS):
            order = list(rng.permutation(ACTIVITIES))
            shift, gain = (0.0, 1.0) if j == 0 else (rng.uniform(0.2, 0.4), rng.uniform(1.2, 1.5))
            start = 3_600_000.0 * (8 + 10 * j)  # 08:00 and 18:00, in ms
            for t, activity, ax, ay, az, hr in _session(rng, order, seconds_per_activity, rate, start, shift, gain):
                lines.append(f"{name},{t},{session},{activity},{ax:.4f},{ay:.4f},{az:.4f},{hr:.1f}")
        if progress is not None:
            progress(name)
    path.write_text("\n".join(lines) + "\n", encoding="ascii")
    return [path]
