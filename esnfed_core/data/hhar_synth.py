"""The embedded HHAR default: writes the four UCI CSVs of `Activity recognition exp/` (and optionally
the UCI zip with its nested zip) with the real header, quirks and plausible, learnable signals.

Facts come from DATA-FACTS B and D: six models with two copies each at their nominal rates, batched
epoch-ms Arrival_Time, device-dependent Creation_Time (epoch ns or ns since boot at µs resolution),
Index restarting per recording and out of order inside arrival batches, literal ``null`` activity
between activities, quantisation steps, ±1 % rate jitter and dropped samples. Every device copy
samples one shared, closed-form body motion per user at its own times, so the devices agree the
way real co-worn devices do, while the mounting orientation, calibration and noise differ.

What makes the activities learnable across users is what makes the real ones so: each activity
has its own motion (gait at the step frequency with its harmonics, slower with a push and a
forward lean on stairs up, heel-strike jolts on stairs down, pedalling with road vibration on the
bike) and its own posture, i.e. where gravity points in the device frame; the biomechanics (how
the axes move together, how the pouch and the strap sit) are shared by everyone, and each user
varies them a little (amplitude ×0.8–1.2, cadence 1.7–2.0 Hz, postures and axis phases).
Every random draw comes from a numpy Generator seeded by (seed, user, device, sensor): the same
seed gives the same bytes, whatever the order of generation.

scipy.signal is imported where it is used: it takes ~0.4 s, and every stage's params check imports
this module for its signature (esnfed_stages.params.schema), so a top-level import would slow every
`esnfed` command down.
"""

from __future__ import annotations

import io
import os
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Callable

import numpy as np

from esnfed_core.quote import quote
from esnfed_core.validation import check_param

USERS = ("a", "b", "c", "d", "e", "f", "g", "h", "i")
ACTIVITIES = ("stand", "sit", "walk", "stairsup", "stairsdown", "bike")
HEADER = "Index,Arrival_Time,Creation_Time,x,y,z,User,Model,Device,gt\n"
FOLDER = "Activity recognition exp"
INNER_ZIP = "Activity recognition exp.zip"
STILL_ZIP = "Still exp.zip"
OUTER_ZIP = "heterogeneity+activity+recognition.zip"
FILES = ("Phones_accelerometer", "Phones_gyroscope", "Watch_accelerometer", "Watch_gyroscope")
G = 9.80665


@dataclass(frozen=True)
class _Model:
    """What distinguishes one device model: rate, clock base, resolution and noise floor."""

    kind: str  # "phone" (waist pouch) or "watch" (wrist)
    rate: float  # nominal Hz (DATA-FACTS B)
    boot_digits: int  # 0: epoch-ns Creation_Time; else ns since boot with this many digits
    acc_step: float  # quantisation, m/s² (samsungold g/64 and nexus4 gyro are [F], the rest [E])
    gyro_step: float  # rad/s
    acc_noise: float  # white noise SD, m/s²
    gyro_noise: float  # rad/s


MODELS: dict[str, _Model] = {
    "nexus4": _Model("phone", 200.0, 0, 0.0011971, 0.0010681, 0.035, 0.006),
    "s3": _Model("phone", 150.0, 15, 0.0095768, 0.0005326, 0.045, 0.004),
    "s3mini": _Model("phone", 100.0, 13, 0.0095768, 0.0006109, 0.05, 0.005),
    "samsungold": _Model("phone", 50.0, 14, 0.1532289, 0.0012217, 0.06, 0.008),
    "gear": _Model("watch", 100.0, 14, 0.0023942, 0.0010653, 0.04, 0.006),
    "lgwatch": _Model("watch", 200.0, 14, 0.0023942, 0.0010653, 0.04, 0.006),
}
PHONE_MODELS = tuple(m for m, s in MODELS.items() if s.kind == "phone")
WATCH_MODELS = tuple(m for m, s in MODELS.items() if s.kind == "watch")

_SESSION_EPOCH_MS = 1424696633908  # the first Arrival_Time of the real file (2015-02-23)


