"""Algorithms of esnfed as plain functions over numpy arrays: reservoir, readout, federation,
plasticity, continual learning, metrics and dataset formats. No CLI, no DVC, no printing.

Comments cite the protocol as "PROTOCOL §n": section n of docs/protocol.md. The names below
(docs/api.md) are imported from their modules on first use, so importing the package loads no
numpy (`esnfed --help` reads ``__version__`` from here)."""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> the module that defines it
_EXPORTS = {
    **dict.fromkeys(("ReservoirConfig", "Reservoir", "build_reservoir", "iter_states", "run_batch"),
                    "esnfed_core.reservoir"),
    **dict.fromkeys(("RidgeStats", "ridge_stats", "solve", "predict", "evaluate"), "esnfed_core.readout"),
    **dict.fromkeys(("Client", "incfed", "fedavg", "fedip"), "esnfed_core.federated"),
    "IPConfig": "esnfed_core.ip_rule",
    "train_ip": "esnfed_core.plasticity",
    **dict.fromkeys(("DeepConfig", "build_deep_reservoir"), "esnfed_core.deep"),
    **dict.fromkeys(("accuracy", "step_predictions"), "esnfed_core.scoring"),
    "CommLedger": "esnfed_core.messages",
    **dict.fromkeys(("FittedModel", "TrialData", "fit"), "esnfed_core.trial"),
}
__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'esnfed_core' has no attribute {name!r}")
    value = getattr(importlib.import_module(_EXPORTS[name]), name)
    globals()[name] = value  # later look-ups skip this hook
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
