"""The validation traffic a federated deployment would add when the validation users are clients
too (PROTOCOL §6; the simulation scores them centrally): counted with the messages and ledger of
esnfed_core.messages and set beside its formula, for the communication table (never in the training totals).

The protocol is the cheapest that gives the simulation's choice. Accuracy is an argmax per time
step, so no sum of statistics yields it: every validation client needs each candidate model and
answers integer counts, which the server sums exactly (as esnfed_flower/fedclip_joint.py's
evaluation nodes). One evaluation sends each of the V validation clients the trained (g, b)
(2N floats, IP methods only) and R candidate readouts (R·N·C floats: R = |λ grid| when λ is chosen
on validation, 1 for FedCLIP joint's early stopping), and each answers R correct counts and its
total steps (R + 1 integers, 8 bytes each, no float). Sending the summed ridge statistics instead
(N² + N·C floats, each client solving every λ itself) costs more whenever |grid|·C < N + C, i.e.
for every reservoir of the papers' spaces (N >= 100, C <= 6, 7 λ values). The reservoir
broadcast a validation client needs first is setup, excluded as the training's is.

FedAvg choosing λ there adds training traffic too: every training client uploads a local readout
per λ and downloads each average (esnfed_core.federated.fedavg, one round per λ); the training
totals keep the chosen λ's round, so the other L − 1 rounds are counted here (λ selection).
This module is not a trial module: the report computes it from what the retrains recorded.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from esnfed_core.messages import CommLedger, Message, PlasticityMessage, ReadoutMessage
from esnfed_core.reservoir import DTYPE
from esnfed_core.validation import ParameterError, check_param

ALGORITHM = "validation"  # the ledger name of the validation traffic
LAMBDA_ALGORITHM = "lambda-selection"  # FedAvg's rounds for the λ values not kept
INT_BYTES = 8  # a count on the wire, as esnfed_core.messages counts them


@dataclass(frozen=True, eq=False)
class CountsMessage(Message):
    """A validation client's answer to an evaluation: correct time steps per candidate readout and
    its total time steps (integers only: no float crosses)."""

    correct: tuple[int, ...]
    total: int

    def __post_init__(self) -> None:
        if not isinstance(self.correct, tuple) or not self.correct:
            raise ParameterError(f"CountsMessage.correct: expected a non-empty tuple of counts, got {self.correct!r}")
        for i, v in enumerate(self.correct):
            check_param(f"CountsMessage.correct[{i}]", v, integer=True, low=0)
        check_param("CountsMessage.total", self.total, integer=True, low=0)

    def _arrays(self):
        return []

    def _ints(self):
        return len(self.correct) + 1


@dataclass(frozen=True)
class ValidationPlan:
    """What one retrain scores on the validation users: ``evaluations`` evaluations, each sending
    every validation client ``readouts`` candidate readouts (and the trained (g, b) when ``ip``);
    ``bias``: readout.bias, each readout has N+1 columns (the bias entry)."""

    evaluations: int
    readouts: int
    ip: bool
    bias: bool = False

    def __post_init__(self) -> None:
        check_param("ValidationPlan.evaluations", self.evaluations, integer=True, low=0)
        check_param("ValidationPlan.readouts", self.readouts, integer=True, low=1)


def validation_ledger(plan: ValidationPlan, clients: int, units: int, classes: int) -> CommLedger:
    """Every message of ``plan`` to and from ``clients`` validation clients (N = ``units``,
    C = ``classes``), recorded as the training's are: (g, b) in the reservoir's float32, readouts
    in float64 as the server solves them."""
    check_param("validation clients", clients, integer=True, low=0)
    gain = np.zeros(units, DTYPE)
    readout = np.zeros((classes, units + int(plan.bias)), np.float64)
    ledger = CommLedger()
    for rnd in range(plan.evaluations):
        for v in range(clients):
            name = f"validation-{v}"
            if plan.ip:
                ledger.record(ALGORITHM, rnd, name, "down", PlasticityMessage(gain, gain))
            for _ in range(plan.readouts):
                ledger.record(ALGORITHM, rnd, name, "down", ReadoutMessage(readout))
            ledger.record(ALGORITHM, rnd, name, "up", CountsMessage((0,) * plan.readouts, 0))
    return ledger


def validation_formulas(plan: ValidationPlan) -> tuple[str, str]:
    """(down, up) per validation client and evaluation, as the table prints them."""
    n = "(N+1)" if plan.bias else "N"
    down = ("2N + " if plan.ip else "") + (f"{plan.readouts}·{n}·C" if plan.readouts > 1 else f"{n}·C")
    return down, f"{plan.readouts + 1} integers"


def analytic_validation(plan: ValidationPlan, clients: int, units: int, classes: int) -> tuple[int, int]:
    """(down floats, up bytes) in total: V·E·(2N·[IP] + R·N·C) floats down and V·E·8·(R + 1) bytes
    of counts up (V clients, E evaluations, R readouts each; N+1 in R·N·C with ``plan.bias``)."""
    per = (2 * units if plan.ip else 0) + plan.readouts * (units + int(plan.bias)) * classes
    return (clients * plan.evaluations * per, clients * plan.evaluations * INT_BYTES * (plan.readouts + 1))


def lambda_selection_ledger(extra: int, clients: int, units: int, classes: int, bias: bool = False) -> CommLedger:
    """FedAvg's ``extra`` rounds for the λ values of the grid other than the one kept (L − 1), as
    esnfed_core.federated.fedavg records each: every one of ``clients`` training clients uploads its
    local readout (float64, with its window count) and downloads the average. ``bias``: N+1 columns."""
    check_param("λ-selection rounds", extra, integer=True, low=0)
    check_param("training clients", clients, integer=True, low=0)
    readout = np.zeros((classes, units + int(bias)), np.float64)
    ledger = CommLedger()
    for rnd in range(extra):
        for k in range(clients):
            ledger.record(LAMBDA_ALGORITHM, rnd, f"client-{k}", "up", ReadoutMessage(readout, num_examples=1))
        for k in range(clients):
            ledger.record(LAMBDA_ALGORITHM, rnd, f"client-{k}", "down", ReadoutMessage(readout))
    return ledger


def lambda_selection_formula(extra: int, bias: bool = False) -> str:
    """FedAvg's λ selection per training client, each way, as the table prints it."""
    n = "(N+1)" if bias else "N"
    return f"{extra}·{n}·C each way"


def analytic_lambda_selection(extra: int, clients: int, units: int, classes: int, bias: bool = False) -> int:
    """Floats each way in total: K·(L − 1)·N·C (K training clients, ``extra`` = L − 1 rounds; N+1
    with ``bias``)."""
    return clients * extra * (units + int(bias)) * classes