# ----------------------------------------------------------------------------------------------
# The shared motion of one user: schedule, traits, and closed-form segment-frame signals
# ----------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Session:
    start_ms: int
    bounds: np.ndarray  # segment start times (s), last entry = session end
    activity: np.ndarray  # per segment: class index 0..5, or -1 for a null gap
    amp: float  # per-user movement amplitude (×0.8–1.2)
    cadence: float  # step frequency for walking, Hz (1.7–2.0, i.e. ±10 %)
    pedal: float  # pedalling frequency, Hz
    harm: float  # weight of the second gait harmonic
    phases: np.ndarray  # random phases of every oscillation
    phone_pose: np.ndarray  # (6, 2) pitch, roll (rad) of the waist per activity
    watch_pose: np.ndarray  # (6, 2) pitch, roll of the forearm per activity
    sway_f: np.ndarray  # (3,) slow sway frequencies, Hz
    vib_f: np.ndarray  # (4,) road vibration frequencies while biking, Hz


def _seeded(seed: int, *key: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence(entropy=seed, spawn_key=key))


def _session(seed: int, u: int, seconds: float, gap: float) -> _Session:
    rng = _seeded(seed, u)
    order = rng.permutation(len(ACTIVITIES))
    # lead-in gap, then activity / gap alternating, ending with a gap: activities are separated by
    # `null` rows as in the real recordings; each duration varies ±10 % per activity
    durs, acts = [], []
    for k, a in enumerate(order):
        durs += [gap * rng.uniform(0.8, 1.2), seconds * rng.uniform(0.9, 1.1)]
        acts += [-1, int(a)]
    durs.append(gap * rng.uniform(0.8, 1.2))
    acts.append(-1)
    bounds = np.concatenate([[0.0], np.cumsum(durs)])
    # postures (pitch forward, roll left; rad) of the waist pouch and of the forearm per activity:
    # the activities differ by where gravity points as much as by their motion (DATA-FACTS D)
    phone_pose = np.zeros((6, 2))
    stand_p, stand_r = rng.uniform(-0.1, 0.1), rng.uniform(-0.08, 0.08)
    phone_pose[0] = [stand_p, stand_r]
    phone_pose[1] = [stand_p - rng.uniform(0.5, 0.8), stand_r + rng.uniform(-0.2, 0.2)]  # seated: pelvis tilts back
    lean = rng.uniform(0.04, 0.12)
    phone_pose[2] = [stand_p + lean, stand_r]
    phone_pose[3] = [stand_p + lean + rng.uniform(0.2, 0.35), stand_r]  # leaning into the stairs
    phone_pose[4] = [stand_p + lean - rng.uniform(0.12, 0.25), stand_r]  # leaning back going down
    phone_pose[5] = [stand_p + rng.uniform(0.35, 0.55), stand_r + rng.uniform(-0.15, 0.15)]  # bent over the bars
    watch_pose = np.zeros((6, 2))
    watch_pose[0] = [rng.uniform(-0.15, 0.15), rng.uniform(-0.2, 0.2)]  # arm hanging
    watch_pose[1] = [rng.uniform(0.9, 1.3), rng.uniform(0.4, 0.9)]  # forearm resting on the thigh
    watch_pose[2] = watch_pose[0] + rng.uniform(-0.08, 0.08, size=2)
    watch_pose[3] = watch_pose[0] + [rng.uniform(0.25, 0.45), rng.uniform(0.1, 0.3)]  # hand near the rail
    watch_pose[4] = watch_pose[0] + [rng.uniform(0.15, 0.3), rng.uniform(-0.3, -0.1)]
    watch_pose[5] = [rng.uniform(1.1, 1.45), rng.uniform(-0.8, -0.4)]  # palms down on the handlebar
    # how the axes move together in each gait is biomechanics, shared by everyone: the relative
    # phases are one population draw, varied a little per user; only the time origins (the
    # phases of the gait, the pedalling and the sway) are the user's own
    phases = _seeded(seed, 1000).uniform(0, 2 * np.pi, size=24) + rng.normal(0, 0.3, size=24)
    phases[[0, 1, 2, 13, 14]] = rng.uniform(0, 2 * np.pi, size=5)
    return _Session(
        start_ms=_SESSION_EPOCH_MS + u * 7_200_000 + int(rng.integers(0, 600_000)),
        bounds=bounds,
        activity=np.asarray(acts),
        amp=float(rng.uniform(0.8, 1.2)),
        cadence=float(rng.uniform(1.7, 2.0)),
        pedal=float(rng.uniform(1.0, 1.5)),
        harm=float(rng.uniform(0.2, 0.5)),
        phases=phases,
        phone_pose=phone_pose,
        watch_pose=watch_pose,
        sway_f=rng.uniform(0.08, 0.45, size=3),
        vib_f=rng.uniform(6.0, 14.0, size=4),
    )


