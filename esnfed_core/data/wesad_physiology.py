"""Who a synthetic WESAD subject is: the cohort's shared sensor placement and posture changes
(:func:`population`, one draw per seed) and each subject's own baselines and condition effects
(:func:`physiology`; DATA-FACTS D: between-subject spread larger than the effects)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from esnfed_core.data.wesad_protocol import WEAK_STRESS


@dataclass
class Physiology:
    """Per-subject baselines and condition effects (baselines vary more than the effects)."""

    hr: np.ndarray  # bpm per code 0..7
    hrv: np.ndarray  # RR jitter SD (s) per code
    eda0: float
    eda_ratio: np.ndarray
    scr_rate: np.ndarray  # per minute
    resp_rate: np.ndarray  # breaths per minute
    resp_amp: np.ndarray
    emg_rms: np.ndarray  # mV
    emg_burst: np.ndarray  # extra RMS factor during bursts (speech, laughter)
    temp0: float
    temp_delta: np.ndarray
    acc_sd: np.ndarray  # g, chest movement
    wrist_acc_sd: np.ndarray
    posture: np.ndarray  # (8, 3) unit gravity vectors, chest
    wrist_posture: np.ndarray  # (8, 3) wrist
    ecg_amp: float
    t_wave: float
    resp_amp0: float
    wrist_eda0: float
    wrist_eda_power: float
    wrist_temp0: float
    wrist_temp_delta: float
    bvp_amp: float


def _rotate(v: np.ndarray, rng: np.random.Generator, degrees: float) -> np.ndarray:
    """``v`` turned by ``degrees`` about a random axis orthogonal to it."""
    axis = np.cross(v, rng.normal(size=3))
    axis /= np.linalg.norm(axis)
    a = math.radians(degrees)
    return v * math.cos(a) + np.cross(axis, v) * math.sin(a)


def _turn(v: np.ndarray, axis: np.ndarray, degrees: float) -> np.ndarray:
    """``v`` turned by ``degrees`` about ``axis`` made orthogonal to it (Rodrigues)."""
    axis = axis - v * (axis @ v)
    axis = axis / np.linalg.norm(axis)
    a = math.radians(degrees)
    return v * math.cos(a) + np.cross(axis, v) * math.sin(a)


def _jitter(axis: np.ndarray, rng: np.random.Generator, sd: float = 0.25) -> np.ndarray:
    out = axis + rng.normal(0, sd, size=3)
    return out / np.linalg.norm(out)


@dataclass(frozen=True)
class Population:
    """What every subject shares: the sensors sit the same way on everyone (chest strap, E4 on the
    wrist), and standing for the TSST, leaning back to meditate or walking between rooms turn the
    body the same way; each subject varies these by a few degrees."""

    chest_seated: np.ndarray
    wrist_seated: np.ndarray
    axes: np.ndarray  # (2, 3, 3) chest/wrist x (stress, meditation, transient) rotation axes


def population(seed: int) -> Population:
    """The shared sensor placement and posture-change axes of the seed's cohort."""
    rng = np.random.default_rng(np.random.SeedSequence([seed, 0]))  # subject keys are [seed, k >= 2]
    wrist = rng.normal(size=3)
    return Population(_rotate(np.array([1.0, 0.0, 0.0]), rng, 20.0), wrist / np.linalg.norm(wrist),
                      _unit(rng.normal(size=(2, 3, 3))))


