"""The project's names, defined once: datasets, training-user shares, algorithms, continual
strategies and replay policies, trial backends and devices, t-test variants and data sources.

Each is a str enum, so a member equals (and hashes, formats and serialises as) its value: the
stages compare them with plain strings from params.yaml and JSON files, and the CLI uses them
directly as Typer option types. The core needs the algorithms and strategies; the stages the rest;
all live in the lowest layer so that every package can import them without a cycle.
"""

from __future__ import annotations

from enum import Enum
from typing import Sequence


class Name(str, Enum):
    """A str enum whose str() and format() give the value (as enum.StrEnum, on Python 3.10 too)."""

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(str.__str__(self), spec)

    @classmethod
    def values(cls) -> tuple[str, ...]:
        """The plain-string values, in declaration order."""
        return tuple(m.value for m in cls)


class Dataset(Name):
    wesad = "wesad"
    hhar = "hhar"


class Share(Name):
    """Share of the training users (percent) a model is trained on."""

    p25 = "25"
    p50 = "50"
    p75 = "75"
    p100 = "100"


class ShareOrAll(Name):
    """``--pct``: one share, or all of them."""

    p25 = "25"
    p50 = "50"
    p75 = "75"
    p100 = "100"
    all = "all"


class Algo(Name):
    random = "random"
    ridge = "ridge"
    incfed = "incfed"
    fedavg = "fedavg"
    ip = "ip"
    fedip = "fedip"
    clip = "clip"
    fedclip = "fedclip"
    # deep reservoirs (docs/deep.md): IncFed and FedIP on L stacked reservoirs
    deep_incfed = "deep-incfed"
    deep_fedip = "deep-fedip"
    # Heterogeneous reservoirs (docs/heterogeneous.md): each client its own reservoir.
    local = "local"
    ensemble = "ensemble"
    align = "align"


class Strategy(Name):
    """Continual strategy of CLIP / FedCLIP."""

    naive = "naive"
    replay = "replay"
    joint = "joint"


class ReplayPolicy(Name):
    """How a replay buffer shares its capacity among past contexts (params continual.replay.policy):
    one uniform sample of all past windows, or a quota per context in proportion to its size."""

    uniform = "uniform"
    proportional = "proportional"


class Backend(Name):
    """joblib backend the trials run on."""

    loky = "loky"
    sequential = "sequential"
    ray = "ray"


class Device(Name):
    """Where the stationary methods' kernels run: numpy, or the batched torch kernels."""

    cpu = "cpu"
    torch_cpu = "torch-cpu"
    cuda = "cuda"


class Variant(Name):
    """Two-sample t-test variant."""

    welch = "welch"
    student = "student"
    paired = "paired"


class Source(Name):
    """Where preprocess reads a dataset from: the embedded synthetic files or the raw download."""

    synthetic = "synthetic"
    raw = "raw"


DATASETS = Dataset.values()
PCTS = Share.values()
ALGOS = Algo.values()
STRATEGIES = Strategy.values()
REPLAY_POLICIES = ReplayPolicy.values()
BACKENDS = Backend.values()
DEVICES = Device.values()
VARIANTS = Variant.values()
SOURCES = Source.values()


def papers_first(datasets: Sequence[str]) -> list[str]:
    """A table's and figure's order of datasets: the papers' first, then the others as given
    (params.yaml ``datasets`` or ``study_datasets``)."""
    return [d for d in DATASETS if d in datasets] + [d for d in dict.fromkeys(datasets) if d not in DATASETS]