# step-frequency factor, movement amplitude (m/s²), impact strength, arm swing (rad) per activity
_GAIT = {2: (1.0, 3.2, 0.0, 0.55), 3: (0.86, 2.5, 0.0, 0.35), 4: (1.07, 2.8, 4.5, 0.45)}


def _motion(s: _Session, t: np.ndarray, kind: str) -> tuple[np.ndarray, np.ndarray]:
    """Specific force (m/s², gravity included) and angular rate (rad/s) in the body-segment frame
    (x forward, y left, z up) at times ``t`` for a phone at the waist or a watch on the wrist."""
    n = t.size
    seg = np.clip(np.searchsorted(s.bounds, t, side="right") - 1, 0, s.activity.size - 1)
    act = s.activity[seg]
    ph = s.phases
    pose = s.phone_pose if kind == "phone" else s.watch_pose
    # posture: constant per activity; in a gap it blends from the previous to the next activity
    last = s.activity.size - 1
    prev_act = s.activity[np.maximum(seg - 1, 0)]
    next_act = s.activity[np.minimum(seg + 1, last)]
    prev_act = np.where(prev_act < 0, next_act, prev_act)  # the lead-in gap has no previous activity
    next_act = np.where(next_act < 0, prev_act, next_act)  # the final gap has no next one
    frac = np.clip((t - s.bounds[seg]) / (s.bounds[seg + 1] - s.bounds[seg]), 0, 1)
    blend = (0.5 - 0.5 * np.cos(np.pi * frac))[:, None]
    gap = act < 0
    angles = np.where(gap[:, None], (1 - blend) * pose[prev_act] + blend * pose[next_act],
                      pose[np.maximum(act, 0)])
    pitch, roll = angles[:, 0].copy(), angles[:, 1].copy()
    acc = np.zeros((n, 3))
    gyr = np.zeros((n, 3))
    a = s.amp

    # slow postural sway, shared by every device of the user; larger when standing than sitting
    arg = 2 * np.pi * s.sway_f[None, :] * t[:, None] + ph[None, :3]
    sway_level = np.select([act == 0, act == 1, act == 5], [0.05, 0.02, 0.03], 0.04)
    pitch += sway_level * np.sin(arg).mean(axis=1)
    gyr[:, 1] += sway_level * (2 * np.pi * s.sway_f * np.cos(arg)).mean(axis=1)

    for code, (fac, amp_g, impact, swing) in _GAIT.items():
        m = act == code
        if not m.any():
            continue
        tm = t[m]
        cad = s.cadence * fac
        # gait phase with a slow ±3 % cadence wobble, so steps are not perfectly periodic
        phi = 2 * np.pi * cad * tm + 0.6 * np.sin(2 * np.pi * 0.07 * tm + ph[1]) + ph[2]
        A = a * amp_g
        if kind == "phone":
            acc[m, 2] += A * (np.sin(phi) + s.harm * (1.6 if code == 3 else 1.0) * np.sin(2 * phi + ph[3]))
            acc[m, 0] += 0.5 * A * np.sin(phi + ph[4])
            acc[m, 1] += 0.35 * A * np.sin(phi / 2 + ph[5])
            gyr[m, 0] += 0.75 * a * np.sin(phi / 2 + ph[6])
            gyr[m, 1] += 1.0 * a * np.sin(phi + ph[7])
            gyr[m, 2] += 0.9 * a * np.sin(phi / 2 + ph[8])
            if code == 3:
                acc[m, 2] += 0.4 * a  # climbing: a small net upward push each step
        else:
            # the forearm swings at the stride frequency (half the step frequency)
            w = np.pi * cad
            psi = swing * np.sin(phi / 2 + ph[9])
            pitch[m] += psi
            gyr[m, 1] += swing * w * np.cos(phi / 2 + ph[9])
            acc[m, 0] += -0.25 * swing * w * w * np.sin(phi / 2 + ph[9])  # tangential, r ≈ 0.25 m
            acc[m, 2] += 0.25 * (swing * w * np.cos(phi / 2 + ph[9])) ** 2  # centripetal
            acc[m, 2] += 1.5 * A * (np.sin(phi + ph[10]) + 0.3 * np.sin(2 * phi + ph[3]))  # body bounce
            gyr[m, 0] += 0.6 * a * np.sin(phi + ph[11])
            gyr[m, 2] += 0.5 * a * np.sin(phi / 2 + ph[12])
        if impact:
            # stepping down: a sharp, decaying jolt at the start of every step
            jolt = impact * a * np.exp(-np.mod(phi, 2 * np.pi) / 0.35)
            damp = 1.0 if kind == "phone" else 0.5
            acc[m, 2] += damp * jolt
            acc[m, 0] += 0.4 * damp * jolt

    m = act == 5
    if m.any():
        tm = t[m]
        p = 2 * np.pi * s.pedal * tm + 0.4 * np.sin(2 * np.pi * 0.05 * tm + ph[13]) + ph[14]
        vib = sum(np.sin(2 * np.pi * f * tm + ph[15 + k]) for k, f in enumerate(s.vib_f)) / 2
        if kind == "phone":
            # the pouch rides on the pedalling hip: large rotation, moderate acceleration
            acc[m, 0] += a * 1.6 * np.sin(p + ph[19])
            acc[m, 1] += a * 2.0 * np.sin(p + ph[20])
            acc[m, 2] += a * 1.1 * np.sin(2 * p + ph[21]) + 0.6 * vib
            gyr[m, 0] += a * 1.2 * np.sin(p + ph[22])
            gyr[m, 1] += a * 0.8 * np.sin(p + ph[23])
            gyr[m, 2] += a * 0.4 * np.sin(p)
        else:
            # hands on the handlebar: little pedalling motion, mostly road vibration
            acc[m] += np.outer(vib, [0.7, 0.5, 0.9]) + np.outer(0.3 * a * np.sin(p), [1, 0.5, 0])
            gyr[m, 2] += 0.12 * a * np.sin(p + ph[19])
            gyr[m, 0] += 0.05 * vib

    # transitions between activities: people move about (getting up, turning, walking over)
    if gap.any():
        tg = t[gap]
        acc[gap] += np.stack([np.sin(2 * np.pi * (1.1 + 0.3 * k) * tg + ph[k]) + 0.5 * np.sin(2 * np.pi * 0.4 * tg + ph[k + 6])
                              for k in range(3)], axis=1) * 0.8 * a
        gyr[gap] += np.stack([np.sin(2 * np.pi * (0.5 + 0.2 * k) * tg + ph[k + 3]) for k in range(3)], axis=1) * 0.4 * a

    gravity = G * np.stack([-np.sin(pitch), np.cos(pitch) * np.sin(roll), np.cos(pitch) * np.cos(roll)], axis=1)
    return gravity + acc, gyr


