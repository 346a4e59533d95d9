"""The range of every hyperparameter a trial's config may hold, gathered from the core value types
that consume each one (their bounds are defined there, once). params.yaml's search spaces
(budgets.*.space, esnfed_stages/params/schema.py) are checked against these, and so is a saved
config (a select stage's best.json, a retrained model's .json: esnfed_stages/experiment/models.py), so a value
the search could not have drawn stops a stage with one line instead of failing every trial.

Not imported by a trial (esnfed_stages/experiment/fingerprint.py hashes only the modules a trial runs).
"""

from __future__ import annotations

from typing import Any, Mapping

from esnfed_core.continual_settings import BUDGET
from esnfed_core.deep import LAYERS, split_units
from esnfed_core.ip_rule import IP_BOUNDS
from esnfed_core.readout import LAMBDA
from esnfed_core.reservoir import CONNECTIVITY_BOUNDS, RESERVOIR_BOUNDS
from esnfed_core.validation import COUNT, Bound, ParameterError

# rounds: the IP epochs (ip) or FedIP rounds (fedip) a stationary trial runs, >= 1 (a continual
# method's budget grid is derived from them: esnfed_core.search.continual_budgets); local_epochs:
# FedIP's local epochs per round; budget: a continual trial's IP rounds per context; lambda: the
# ridge penalty a selected config records; input_connectivity, recurrent_connectivity: a sparse
# reservoir's percent of nonzero W_in and Ŵ entries (optional, searched only where a space names them).
HYPERPARAMETER_BOUNDS: Mapping[str, Bound] = {
    **RESERVOIR_BOUNDS, **CONNECTIVITY_BOUNDS, "sigma": IP_BOUNDS["sigma"], "rounds": COUNT, "local_epochs": COUNT,
    "layers": LAYERS, "budget": BUDGET, "lambda": LAMBDA,
}


def check_values(config: Mapping[str, Any], where: str = "config") -> None:
    """Raise ParameterError("<where>.<key>: ...") at the first value of ``config`` out of its range
    (keys without a bound are the caller's to refuse), or when a deep config's ``layers`` cannot
    share its ``units``."""
    for key, value in config.items():
        bound = HYPERPARAMETER_BOUNDS.get(key)
        if bound is not None:
            bound.check(f"{where}.{key}", value)
    if "layers" in config and "units" in config:
        try:
            split_units(config["units"], config["layers"])
        except ParameterError as exc:  # "layers: ..."
            raise ParameterError(f"{where}.{exc}") from None
