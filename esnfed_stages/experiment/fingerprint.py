"""Whether a saved trial or model is reusable: its key hashes the method, config, seed, fixed
settings, the bytes of the data it used and the source of the core modules that computed it, so a
change to any of those recomputes instead of resuming stale work."""

from __future__ import annotations

import functools
import hashlib
import importlib
from pathlib import Path
from typing import Any

from esnfed_core.method import Method
from esnfed_core.settings import Settings
from esnfed_stages._io import dumps_json

# Core modules whose source decides a trial's numbers (tests/test_select.py checks the list is
# complete: every esnfed_core module a trial imports is here).
TRIAL_MODULES = (
    "esnfed_core", "esnfed_core.accel", "esnfed_core.aggregate", "esnfed_core.continual",
    "esnfed_core.continual_client", "esnfed_core.continual_engine", "esnfed_core.continual_federation",
    "esnfed_core.continual_strategies", "esnfed_core.continual_types",  # split out of esnfed_core.continual
    "esnfed_core.continual_settings", "esnfed_core.data", "esnfed_core.data.processed",
    "esnfed_core.data.jsonfile", "esnfed_core.data.npz",  # readers of processed data (input audit)
    "esnfed_core.data.paths",  # what an input path is (their check before reading)
    "esnfed_core.data.windows", "esnfed_core.errors", "esnfed_core.federated", "esnfed_core.ip_rule",
    "esnfed_core.messages", "esnfed_core.metrics", "esnfed_core.plasticity", "esnfed_core.quote",
    "esnfed_core.readout", "esnfed_core.replay", "esnfed_core.reservoir", "esnfed_core.scoring",
    "esnfed_core.search", "esnfed_core.trial", "esnfed_core.validation", "esnfed_core.vocabulary",
    "esnfed_core.deep",  # deep reservoirs: deep methods only
    "esnfed_core.heterogeneity", "esnfed_core.heterogeneous",
    "esnfed_core.method", "esnfed_core.settings",  # split out of esnfed_core.trial
    "esnfed_core.methods",  # the method registry: what each algorithm does and how it is fitted
    "esnfed_core.sampling",  # federated.client_fraction: the clients of each FedIP/FedCLIP round
)
# The continual loop's modules (split out of esnfed_core.continual): continual methods only.
CONTINUAL_MODULES = (
    "esnfed_core.continual", "esnfed_core.continual_client", "esnfed_core.continual_engine",
    "esnfed_core.continual_federation", "esnfed_core.continual_strategies", "esnfed_core.continual_types",
    "esnfed_core.replay",
)
# What an accelerated trial (runner.device torch-cpu | cuda) runs besides (they import torch).
ACCEL_MODULES = (
    "esnfed_core.accel.torch_reservoir", "esnfed_core.accel.torch_plasticity",
    "esnfed_core.accel.trials",
    "esnfed_core.accel.passes", "esnfed_core.accel.continual",  # continual trials batched on the accelerator
)


def trial_modules(method: Method, device: str = "cpu") -> tuple[str, ...]:
    """The core modules a trial of ``method`` runs: IP code only for IP methods, the continual
    loop only for continual ones (so fixing one does not invalidate the others' results), the
    torch kernels only on an accelerated device."""
    if Settings(device=device).accelerated(method):
        return tuple(m for m in TRIAL_MODULES + ACCEL_MODULES if method.uses_ip or m != "esnfed_core.plasticity") \
            + method.family.modules
    skip = set() if method.deep else {"esnfed_core.deep"}
    if not method.heterogeneous:
        skip.update(("esnfed_core.heterogeneity", "esnfed_core.heterogeneous"))
    if not method.continual:
        skip.update(CONTINUAL_MODULES)
    if not method.uses_ip:
        skip.add("esnfed_core.plasticity")
    return tuple(m for m in TRIAL_MODULES if m not in skip) + method.family.modules


@functools.lru_cache(maxsize=None)
def _source_hash(modules: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    for name in modules:
        try:
            source = Path(importlib.import_module(name).__file__).read_bytes()
        except ImportError:
            source = b"<absent>"
        h.update(name.encode() + b"\x1f" + source)
    return h.hexdigest()


def code_fingerprint(method: Method, device: str = "cpu") -> str:
    """sha256 of the source of every core module a trial of ``method`` depends on."""
    return _source_hash(trial_modules(method, device))


def result_key(**fields: Any) -> str:
    """Identity of a trial or model: sha256 of its canonical JSON (include ``code``, and
    ``blas_threads``: OpenBLAS splits its sums by thread, so the count changes a result's bits)."""
    return hashlib.sha256(dumps_json(fields).encode()).hexdigest()
