"""HHAR reader and preprocessing (PROTOCOL §1): the four UCI CSVs of `Activity recognition exp/`,
or the UCI zip with its nested zip read in place, turned into per-user 100 Hz windows.

Pipeline per user and device model: chunked CSV reading with explicit dtypes, keeping only the rows
of the requested models; per physical copy (`nexus4_1`, `nexus4_2`) a nearest as-of join of
gyroscope onto accelerometer rows on Arrival_Time within the tolerance, unmatched gyroscope rows
appended; the copy whose worst column has the lower NaN fraction is kept (tie: copy 1); index
decimation to the target rate; rows with any NaN dropped; with ``features: ijcnn32`` the IncFed
paper's 32 features (:func:`esnfed_core.data.hhar_windows.ijcnn32`); per-column z-score;
non-overlapping windows, tail dropped.
`null`-activity rows are dropped as the files are read, before the join (as the authors' code), or
with ``drop_null: after_decimation`` together with the NaN rows.

The steps live in their own modules: where the files are (:mod:`esnfed_core.data.hhar_source`),
reading the CSVs (:mod:`esnfed_core.data.hhar_csv`), the join, copy choice and decimation
(:mod:`esnfed_core.data.hhar_join`), features, z-score and windows
(:mod:`esnfed_core.data.hhar_windows`); this module resolves the params and runs them per user.

Memory: only the kept models' rows of one sensor pair (phones, then watches) are held at a time,
33 bytes per row (int64 time, 3 float64 values, int8 label), plus one CSV chunk.

Params (``params["preprocess"]["hhar"]`` in params.yaml; missing keys take these defaults):
  devices            [nexus4, s3, s3mini, lgwatch]  models used, in context order
  rates              nominal Hz per model (nexus4 200, s3 150, s3mini 100, samsungold 50,
                     gear 100, lgwatch 200): the f of the decimation
  target_rate        100     Hz after decimation; `native`: no decimation, every joined row kept (each
                     model at its own rate: the ESANN 2022 protocol's Nexus4 at ~200 Hz). A number
                     equal to a model's rate follows the authors' formula, which leaves out the last row
  window             200     steps per window
  join_tolerance_ms  5       as-of join tolerance on Arrival_Time (inclusive)
  chunk_rows         500000  CSV rows per chunk (memory/speed trade-off only)
  drop_null          at_read | after_decimation   when `null`-activity rows go. at_read (default, as
                     the authors' code, vdecaro/federated-esn data/hhar.py: pandas reads `null` as
                     NaN and `dropna(subset=['gt'])` runs at load): before the join, so they take no
                     part in the copy choice or the decimation phase. after_decimation: kept through
                     the join (counted in the copy choice's NaN fraction, shifting the decimation
                     phase) and dropped with the NaN rows after decimation
  max_nan_fraction   1.0     skip a user-device whose kept copy has a worst-column NaN fraction
                     >= this (the authors' code: 0.1); 1.0 never skips
  std_ddof           0       0 = population std (PROTOCOL); 1 = pandas' default in the authors' code
  features           raw     raw: the 6 axes. ijcnn32: the IncFed paper's (IJCNN 2021) 32 features, computed
                     after the NaN drop and before the z-score (hhar_windows.ijcnn32, docs/protocol.md "IJCNN
                     2021 protocol variant"): the 6 axes; the mean, std, min and max of each axis over the
                     last ``stats_window`` rows, held for ``stats_hop`` rows (causal); |acc| and |gyro|
  stats_window       200     rows per statistics window (ijcnn32)
  stats_hop          100     rows between statistics windows (ijcnn32; 100 of 200: 50 % overlap)
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from esnfed_core.data.hhar_csv import PHONE_MODELS, WATCH_MODELS, FileStreams, Stream, read_streams
from esnfed_core.data.hhar_join import NATIVE, join_copy
from esnfed_core.data.hhar_source import HharSource, locate_source
from esnfed_core.data.hhar_windows import FEATURE_SETS, DeviceResult, process_device
from esnfed_core.data.hhar_csv import CLASSES
from esnfed_core.data.hhar_windows import feature_names
from esnfed_core.data.processed import UserData
from esnfed_core.errors import ConfigError, DataError
from esnfed_core.quote import quote
from esnfed_core.validation import ParameterError, check_param

# A dataset reader's interface: esnfed_stages.data._datasets reads CLASSES, resolve_params and
# feature_names from the module of the preprocess function.
__all__ = ["CLASSES", "DEFAULT_PARAMS", "feature_names", "preprocess_hhar", "resolve_params"]

DEFAULT_PARAMS: dict = {
    "devices": ["nexus4", "s3", "s3mini", "lgwatch"],
    "rates": {"nexus4": 200, "s3": 150, "s3mini": 100, "samsungold": 50, "gear": 100, "lgwatch": 200},
    "target_rate": 100,
    "window": 200,
    "join_tolerance_ms": 5,
    "chunk_rows": 500_000,
    "drop_null": "at_read",
    "max_nan_fraction": 1.0,
    "std_ddof": 0,
    "features": "raw",
    "stats_window": 200,
    "stats_hop": 100,
}

_SAFE_ID = re.compile(r"[A-Za-z0-9_-]+")  # matched in full (no trailing newline)


def resolve_params(params: dict | None) -> dict:
    """Defaults merged with ``params``, validated; errors name the `preprocess.hhar` key."""
    params = dict(params or {})
    unknown = sorted(set(params) - set(DEFAULT_PARAMS))
    if unknown:
        raise ConfigError(f"params.yaml: unknown key preprocess.hhar.{unknown[0]}")
    p = {**DEFAULT_PARAMS, **params}
    p["rates"] = {**DEFAULT_PARAMS["rates"], **(params.get("rates") or {})}
    pre = "preprocess.hhar."
    try:
        devices = p["devices"]
        if not isinstance(devices, (list, tuple)) or not devices:
            raise ConfigError(f"params.yaml: {pre}devices must be a non-empty list")
        for d in devices:
            if d not in PHONE_MODELS + WATCH_MODELS:
                raise ConfigError(f"params.yaml: {pre}devices: unknown model {quote(d)} "
                                  f"(expected some of {', '.join(PHONE_MODELS + WATCH_MODELS)})")
        if len(set(devices)) != len(devices):
            raise ConfigError(f"params.yaml: {pre}devices lists a model twice")
        for d in devices:
            check_param(f"{pre}rates.{d}", p["rates"].get(d), low=0, low_open=True)
        if isinstance(p["target_rate"], str) and p["target_rate"] != NATIVE:
            raise ConfigError(f"params.yaml: {pre}target_rate: expected a number (Hz) or {NATIVE} (no "
                              f"decimation), got {quote(p['target_rate'])}")
        if p["target_rate"] != NATIVE:
            check_param(f"{pre}target_rate", p["target_rate"], low=0, low_open=True)
        for d in devices if p["target_rate"] != NATIVE else ():
            if p["rates"][d] < p["target_rate"]:
                raise ConfigError(f"params.yaml: {pre}rates.{d} ({p['rates'][d]}) is below target_rate "
                                  f"({p['target_rate']}): decimation cannot upsample")
        check_param(f"{pre}window", p["window"], integer=True, low=1)
        check_param(f"{pre}join_tolerance_ms", p["join_tolerance_ms"], low=0)
        check_param(f"{pre}chunk_rows", p["chunk_rows"], integer=True, low=1)
        check_param(f"{pre}max_nan_fraction", p["max_nan_fraction"], low=0, high=1, low_open=True)
        check_param(f"{pre}std_ddof", p["std_ddof"], integer=True, low=0, high=1)
        if p["features"] not in FEATURE_SETS:
            raise ConfigError(f"params.yaml: {pre}features: expected one of {', '.join(FEATURE_SETS)}, "
                              f"got {quote(p['features'])}")
        check_param(f"{pre}stats_window", p["stats_window"], integer=True, low=1)
        check_param(f"{pre}stats_hop", p["stats_hop"], integer=True, low=1, high=p["stats_window"])
        if p["drop_null"] not in ("after_decimation", "at_read"):
            raise ConfigError(f"params.yaml: {pre}drop_null must be 'after_decimation' or 'at_read', "
                              f"got {quote(p['drop_null'])}")
    except ParameterError as exc:
        raise ConfigError(f"params.yaml: {exc}") from None
    p["devices"] = list(devices)
    return p


def preprocess_hhar(raw_root: Path, params: dict | None = None, *,
                    progress: Callable[[str, int], None] | None = None
                    ) -> Iterator[tuple[str, UserData, dict]]:
    """Yield ``(user, UserData, info)`` per user present (sorted), per PROTOCOL §1.

    ``x`` float32 (W, window, F) (F: 6, or 32 with ``features: ijcnn32``), ``y`` int8 (W, window)
    classes ``CLASSES``, ``context`` int8 (W,) = position of the device in ``params["devices"]``;
    windows ordered by device, then time.
    ``info``: per device the copy kept, NaN fractions of both copies, row counts and windows, plus
    ``windows_per_device`` (list in device order) and ``sources`` (CSV names read). Everything is
    validated before the first user is yielded, so a DataError leaves nothing half-written.
    ``progress(file, rows)`` is called after each CSV chunk.
    """
    p = resolve_params(params)
    source = locate_source(raw_root)
    with source.opened():
        results, sources = _read_all(source, p, progress)
    devices = p["devices"]
    users = sorted(results)
    for u in users:
        missing = [d for d in devices if d not in results[u]]
        if missing:
            raise DataError(f"{source.display(_file_of(missing[0]))}: user '{u}' has no rows for device '{missing[0]}'")
    for u in users:
        parts, info = [], {"devices": {}, "windows_per_device": [], "sources": sources}
        for ci, d in enumerate(devices):
            r = results[u][d]
            parts.append(UserData(r.x, r.y, np.full(r.x.shape[0], ci, dtype=np.int8)))
            info["devices"][d] = r.info
            info["windows_per_device"].append(int(r.x.shape[0]))
        yield u, UserData.concat(parts), info


def _read_all(source: HharSource, p: dict, progress) -> tuple[dict[str, dict[str, "DeviceResult"]], list[str]]:
    results: dict[str, dict[str, DeviceResult]] = {}
    sources: list[str] = []
    for kind, models in (("Phones", PHONE_MODELS), ("Watch", WATCH_MODELS)):
        wanted = [d for d in p["devices"] if d in models]
        if not wanted:
            continue
        acc = read_streams(source, f"{kind}_accelerometer", wanted, chunk_rows=p["chunk_rows"],
                           drop_null=p["drop_null"] == "at_read", progress=progress)
        gyro = read_streams(source, f"{kind}_gyroscope", wanted, chunk_rows=p["chunk_rows"],
                            drop_null=p["drop_null"] == "at_read", progress=progress)
        sources += [acc.display, gyro.display]
        _process_kind(acc, gyro, wanted, p, results)
        del acc, gyro  # frees the raw rows before the next sensor pair is read
    return results, sources


def _file_of(model: str) -> str:
    return "Phones_accelerometer" if model in PHONE_MODELS else "Watch_accelerometer"


def _process_kind(acc: FileStreams, gyro: FileStreams, models: list[str], p: dict,
                  results: dict[str, dict[str, DeviceResult]]) -> None:
    seen = {(u, m) for (u, m, _) in acc.streams} | {(u, m) for (u, m, _) in gyro.streams}
    for m in models:
        if not any(mm == m for _, mm in seen):
            raise DataError(f"{acc.display}: no rows for device '{m}'")
    for u, m in sorted(seen):
        if not _SAFE_ID.fullmatch(u):
            raise DataError(f"{acc.display}: user id {quote(u)} is not a usable name (letters, digits, _ or -)")
        names = sorted({dev for (uu, mm, dev) in list(acc.streams) + list(gyro.streams) if (uu, mm) == (u, m)})
        empty = Stream(np.zeros(0, np.int64), np.zeros((0, 3)), np.zeros(0, np.int8))
        copies = {dev: join_copy(acc.streams.get((u, m, dev), empty), gyro.streams.get((u, m, dev), empty),
                                 p["join_tolerance_ms"]) for dev in names}
        where = f"{acc.display}: user '{u}', device '{m}'"
        results.setdefault(u, {})[m] = process_device(copies, p["rates"][m], p, where)
        for dev in names:  # free this user's raw rows as soon as they are processed
            acc.streams.pop((u, m, dev), None)
            gyro.streams.pop((u, m, dev), None)
