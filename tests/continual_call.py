"""run_continual called the way the tests name a run: a strategy by name and the settings as
keywords (make_strategy picks the ones that concern the strategy, ContinualConfig the rest)."""

from __future__ import annotations

from typing import Any

from esnfed_core.continual import ContinualConfig, make_strategy, run_continual

_STRATEGY_KEYS = ("replay_fraction", "replay_batch", "replay_shuffle", "replay_policy", "patience", "max_joint_rounds")
_RUN_KEYS = ("validation", "evaluate", "ledger", "client_names", "progress")


def run_named(res, train, strategy: str, federated: bool, ip, budget: int = 0, local_epochs: int = 1,
              n_classes: int = 4, **kw: Any):
    strat = make_strategy(strategy, budget=budget, **{k: kw.pop(k) for k in _STRATEGY_KEYS if k in kw})
    run_kw = {k: kw.pop(k) for k in _RUN_KEYS if k in kw}
    config = ContinualConfig(federated, ip, n_classes, local_epochs=local_epochs, **kw)
    return run_continual(res, train, strat, config, **run_kw)