def _rotation(angles: np.ndarray) -> np.ndarray:
    """Rotation matrix from z-y-x Euler angles (yaw, pitch, roll)."""
    cz, sz = np.cos(angles[0]), np.sin(angles[0])
    cy, sy = np.cos(angles[1]), np.sin(angles[1])
    cx, sx = np.cos(angles[2]), np.sin(angles[2])
    rz = np.array([[cz, -sz, 0], [sz, cz, 0], [0, 0, 1]])
    ry = np.array([[cy, 0, sy], [0, 1, 0], [-sy, 0, cy]])
    rx = np.array([[1, 0, 0], [0, cx, -sx], [0, sx, cx]])
    return rz @ ry @ rx


def _mount(seed: int, u: int, mi: int, copy: int, kind: str) -> np.ndarray:
    """How a device sits on the body: one orientation per user and model, perturbed per copy."""
    base = _seeded(seed, u, mi, 99)
    if kind == "phone":
        # upright in the tight waist pouch, screen facing out, as every participant wore it:
        # the model's own fixed way of sitting in the pouch, tilted a little per user
        angles = _seeded(seed, mi, 97).uniform(-0.4, 0.4, size=3) + base.uniform(-0.25, 0.25, size=3)
    else:
        # watch frame: its x axis runs along the forearm, pointing to the hand
        angles = np.array([0.0, np.pi / 2, 0.0]) + base.uniform(-0.25, 0.25, size=3)
    angles = angles + _seeded(seed, u, mi, copy, 98).uniform(-0.12, 0.12, size=3)
    return _rotation(angles)


