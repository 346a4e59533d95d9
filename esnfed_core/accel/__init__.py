"""The accelerator path: torch kernels under the numpy core (recurrence, ridge statistics, IP
gradients) batched over reservoirs and windows, and the trial batching that feeds them.

Chosen by ``runner.device``: ``cpu`` is the numpy path (no torch needed), ``torch-cpu`` runs the
torch kernels on the CPU (what CI tests), ``cuda`` on the first GPU. Importing this package does
not import torch; its submodules do.
"""

from __future__ import annotations

from typing import Any, Mapping

from esnfed_core.methods import REGISTRY

DEVICES = ("cpu", "torch-cpu", "cuda")
# What the torch kernels implement: trials of these algorithms with these config keys (the
# reservoir of esnfed_core.reservoir, IP, the searched budgets and λ). Anything else is refused
# by check_supported rather than run as something it is not (e.g. a new reservoir kind's keys).
# (esnfed_core.methods: Family.torch_kernels)
ALGOS = tuple(name for name, family in REGISTRY.items() if family.torch_kernels)
# A sparse reservoir's connectivity is drawn by the numpy core (make_reservoir) into dense matrices
# with zeros, which the same batched kernels run (tests/test_sparse_reservoir.py).
CONFIG_KEYS = frozenset({"units", "spectral_radius", "leak", "input_scaling", "sigma", "rounds",
                         "local_epochs", "budget", "lambda", "input_connectivity", "recurrent_connectivity"})


def check_device(device: str) -> str:
    """``device`` if it is one of DEVICES, else a ValueError naming the choices."""
    if device not in DEVICES:
        raise ValueError(f"device: expected one of {', '.join(DEVICES)}, got {device!r}")
    return device


def torch_device(device: str) -> str:
    """The torch device string of an accelerated ``device`` choice."""
    check_device(device)
    if device == "cpu":
        raise ValueError("device: 'cpu' is the numpy path; the torch kernels run with torch-cpu or cuda")
    return "cpu" if device == "torch-cpu" else "cuda"


def require_torch(device: str) -> None:
    """Fail early, with one line naming runner.device, when ``device`` cannot run here."""
    from esnfed_core.errors import ConfigError  # noqa: PLC0415

    if check_device(device) == "cpu":
        return
    try:
        import torch  # noqa: PLC0415
    except ImportError:
        raise ConfigError(f"runner.device: {device} needs torch (install the [gpu] extra) or use cpu") from None
    if device == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"runner.device: cuda, but torch {torch.__version__} sees no CUDA GPU; "
                          "use cpu or torch-cpu")


def check_supported(method: Any, config: Mapping[str, Any], device: str) -> None:
    """One-line ConfigError when the torch kernels cannot run a trial of ``method`` (a
    method.Method) with ``config`` on ``device``: an algorithm or config key they do not implement."""
    from esnfed_core.errors import ConfigError  # noqa: PLC0415

    family = REGISTRY.get(method.algo)  # None: an algorithm the registry does not know
    if family is None or not family.torch_kernels:
        raise ConfigError(f"runner.device: {device} does not run {method.id} (the torch kernels run "
                          f"{', '.join(ALGOS)}); use runner.device: cpu")
    extra = sorted(set(config) - CONFIG_KEYS)
    if extra:
        raise ConfigError(f"runner.device: {device} cannot run {method.id} with config key(s) "
                          f"{', '.join(extra)} (not in the torch kernels); use runner.device: cpu")
