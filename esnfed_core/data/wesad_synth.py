"""Synthetic WESAD in the original layout (WESAD/S<k>/S<k>.pkl as a Python 2 pickle, plus quest and
readme files): plausible chest and wrist physiology per condition, deterministic from a seed.

Each subject has their own baselines and condition responses (DATA-FACTS D: between-subject
spread larger than the effects); what the cohort shares (sensor placement, the way posture
changes between conditions) is one draw per seed, so that a model trained on more subjects
generalises better to new ones, as in the published tables.

scipy.signal is imported where it is used: it takes ~0.4 s, and every stage's params check imports
this module for its signature (esnfed_stages.params.schema), so a top-level import would slow every
`esnfed` command down."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from esnfed_core.data import py2pickle
from esnfed_core.data.wesad import DIRNAME, LABEL_RATE, SUBJECTS, WRIST_RATES
from esnfed_core.quote import quote
from esnfed_core.validation import check_param

FS = LABEL_RATE
CTRL = 10  # Hz: rate of the slow "state" signals (condition effects, tonic levels)
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


# ---------------------------------------------------------------- the schedule

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


# ---------------------------------------------------------------- per-subject physiology

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


def _smooth(x: np.ndarray, tau_s: float, rate: float) -> np.ndarray:
    """First-order lag (time constant ``tau_s``) along axis 0, started at the first value."""
    from scipy.signal import lfilter  # noqa: PLC0415 (a slow import: see the module docstring)
    a = math.exp(-1.0 / (tau_s * rate))
    x = np.asarray(x, dtype=np.float64)
    zi = (a * x[:1])[None] if x.ndim > 1 else np.array([a * x[0]])
    y, _ = lfilter([1 - a], [1, -a], x, axis=0, zi=zi)
    return y


def _slow_noise(rng: np.random.Generator, n: int, rate: float, knot_s: float, sd: float) -> np.ndarray:
    """A smooth random walk sampled at ``rate``: Gaussian knots every ``knot_s`` s, linearly joined."""
    knots = int(n / rate / knot_s) + 2
    walk = np.cumsum(rng.normal(0, sd / math.sqrt(knots), size=knots))
    walk -= walk.mean()
    return np.interp(np.arange(n) / rate, np.arange(knots) * knot_s, walk)


def _adc(v: np.ndarray, to_raw, from_raw) -> np.ndarray:
    """Quantise through the RespiBAN 16-bit ADC and its SI conversion (DATA-FACTS A)."""
    return from_raw(np.clip(np.round(to_raw(v)), 0, 65535))


def _ecg_template(amp: float, t_wave: float) -> np.ndarray:
    """One PQRST complex (mV) on [-0.25 s, +0.45 s] as a sum of Gaussians."""
    t = np.arange(-0.25 * FS, 0.45 * FS) / FS
    waves = [(0.12, -0.18, 0.025), (-0.12, -0.03, 0.010), (1.0, 0.0, 0.011), (-0.25, 0.03, 0.012),
             (t_wave, 0.26, 0.05)]
    return amp * sum(a * np.exp(-0.5 * ((t - mu) / s) ** 2) for a, mu, s in waves)


def _bvp_template() -> np.ndarray:
    rate = WRIST_RATES["BVP"]
    t = np.arange(0, 0.9 * rate) / rate
    return np.exp(-0.5 * ((t - 0.15) / 0.07) ** 2) + 0.35 * np.exp(-0.5 * ((t - 0.42) / 0.09) ** 2)


def generate_subject(subject: str, seed: int, scale: float) -> tuple[dict, list[Block]]:
    """The dict of one ``S<k>.pkl`` ({'signal': {'chest', 'wrist'}, 'label', 'subject'}) and its
    labelled blocks."""
    k = int(subject[1:])
    rng = np.random.default_rng(np.random.SeedSequence([seed, k]))
    blocks, n = schedule(subject, rng, scale)
    label = labels(blocks, n)
    phy = physiology(subject, rng, population(seed))
    T = n / FS
    tau = float(np.clip(20.0 * scale, 0.5, 20.0))  # how fast the body follows a condition change

    # Slow state at CTRL Hz: the code of each control sample, then lagged condition effects.
    nc = int(math.ceil(T * CTRL)) + 2
    tc = np.arange(nc) / CTRL
    code_c = label[np.minimum((tc * FS).astype(np.int64), n - 1)]
    t = np.arange(n) / FS

    def state(per_code: np.ndarray, tau_s: float = tau) -> np.ndarray:
        return _smooth(per_code[code_c], tau_s, CTRL)

    def at(x_c: np.ndarray, times: np.ndarray = t) -> np.ndarray:
        return np.interp(times, tc, x_c)

    # Heart: beat times from the lagged heart rate, with HRV and respiratory sinus arrhythmia.
    hr_c = state(phy.hr) * np.exp(_slow_noise(rng, nc, CTRL, 30.0 * max(scale, 0.05), 0.05))
    hrv_c = state(phy.hrv)
    rr_c = state(phy.resp_rate) * np.exp(_slow_noise(rng, nc, CTRL, 10.0, 0.08))
    resp_phase_c = 2 * np.pi * np.cumsum(rr_c / 60.0) / CTRL
    beats = []
    tb = rng.uniform(0, 0.8)
    while tb < T:
        beats.append(tb)
        i = min(int(tb * CTRL), nc - 1)
        rr = 60.0 / hr_c[i] * (1 + 0.04 * math.sin(resp_phase_c[i])) + rng.normal(0, hrv_c[i])
        tb += max(rr, 0.3)
    beats = np.asarray(beats)

    ecg = np.zeros(n)
    tmpl = _ecg_template(phy.ecg_amp, phy.t_wave)
    off = int(0.25 * FS)
    for b in (beats * FS).astype(np.int64):
        lo, hi = b - off, b - off + tmpl.size
        a, z = max(lo, 0), min(hi, n)
        if a < z:
            ecg[a:z] += tmpl[a - lo:z - lo]
    resp_phase = at(resp_phase_c)
    ecg += 0.06 * np.sin(resp_phase) + at(_slow_noise(rng, nc, CTRL, 5.0, 0.05))
    ecg += rng.normal(0, 0.012, n)
    ecg = _adc(ecg, lambda v: (v / 3 + 0.5) * 65536, lambda s: (s / 65536 - 0.5) * 3)

    # Respiration (% of belt stretch): slower and deeper in meditation, faster and shallower in stress.
    amp = phy.resp_amp0 * at(state(phy.resp_amp)) * np.exp(at(_slow_noise(rng, nc, CTRL, 8.0, 0.2)))
    resp = amp * (np.sin(resp_phase) + 0.25 * np.sin(2 * resp_phase + 0.7))
    resp += at(_slow_noise(rng, nc, CTRL, 20.0, 2.0)) + rng.normal(0, 0.3, n)
    resp = _adc(resp, lambda v: (v / 100 + 0.5) * 65536, lambda s: (s / 65536 - 0.5) * 100)

    # EDA (µS): tonic level times the condition ratio and a drift, plus skin conductance responses.
    tonic_c = phy.eda0 * state(phy.eda_ratio) * np.exp(_slow_noise(rng, nc, CTRL, 60.0 * max(scale, 0.05), 0.15))
    events = rng.random(nc) < state(phy.scr_rate) / 60.0 / CTRL
    scr_amp = np.where(events, rng.lognormal(math.log(0.06 * math.sqrt(phy.eda0)), 0.5, nc), 0.0)
    kt = np.arange(0, 20 * CTRL) / CTRL
    kernel = np.exp(-kt / 2.5) - np.exp(-kt / 0.7)
    scr_c = np.convolve(scr_amp, kernel / kernel.max())[:nc]
    eda = at(tonic_c + scr_c) + rng.normal(0, 0.003, n)
    eda = _adc(np.maximum(eda, 0.01), lambda v: v * 0.12 / 3 * 65536, lambda s: s / 65536 * 3 / 0.12)

    # EMG (mV): zero-mean noise whose RMS follows the condition and on/off bursts (speech, laughter).
    bursts = np.minimum(_smooth((rng.random(nc) < 0.08).astype(float), 0.4, CTRL) * 6, 1.0)
    rms_c = state(phy.emg_rms) * (1 + bursts * state(phy.emg_burst))
    emg = rng.normal(0, 1, n) * at(rms_c) + 0.02 * ecg
    emg = _adc(emg, lambda v: (v / 3 + 0.5) * 65536, lambda s: (s / 65536 - 0.5) * 3)

    # Temperature (°C, float32): slow drift over the session, a dip under stress.
    temp_c = phy.temp0 + _slow_noise(rng, nc, CTRL, 120.0 * max(scale, 0.05), 0.5)
    temp_c = temp_c + state(phy.temp_delta, 3 * tau)
    if subject in LOOSE_TEMP:  # a loose sensor: intermittent drops towards room temperature
        temp_c = temp_c - 1.5 * np.clip(_slow_noise(rng, nc, CTRL, 30.0 * max(scale, 0.05), 1.0), 0, None)
    temp = (at(temp_c) + rng.normal(0, 0.01, n)).astype(np.float32)

    # Chest ACC (g): posture-dependent gravity, movement (walking in transients), breathing.
    grav_c = state(phy.posture[:, 0]), state(phy.posture[:, 1]), state(phy.posture[:, 2])
    grav = np.stack(grav_c, axis=1)
    for j in range(3):  # people shift in their seat: the posture wanders by a few degrees
        grav[:, j] += _slow_noise(rng, nc, CTRL, 30.0 * max(scale, 0.05), 0.08)
    grav /= np.linalg.norm(grav, axis=1, keepdims=True)
    move_rate = 50
    nm = int(math.ceil(T * move_rate)) + 2
    tm = np.arange(nm) / move_rate
    sd_m = np.interp(tm, tc, state(phy.acc_sd))
    move = rng.normal(0, 1, (nm, 3)) * sd_m[:, None]
    move = (move + np.roll(move, 1, 0) + np.roll(move, 2, 0)) / math.sqrt(3)
    walking = np.interp(tm, tc, (code_c == 0).astype(float)) * (sd_m > 0.05)
    move[:, 0] += 0.2 * walking * np.sin(2 * np.pi * 1.8 * tm)
    acc = np.empty((n, 3))
    for j in range(3):
        acc[:, j] = at(grav[:, j]) + np.interp(t, tm, move[:, j])
    acc[:, 2] += 0.004 * np.sin(resp_phase)
    acc += rng.normal(0, 0.002, (n, 3))
    # The real conversion of ACC ran in float32 (values such as 7.20000029e-01), stored as float64.
    acc = _adc(acc, lambda v: ((v + 1) / 2 * 10000 + 28000),
               lambda s: ((s.astype(np.float32) - 28000) / 10000 * 2 - 1).astype(np.float64))

    chest = {"ACC": acc, "ECG": ecg[:, None], "EMG": emg[:, None], "EDA": eda[:, None],
             "Temp": temp[:, None], "Resp": resp[:, None]}
    del t, acc, ecg, emg, eda, temp, resp, resp_phase, amp
    wrist = _wrist(phy, rng, T, tc, state, beats, tonic_c, scr_c, move_rate, tm, walking)
    return {"signal": {"chest": chest, "wrist": wrist}, "label": label, "subject": subject}, blocks


def _wrist(phy, rng, T, tc, state, beats, tonic_c, scr_c, move_rate, tm, walking) -> dict:
    """Empatica E4 streams: ACC 32 Hz (1/64 g integers), BVP 64 Hz, EDA and TEMP 4 Hz."""
    n_acc = int(T * WRIST_RATES["ACC"])
    ta = np.arange(n_acc) / WRIST_RATES["ACC"]
    grav = np.stack([np.interp(ta, tc, state(phy.wrist_posture[:, j])) for j in range(3)], axis=1)
    grav /= np.linalg.norm(grav, axis=1, keepdims=True)
    sd = np.interp(ta, tc, state(phy.wrist_acc_sd))
    move = rng.normal(0, 1, (n_acc, 3)) * sd[:, None]
    move[:, 1] += 0.5 * np.interp(ta, tm, walking) * np.sin(2 * np.pi * 0.9 * ta)  # arm swing
    acc = np.clip(np.round((grav + move) * 64), -128, 127)

    n_bvp = int(T * WRIST_RATES["BVP"])
    bvp = np.zeros(n_bvp)
    tmpl = _bvp_template()
    vaso = np.interp(beats, tc, state(np.where(np.arange(8) == 2, 0.7, 1.0)))
    for b, v in zip(((beats + 0.25) * WRIST_RATES["BVP"]).astype(np.int64), vaso):
        z = min(b + tmpl.size, n_bvp)
        if b < z:
            bvp[b:z] += phy.bvp_amp * v * tmpl[:z - b]
    bvp -= np.convolve(bvp, np.ones(64) / 64, mode="same")  # the E4 BVP is AC-coupled
    tb = np.arange(n_bvp) / WRIST_RATES["BVP"]
    bvp += 300 * np.interp(tb, ta, np.abs(move).sum(axis=1)) * rng.normal(0, 1, n_bvp)  # motion
    bvp += rng.normal(0, 2.0, n_bvp)

    n_slow = int(T * WRIST_RATES["EDA"])
    ts = np.arange(n_slow) / WRIST_RATES["EDA"]
    ratio = tonic_c / phy.eda0
    eda = phy.wrist_eda0 * np.interp(ts, tc, ratio) ** phy.wrist_eda_power
    eda = eda + 0.5 * np.interp(ts - 1.0, tc, scr_c) * phy.wrist_eda0 / phy.eda0
    eda = np.maximum(eda + rng.normal(0, 0.005, n_slow), 0.0)
    delta = np.where(np.arange(8) == 2, phy.wrist_temp_delta, np.where(np.arange(8) == 4, -0.3, 0.0))
    temp = phy.wrist_temp0 + np.interp(ts, tc, state(delta) + _slow_noise(rng, tc.size, CTRL, 60.0, 0.4))
    temp = np.round((temp + rng.normal(0, 0.02, n_slow)) / 0.02) * 0.02
    return {"ACC": acc, "BVP": bvp[:, None], "EDA": np.round(eda, 6)[:, None], "TEMP": temp[:, None]}


# ---------------------------------------------------------------- the other files of a subject

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


# ---------------------------------------------------------------- entry point

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