# ----------------------------------------------------------------------------------------------
# One recording: one user, one device copy, one sensor
# ----------------------------------------------------------------------------------------------
def _recording(seed: int, s: _Session, u: int, model: str, copy: int, sensor: str,
               watch_duty: float) -> dict[str, np.ndarray]:
    from scipy.signal import lfilter  # noqa: PLC0415 (a slow import: see the module docstring)

    spec = MODELS[model]
    mi = list(MODELS).index(model)
    si = 0 if sensor == "accelerometer" else 1
    dev_rng = _seeded(seed, u, mi, copy)  # shared by both sensors of the copy: one clock
    rate_factor = 1 + dev_rng.uniform(-0.01, 0.01)  # ±1 % rate jitter of this device
    clock_ms = int(dev_rng.integers(-3000, 3000))  # epoch clock offset of the device
    low = 10 ** max(spec.boot_digits - 1, 0)
    boot_ns = int(dev_rng.integers(low, 4 * low)) // 1000 * 1000 if spec.boot_digits else 0
    latency = dev_rng.uniform(0.5, 3.0)  # ms from sample creation to arrival
    acc_gain = 1 + dev_rng.uniform(-0.02, 0.02, size=3)  # calibration: gain ±2 %, bias ±0.2 m/s²
    acc_bias = dev_rng.uniform(-0.2, 0.2, size=3)
    gyro_bias = dev_rng.uniform(-0.01, 0.01, size=3)
    rng = _seeded(seed, u, mi, copy, si)

    end = s.bounds[-1]
    rate = spec.rate * rate_factor
    t = rng.uniform(0, 1 / rate) + np.arange(int(end * rate)) / rate
    t = t + rng.normal(0, 0.1e-3, size=t.size)  # timing jitter
    t = np.sort(t[(t >= 0) & (t < end)])
    keep = rng.random(t.size) >= 0.004  # dropped samples
    if spec.kind == "watch" and watch_duty < 1:
        # the watches lost data: they record only the first part of every segment
        seg = np.searchsorted(s.bounds, t, side="right") - 1
        keep &= (t - s.bounds[seg]) < watch_duty * (s.bounds[seg + 1] - s.bounds[seg])
    t = t[keep]
    n = t.size
    if n < 2:
        raise ValueError(f"seconds_per_activity: too small, {model} recorded {n} samples for user {USERS[u]}")

    force, rate_body = _motion(s, t, spec.kind)
    mount = _mount(seed, u, mi, copy, spec.kind)
    wobble_a = 0.98 ** (200.0 / spec.rate)  # AR(1) wobble of the device in its pouch or strap
    wobble = lfilter([np.sqrt(1 - wobble_a ** 2)], [1, -wobble_a], rng.normal(size=(n, 3)), axis=0)
    seg = np.clip(np.searchsorted(s.bounds, t, side="right") - 1, 0, s.activity.size - 1)
    act = s.activity[seg]
    level = np.where(np.isin(act, [2, 3, 4]), 1.0, np.where(act == 5, 0.6, np.where(act < 0, 0.8, 0.15)))
    if sensor == "accelerometer":
        sig = force @ mount + 0.25 * level[:, None] * wobble
        sig = sig * acc_gain + acc_bias + rng.normal(0, spec.acc_noise, size=(n, 3))
        step = spec.acc_step
    else:
        sig = rate_body @ mount + 0.05 * level[:, None] * wobble
        sig = sig + gyro_bias + rng.normal(0, spec.gyro_noise, size=(n, 3))
        step = spec.gyro_step
    sig = np.round(np.round(sig / step) * step, 7)

    # arrival: samples reach the app in small batches (6–14 % of consecutive rows share one ms)
    new_batch = rng.random(n) >= (0.12 if spec.kind == "phone" else 0.07)
    new_batch[0] = True
    batch = np.cumsum(new_batch) - 1
    last_t = np.zeros(batch[-1] + 1)
    np.maximum.at(last_t, batch, t)
    delay = latency + rng.exponential(1.0, size=last_t.size)
    arrival_batch = np.maximum.accumulate(np.floor(last_t * 1000 + delay).astype(np.int64))
    arrival = s.start_ms + arrival_batch[batch]
    if spec.boot_digits:
        creation = boot_ns + np.round(t * 1e6).astype(np.int64) * 1000  # µs resolution since boot
    else:
        creation = (s.start_ms + clock_ms) * 1_000_000 + np.round(t * 1e9).astype(np.int64)
    label = np.where(act >= 0, act, -1)

    # file order: by arrival; inside one batch in five the rows come out of creation order
    shuffled = (rng.random(batch[-1] + 1) < 0.2)[batch]
    key = np.where(shuffled, rng.random(n), np.arange(n) / n)
    order = np.lexsort((key, batch))
    return {
        "index": order,  # Index = creation order inside this recording
        "arrival": arrival[order],
        "creation": creation[order],
        "xyz": sig[order],
        "label": label[order],
    }


