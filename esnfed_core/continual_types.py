"""What a continual run (:func:`esnfed_core.continual.run_continual`) is given and gives back:
:class:`ContinualConfig`, what every strategy shares, with the server's hooks (:data:`ReadoutFn`),
and :class:`ContinualResult`, the models after each context and their evaluation."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from esnfed_core import metrics
from esnfed_core.continual_settings import CONTINUAL_BOUNDS
from esnfed_core.plasticity import IPConfig
from esnfed_core.quote import quote
from esnfed_core.readout import RidgeStats, check_solver
from esnfed_core.reservoir import Reservoir
from esnfed_core.sampling import CLIENT_FRACTION, CONTEXT_POOL, FULL, KEY, check_pool
from esnfed_core.validation import ParameterError, check_param

if TYPE_CHECKING:
    from esnfed_core.plasticity import Aggregate

# The server's readout from the participants' statistics at a context, given the reservoir and the
# readout's number (0, 1, ... in the run): the DP readout of esnfed_core.private_trial.
ReadoutFn = Callable[[Reservoir, Sequence[RidgeStats], int], np.ndarray]


@dataclass(frozen=True)
class ContinualResult:
    reservoirs: list[Reservoir]  # after each context
    readouts: list[np.ndarray]  # (C,N) after each context ((C,N+1) with ContinualConfig.bias)
    correct: dict[str, np.ndarray]  # eval set name -> (T_ctx, T_ctx) int: model after i on context j
    total: dict[str, np.ndarray]  # eval set name -> (T_ctx,) int: steps of context j
    ip_rounds: list[int] = field(default_factory=list)  # IP rounds/epochs behind each model
    joint_trace: list[list[float]] = field(default_factory=list)  # joint: validation stream acc per round
    joint_capped: list[bool] = field(default_factory=list)  # joint: max_rounds, not early stopping, ended context t
    buffer_sizes: list[list[int]] = field(default_factory=list)  # replay: |M_t,c| used at context t
    # clients that trained at each context (those with windows there: the others sit it out) and the
    # IP rounds run there (joint: every round of its loop, kept or not): the message counts follow
    participants: list[int] = field(default_factory=list)
    context_rounds: list[int] = field(default_factory=list)

    def stream_accuracy(self, name: str) -> np.ndarray:
        """(T_ctx,): after context i, accuracy pooled over contexts 0..i of eval set ``name``."""
        return metrics.stream_accuracy(self.correct[name], self.total[name])

    def accuracy_matrix(self, name: str) -> np.ndarray:
        """(T_ctx, T_ctx): accuracy of the model after context i on context j."""
        return metrics.accuracy_matrix(self.correct[name], self.total[name])


@dataclass(frozen=True)
class ContinualConfig:
    """What every strategy shares: federated or centralised, the IP rule, local epochs per round
    (federated), classes, the readout's λ and solver, and the seed of shuffles and buffer keys.
    ``bias`` (params.yaml readout.bias): every ridge readout (D_t, D_t ∪ M_t, D_0..t) is solved from
    the statistics of the augmented states [S, 1] (:class:`esnfed_core.readout.RidgeStats`),
    readouts (C, N+1) whose last column is the unpenalised b_out."""

    federated: bool
    ip: IPConfig
    n_classes: int
    local_epochs: int = 1
    lam: float = 1e-5
    seed: int = 0
    solver: str = "cholesky"
    bias: bool = False
    # Federated server hooks (None: FedAvg of (g, b), IncFed sum solved at λ): DP-FedCLIP's
    # private IP rounds (esnfed_core.privacy.fedip_aggregate) and private readout.
    aggregate: "Aggregate | None" = field(default=None, compare=False)
    readout: ReadoutFn | None = field(default=None, compare=False)
    # params.yaml federated.client_fraction: the share of a context's participants each FedCLIP IP
    # round samples (esnfed_core.sampling; 1 = all of them). Readouts still sum every participant.
    client_fraction: float = FULL
    # federated.sampling_pool: ``context`` draws max(1, ⌊f·P_t⌋) of the P_t participants of context t;
    # ``roster`` draws max(1, ⌊f·K⌋) of all K clients (data-independent sets) and the drawn
    # participants train (a drawn client without windows there sends nothing; none: no update).
    sampling_pool: str = CONTEXT_POOL

    def __post_init__(self) -> None:
        check_param("local_epochs", self.local_epochs, integer=True, low=1)
        CLIENT_FRACTION.check(KEY, self.client_fraction)
        check_pool(self.sampling_pool)
        check_param("n_classes", self.n_classes, integer=True, low=1)
        check_solver(self.solver)
        if not isinstance(self.bias, bool):
            raise ParameterError(f"bias: expected true or false, got {quote(self.bias)}")
        CONTINUAL_BOUNDS["lambda"].check("lambda", self.lam)
