"""The accelerator path: torch kernels under the numpy core (recurrence, ridge statistics, IP
gradients) batched over reservoirs and windows, and the trial batching that feeds them.

Chosen by ``runner.device``: ``cpu`` is the numpy path (no torch needed), ``torch-cpu`` runs the
torch kernels on the CPU (what CI tests), ``cuda`` on the first GPU. Importing this package does
not import torch; its submodules do.
"""

from __future__ import annotations

DEVICES = ("cpu", "torch-cpu", "cuda")


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