_GT_NAMES = np.array(list(ACTIVITIES) + ["null"], dtype=object)


def _format(rec: dict[str, np.ndarray], user: str, model: str, device: str) -> str:
    # %-formatting of Python scalars is ~3x faster than DataFrame.to_csv for these rows
    fmt = "%d,%d,%d,%.7g,%.7g,%.7g," + f"{user},{model},{device},%s\n"
    gt = _GT_NAMES[rec["label"]].tolist()  # label -1 picks "null"
    xyz = rec["xyz"]
    rows = zip(rec["index"].tolist(), rec["arrival"].tolist(), rec["creation"].tolist(),
               xyz[:, 0].tolist(), xyz[:, 1].tolist(), xyz[:, 2].tolist(), gt)
    return "".join([fmt % r for r in rows])


def _check_size(seconds_per_activity: float, gap_seconds: float, watch_duty: float, users, models) -> None:
    check_param("seconds_per_activity", seconds_per_activity, low=0, low_open=True)
    check_param("gap_seconds", gap_seconds, low=0, low_open=True)
    check_param("watch_duty", watch_duty, low=0, high=1, low_open=True)
    for u in users:
        if u not in USERS:
            raise ValueError(f"users: unknown HHAR user {quote(u)} (expected some of {', '.join(USERS)})")
    for m in models:
        if m not in MODELS:
            raise ValueError(f"models: unknown HHAR model {quote(m)} (expected some of {', '.join(MODELS)})")


def write_csv_tables(folder: Path, seed: int, *, seconds_per_activity: float, gap_seconds: float,
                     watch_duty: float, users, models, progress: Callable[[str, int], None] | None = None
                     ) -> list[Path]:
    """Write the four CSVs into ``folder``, each via a temporary name renamed on completion."""
    folder.mkdir(parents=True, exist_ok=True)
    sessions = {u: _session(seed, USERS.index(u), seconds_per_activity, gap_seconds) for u in users}
    written = []
    for name in FILES:
        kind = "phone" if name.startswith("Phones") else "watch"
        sensor = name.split("_")[1]
        path = folder / f"{name}.csv"
        tmp = folder / f".{name}.csv.tmp"
        try:
            with open(tmp, "w", encoding="ascii", newline="") as f:
                f.write(HEADER)
                for u in users:
                    for model in models:
                        if MODELS[model].kind != kind:
                            continue
                        for copy in (1, 2):
                            rec = _recording(seed, sessions[u], USERS.index(u), model, copy, sensor, watch_duty)
                            f.write(_format(rec, u, model, f"{model}_{copy}"))
                            if progress is not None:
                                progress(name, rec["index"].size)
            os.replace(tmp, path)
        finally:
            if tmp.exists():
                tmp.unlink()
        written.append(path)
    return written


