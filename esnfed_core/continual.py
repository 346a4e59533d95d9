"""Continual intrinsic plasticity over a stream of contexts: CLIP (centralised) and FedCLIP
(federated) with the naive, replay and joint strategies (PROTOCOL §5), evaluated after each context.

A strategy is an object (Flower-style): it says what data each client's IP rounds and the readout
see at a context, how a client fits locally, and when training on a context stops; the loop in
:func:`run_continual` and the server (:class:`_Federation`) are the same for all three.
Centralised runs use the federated code path with one client and no messages, so CLIP equals
FedCLIP on a single client with one local epoch per round.

The heavy work (IP epochs and passes, ridge statistics, correct counts, joining contexts) goes
through a :class:`ContinualEngine`: the default runs the numpy core; the accelerated path
(:mod:`esnfed_core.accel.continual`) gives each trial of a batch an engine that runs it on torch,
batched over the trials.

A client that keeps no state between messages (a Flower ClientApp) rebuilds itself at any round
with :class:`LocalClient` (its generators and buffer replayed by a :class:`DryEngine`).

This module holds the loop (:func:`run_continual`); the parts live in their own modules:
:mod:`esnfed_core.continual_types` (ContinualConfig, ContinualResult),
:mod:`esnfed_core.continual_engine` (the engines), :mod:`esnfed_core.continual_federation` (the
strategy interface and the server), :mod:`esnfed_core.continual_strategies` (naive, replay, joint,
make_strategy) and :mod:`esnfed_core.continual_client` (LocalClient). It re-exports their public
names (``__all__``), so ``from esnfed_core.continual import ContinualConfig, make_strategy,
run_continual`` and the other imports of this API keep working.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from esnfed_core.continual_client import LocalClient
from esnfed_core.continual_engine import DRY_ENGINE, NUMPY_ENGINE, ContinualEngine, DryEngine
from esnfed_core.continual_federation import ALGORITHM, ContinualStrategy, _Federation, stream_client
from esnfed_core.continual_settings import BUDGET, CONTINUAL_BOUNDS, JOINT_MAX_ROUNDS, check_policy
from esnfed_core.continual_strategies import (Joint, JointStopping, Naive, Replay, make_strategy,
                                              pooled_accuracy)
from esnfed_core.continual_types import ContinualConfig, ContinualResult, ReadoutFn
from esnfed_core.data.windows import Windows
from esnfed_core.messages import CommLedger
from esnfed_core.plasticity import broadcast_reservoir, client_names_or_default
from esnfed_core.quote import quote
from esnfed_core.replay import Split
from esnfed_core.reservoir import Reservoir
from esnfed_core.validation import ParameterError

__all__ = [
    "ALGORITHM", "BUDGET", "CONTINUAL_BOUNDS", "DRY_ENGINE", "JOINT_MAX_ROUNDS", "NUMPY_ENGINE",
    "ContinualConfig", "ContinualEngine", "ContinualResult", "ContinualStrategy", "DryEngine", "Joint",
    "JointStopping", "LocalClient", "Naive", "ReadoutFn", "Replay", "check_policy", "make_strategy",
    "pooled_accuracy", "run_continual", "stream_client",
]


def _check_splits(res: Reservoir, name: str, splits: Sequence[Split], n_ctx: int,
                  steps: list[int]) -> None:
    if len(splits) != n_ctx:
        raise ParameterError(f"{name}: {len(splits)} contexts, expected {n_ctx}")
    for j, (x, y) in enumerate(splits):
        shape = np.shape(x)  # never materialises lazy windows
        if len(shape) != 3 or shape[2] != res.n_inputs:
            raise ParameterError(
                f"{name}[{j}]: windows must be (W, T, {res.n_inputs}), got shape {shape}")
        if np.shape(y) != shape[:2]:
            raise ParameterError(f"{name}[{j}]: labels shape {np.shape(y)}, expected {shape[:2]}")
        if shape[0]:
            steps.append(shape[1])


def run_continual(
    res: Reservoir,
    train: Sequence[Sequence[Split]],
    strategy: ContinualStrategy,
    config: ContinualConfig,
    *,
    validation: Sequence[Sequence[Split]] | None = None,
    evaluate: dict[str, Sequence[Split]] | None = None,
    ledger: CommLedger | None = None,
    client_names: Sequence[str] | None = None,
    progress: Callable[[int, int], None] | None = None,
    engine: ContinualEngine = NUMPY_ENGINE,
) -> ContinualResult:
    """Train over the contexts of ``train`` ([client][context] splits) with ``strategy`` and
    evaluate the model after each context on each set of ``evaluate``. ``validation``
    ([validation user][context] splits) is what joint's early stopping scores, user by user.

    Centralised (``config.federated`` false) pools the clients' windows per context and records
    no messages. Federated runs record the reservoir broadcast and 2N floats each way per client
    and round under "fedclip", the ridge statistics and readouts under "incfed". Readouts are
    solved with ``config.solver`` (:func:`esnfed_core.readout.solve`). Shuffles and buffer keys
    come from generators seeded with ``config.seed`` (the same for every client, as in
    :func:`esnfed_core.federated.fedip`); the run is deterministic. ``engine`` runs the heavy
    work (the numpy core by default).
    """
    if not isinstance(strategy, ContinualStrategy):
        raise ParameterError(f"strategy: expected a ContinualStrategy (make_strategy), got {quote(strategy)}")
    if not train or not train[0]:
        raise ParameterError("train: no clients or no contexts")
    n_ctx = len(train[0])
    names = client_names_or_default(client_names, len(train))
    steps: list[int] = []
    for name, splits in zip(names, train):
        _check_splits(res, f"train[{name}]", splits, n_ctx, steps)
    if strategy.needs_validation:
        if validation is None:
            raise ParameterError(f"validation: required by strategy {quote(strategy.name)} (early stopping)")
        if not validation:
            raise ParameterError("validation: no validation users")
        for i, splits in enumerate(validation):
            _check_splits(res, f"validation[{i}]", splits, n_ctx, steps)
    evaluate = dict(evaluate or {})
    for set_name, splits in evaluate.items():
        _check_splits(res, f"evaluate[{set_name}]", splits, n_ctx, steps)
    if len(set(steps)) > 1:
        raise ParameterError(f"windows: all contexts must have the same length, got {', '.join(map(str, sorted(set(steps))))}")

    if config.federated:
        streams = [[(x if isinstance(x, Windows) else np.asarray(x), np.asarray(y)) for x, y in splits]
                   for splits in train]
    else:  # CLIP: one client holding the pooled windows of each context
        streams = [[engine.concat([splits[t] for splits in train]) for t in range(n_ctx)]]
        names, ledger = ["central"], None
    clients = [stream_client(strategy, config, name, contexts, engine.concat)
               for name, contexts in zip(names, streams)]
    fed = _Federation(clients, config, ledger, engine)
    if config.federated:
        broadcast_reservoir(res, [c.name for c in clients], ledger, ALGORITHM)
    result = ContinualResult(
        [], [], {k: np.zeros((n_ctx, n_ctx), np.int64) for k in evaluate},
        {k: np.zeros(n_ctx, np.int64) for k in evaluate},
    )
    cur = res  # naive and replay carry (g, b) over from the reservoir given
    for t in range(n_ctx):
        rounds_before = fed.ip_rounds_run
        cur, w, used = strategy.train_context(fed, res, cur, t, validation, result)
        result.participants.append(fed.taking_part)
        result.context_rounds.append(fed.ip_rounds_run - rounds_before)
        result.reservoirs.append(cur)
        result.readouts.append(w)
        result.ip_rounds.append(used)
        for set_name, splits in evaluate.items():
            for j, (x, y) in enumerate(splits):
                c = engine.counts(cur, x, y, w)
                result.correct[set_name][t, j] = int(c.correct[0])
                result.total[set_name][j] = c.total
        if progress is not None:
            progress(t + 1, n_ctx)
    return result