def _unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def physiology(subject: str, rng: np.random.Generator, pop: Population) -> Physiology:
    def per_code(base, stress, fun, medi, transient, read):
        return np.array([transient, base, stress, fun, medi, read, read, read], dtype=np.float64)


    weak = subject in WEAK_STRESS
    hr0 = float(np.clip(rng.normal(72, 9), 52, 100))
    d_hr = float(np.clip(rng.normal(13, 9), -6, 45)) * (0.3 if weak else 1.0)
    ratio_s = float(np.clip(rng.lognormal(math.log(2.2), 0.5), 0.8, 6.0))
    ratio_s = 1.0 + (ratio_s - 1.0) * (0.15 if weak else 1.0)
    rr0 = rng.normal(14, 1.5)
    chest_seated = _rotate(pop.chest_seated, rng, rng.uniform(0, 10))  # how the strap sits on this body
    wrist_seated = _rotate(pop.wrist_seated, rng, rng.uniform(0, 20))
    posture = np.stack([chest_seated] * 8)
    ax = pop.axes
    posture[2] = _turn(chest_seated, _jitter(ax[0, 0], rng), rng.uniform(8, 25))  # standing for the TSST
    posture[4] = _turn(chest_seated, _jitter(ax[0, 1], rng), rng.uniform(3, 12))  # leaning back to meditate
    posture[0] = _turn(chest_seated, _jitter(ax[0, 2], rng), rng.uniform(5, 20))  # walking between rooms
    wrist = np.stack([wrist_seated] * 8)
    wrist[2] = _turn(wrist_seated, _jitter(ax[1, 0], rng), rng.uniform(30, 80))  # arm hangs or gestures
    wrist[0] = _turn(wrist_seated, _jitter(ax[1, 2], rng), rng.uniform(30, 80))
    wrist[4] = _turn(wrist_seated, _jitter(ax[1, 1], rng), rng.uniform(5, 25))
    emg0 = rng.uniform(0.008, 0.02)
    return Physiology(
        hr=per_code(hr0, hr0 + d_hr, hr0 + rng.normal(2, 2), hr0 + rng.normal(-2, 2), hr0 + 8, hr0 + 2),
        hrv=per_code(0.045, 0.02, 0.04, 0.05, 0.03, 0.04),
        eda0=float(np.clip(rng.lognormal(math.log(2.0), 0.6), 0.4, 8.0)),
        eda_ratio=per_code(1.0, ratio_s, rng.normal(1.03, 0.04), rng.normal(0.95, 0.04), 1.1, 1.05),
        scr_rate=per_code(1.0, rng.uniform(3, 8), 2.5, 0.5, 2.0, 1.5),
        resp_rate=per_code(rr0, rr0 + rng.uniform(2, 7), rr0 + 1, rng.uniform(6, 10), rr0 + 3, rr0),
        resp_amp=per_code(1.0, 0.85, 1.15, 1.6, 1.1, 0.9),
        emg_rms=emg0 * per_code(1.0, rng.uniform(1.5, 3.0), 1.4, 0.8, 2.0, 1.1),
        emg_burst=per_code(0.3, rng.uniform(2, 4), 2.0, 0.1, 1.0, 0.3),
        temp0=float(np.clip(rng.normal(34.2, 0.8), 32.5, 35.8)),
        temp_delta=per_code(0.0, -rng.uniform(0.2, 0.5), -0.05, 0.05, -0.1, 0.0),
        acc_sd=per_code(0.015, 0.05, 0.02, 0.008, 0.12, 0.012),
        wrist_acc_sd=per_code(0.036, 0.083, 0.020, 0.013, 0.15, 0.03),
        posture=posture,
        wrist_posture=wrist,
        ecg_amp=rng.uniform(0.6, 1.3),
        t_wave=rng.uniform(0.15, 0.35),
        resp_amp0=rng.uniform(5, 12),
        wrist_eda0=float(np.clip(rng.lognormal(math.log(0.9), 1.0), 0.06, 16.0)),
        wrist_eda_power=rng.uniform(0.7, 1.2),
        wrist_temp0=float(np.clip(rng.normal(33.4, 1.5), 29.5, 36.0)),
        wrist_temp_delta=-rng.uniform(0.3, 2.3) if rng.random() < 0.8 else rng.uniform(0, 0.3),
        bvp_amp=rng.uniform(40, 150),
    )
