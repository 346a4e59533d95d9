"""The continual section's settings and their bounds: :class:`ContinualSettings` (params.yaml
``continual``: the readout's λ, the replay memory, joint's stopping) checked against
``CONTINUAL_BOUNDS``, the ranges the strategies of esnfed_core.continual check too. A light
module apart from the continual loop, so that every trial's settings can hold the section without
loading it (esnfed_stages/experiment/fingerprint.py: a trial's key hashes only the modules it runs)."""

from __future__ import annotations

from dataclasses import dataclass

from esnfed_core.quote import quote
from esnfed_core.readout import LAMBDA
from esnfed_core.validation import COUNT, Bound, ParameterError
from esnfed_core.vocabulary import REPLAY_POLICIES

# The continual ranges (params.yaml continual.* is checked against them).
CONTINUAL_BOUNDS = {"lambda": LAMBDA, "replay_fraction": Bound(low=0.0, high=1.0, low_open=True),
                    "replay_batch": Bound(integer=True, low=0), "patience": COUNT, "max_joint_rounds": COUNT}
# A naive/replay strategy's IP rounds per context (a continual config's ``budget``: the select
# grid of esnfed_core.search.continual_budgets; 0 = the readout alone).
BUDGET = Bound(integer=True, low=0)
# Joint's default cap on IP rounds (or epochs) per context: None, no cap, as PROTOCOL §5 and the
# authors' loop (`while patience < 5`): only early stopping ends a context. A positive integer is
# an optional safety cap (a run it stops records so: ContinualResult.joint_capped).
JOINT_MAX_ROUNDS: int | None = None


def check_policy(policy: object, key: str = "replay_policy") -> None:
    """Refuse a replay policy (esnfed_core.replay.ReplayBuffer) other than uniform or
    proportional, naming ``key``."""
    if not isinstance(policy, str) or policy not in REPLAY_POLICIES:
        raise ParameterError(f"{key}: expected one of {', '.join(REPLAY_POLICIES)}, got {quote(policy)}")


@dataclass(frozen=True)
class ContinualSettings:
    """The fixed settings of every continual trial: the readout's λ, replay's memory fraction,
    batch, order and policy, joint's patience (None: the protocol's 3 federated / 5 centralised) and cap
    (None: none)."""

    lam: float = 1e-5
    replay_fraction: float = 0.05
    replay_batch: int = 32
    replay_shuffle: bool = False  # replay at t > 0: False = the authors' in-order batches
    replay_policy: str = "uniform"  # the buffer's sample: uniform (the authors' code) | proportional (paper A.3)
    joint_patience: int | None = None
    joint_max_rounds: int | None = JOINT_MAX_ROUNDS

    def __post_init__(self) -> None:
        b = CONTINUAL_BOUNDS
        b["lambda"].check("lambda", self.lam)
        b["replay_fraction"].check("replay_fraction", self.replay_fraction)
        b["replay_batch"].check("replay_batch", self.replay_batch)
        if not isinstance(self.replay_shuffle, bool):
            raise ParameterError(f"replay_shuffle: expected true or false, got {quote(self.replay_shuffle)}")
        check_policy(self.replay_policy)
        if self.joint_patience is not None:
            b["patience"].check("patience", self.joint_patience)
        if self.joint_max_rounds is not None:
            b["max_joint_rounds"].check("max_joint_rounds", self.joint_max_rounds)