_ZIP_DATE = (2015, 11, 27, 12, 0, 0)  # fixed member dates keep the archive byte-identical


def _write_zip(target: Path | IO[bytes], members: list[tuple[str, bytes | Path]]) -> None:
    # files are streamed in 1 MiB blocks: at real size the CSVs are ~3 GB
    with zipfile.ZipFile(target, "w", compresslevel=1) as z:
        for name, content in members:
            info = zipfile.ZipInfo(name, date_time=_ZIP_DATE)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            if isinstance(content, Path):
                info.file_size = content.stat().st_size  # lets zipfile pick ZIP64 when needed
                with open(content, "rb") as src, z.open(info, "w") as dst:
                    while chunk := src.read(1 << 20):
                        dst.write(chunk)
            else:
                z.writestr(info, content)


def write_uci_zip(path: Path, csv_files: list[Path]) -> Path:
    """Pack the CSVs as UCI ships them: an outer zip holding `Activity recognition exp.zip`
    (the four CSVs and a readme under `Activity recognition exp/`) and `Still exp.zip`."""
    readme = b"Synthetic stand-in for the HHAR 'Activity recognition exp' (esnfed synthesize).\n"
    inner_members: list[tuple[str, bytes | Path]] = [(f"{FOLDER}/", b"")]
    inner_members += [(f"{FOLDER}/{p.name}", p) for p in csv_files]
    inner_members.append((f"{FOLDER}/Readme.txt", readme))
    still = io.BytesIO()
    _write_zip(still, [("Still exp/", b""),
                       ("Still exp/Readme.txt", b"Not generated: the pipeline uses the activity experiment only.\n")])
    path.parent.mkdir(parents=True, exist_ok=True)
    inner = path.with_name(f".{INNER_ZIP}.tmp")
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        _write_zip(inner, inner_members)
        _write_zip(tmp, [(INNER_ZIP, inner), (STILL_ZIP, still.getvalue())])
        os.replace(tmp, path)
    finally:
        for leftover in (inner, tmp):
            if leftover.exists():
                leftover.unlink()
    return path


def synthesize_hhar(
    out_root: Path,
    seed: int,
    *,
    seconds_per_activity: float = 10.0,
    gap_seconds: float = 1.5,
    watch_duty: float = 1.0,
    users: tuple[str, ...] | list[str] = USERS,
    models: tuple[str, ...] | list[str] = tuple(MODELS),
    layout: str = "csv",
    progress: Callable[[str, int], None] | None = None,
) -> list[Path]:
    """Write a synthetic HHAR under ``out_root`` in the original layout; return the files written.

    layout "csv": ``<out_root>/HHAR/Activity recognition exp/*.csv``; "zip": only
    ``<out_root>/HHAR/heterogeneity+activity+recognition.zip`` (nested zips, as UCI ships it);
    "both": the two. Size: every user performs each of the six activities for about
    ``seconds_per_activity`` seconds, separated by ``gap_seconds`` of ``null`` activity;
    ``watch_duty`` < 1 makes the watches record only that fraction of every segment (real watch
    files are much shorter than the phone files). ``progress(file, rows)`` is called per recording.
    """
    _check_size(seconds_per_activity, gap_seconds, watch_duty, users, models)
    if layout not in ("csv", "zip", "both"):
        raise ValueError(f"layout: expected 'csv', 'zip' or 'both', got {quote(layout)}")
    out_root = Path(out_root)
    folder = out_root / "HHAR" / FOLDER
    size = dict(seconds_per_activity=seconds_per_activity, gap_seconds=gap_seconds,
                watch_duty=watch_duty, users=tuple(users), models=tuple(models), progress=progress)
    if layout == "zip":
        with tempfile.TemporaryDirectory(dir=out_root if out_root.is_dir() else None) as tmp:
            csvs = write_csv_tables(Path(tmp), seed, **size)
            return [write_uci_zip(out_root / "HHAR" / OUTER_ZIP, csvs)]
    csvs = write_csv_tables(folder, seed, **size)
    if layout == "both":
        return csvs + [write_uci_zip(out_root / "HHAR" / OUTER_ZIP, csvs)]
    return csvs
