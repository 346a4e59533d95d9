"""The signals of one synthetic WESAD subject (:func:`generate_subject`): chest (RespiBAN ECG,
respiration, EDA, EMG, temperature, ACC at 700 Hz) and wrist (Empatica E4 ACC, BVP, EDA, TEMP)
streams following the subject's schedule and physiology, as the dict of one ``S<k>.pkl``.

scipy.signal is imported where it is used: it takes ~0.4 s, and every stage's params check imports
this module (through esnfed_core.data.wesad_synth) for its signature (esnfed_stages.params.schema),
so a top-level import would slow every `esnfed` command down."""

from __future__ import annotations

import math

import numpy as np

from esnfed_core.data.wesad import WRIST_RATES
from esnfed_core.data.wesad_physiology import physiology, population
from esnfed_core.data.wesad_protocol import FS, LOOSE_TEMP, Block, labels, schedule

CTRL = 10  # Hz: rate of the slow "state" signals (condition effects, tonic levels)


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
