"""A trial of IncFed or FedIP under differential privacy (:mod:`esnfed_core.privacy`): the same
reservoir, IP and readout code as :mod:`esnfed_core.trial`, with the server's sums replaced by
the Gaussian mechanism. ε = ∞ is the non-private trial, bit for bit.

λ is chosen on the validation users (not the training clients the guarantee protects) from the
settings' grid, as a retrain with ``retrain.lambda: select`` does.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from esnfed_core.method import Method
from esnfed_core.privacy import DPSpec, fedip_aggregate, private_stats
from esnfed_core.readout import RidgeStats, solve
from esnfed_core.reservoir import Reservoir, iter_states
from esnfed_core.scoring import pooled_counts
from esnfed_core.settings import Settings
from esnfed_core.trial import (
    FittedModel, TrialData, _ip_config, check_config, make_reservoir, stationary_model, sub_seeds,
)

PRIVATE_ALGOS = ("incfed", "fedip")


def releases(method: Method, config: Mapping[str, Any]) -> int:
    """Gaussian mechanisms one trial runs: FedIP's rounds and the IncFed release."""
    return 1 + (int(config["rounds"]) if method.algo == "fedip" else 0)


def noise_rng(seed: int) -> np.random.Generator:
    """The trusted server's noise generator of the trial of ``seed``: every release of
    :func:`fit_private` draws from it in order (the central Flower apps draw the same)."""
    return np.random.default_rng(np.random.SeedSequence([int(seed), 0x5EED_D9]))


def window_stats(res: Reservoir, x: np.ndarray, labels: np.ndarray, n_classes: int,
                 batch_size: int) -> list[RidgeStats]:
    """Each window's own ridge statistics (the units of the ``window`` relation)."""
    out: list[RidgeStats] = []
    eye = np.eye(n_classes)
    for sb in iter_states(res, x, batch_size):
        s = np.asarray(sb.states, np.float64)  # (T, B, N)
        y = eye[np.asarray(labels[sb.index]).T]  # (T, B, C)
        a = np.einsum("tbc,tbn->bcn", y, s)
        b = np.einsum("tbi,tbj->bij", s, s)
        out.extend(RidgeStats(a[k], b[k], s.shape[0], 1) for k in range(s.shape[1]))
    return out


def unit_stats(res: Reservoir, data: TrialData, settings: Settings, relation: str) -> list[RidgeStats]:
    """The neighbouring units' statistics: one per client (``user``) or per window (``window``)."""
    from esnfed_core.readout import ridge_stats  # noqa: PLC0415

    if relation == "user":
        return [ridge_stats(res, u.x, u.y, data.n_classes, settings.batch_size) for u in data.train.values()]
    return [w for u in data.train.values()
            for w in window_stats(res, u.x, u.y, data.n_classes, settings.batch_size)]


def fit_private(method: str | Method, config: Mapping[str, Any], seed: int, data: TrialData,
                settings: Settings, spec: DPSpec, ip_norms: list[float] | None = None) -> FittedModel:
    """Train ``method`` (incfed | fedip) from ``seed`` under ``spec``; scored on validation.
    ``ip_norms`` (FedIP): every client's round update ‖(Δg, Δb)‖₂ before clipping is appended
    (rounds in order, clients in order within a round; ε = ∞ too); the model is unchanged."""
    m = method if isinstance(method, Method) else Method.parse(method)
    if m.algo not in PRIVATE_ALGOS:
        raise ValueError(f"fit_private: {m.id} is not one of {', '.join(PRIVATE_ALGOS)}")
    cfg = {k: v for k, v in config.items() if k != "lambda"}
    check_config(m, cfg)
    seeds = sub_seeds(seed)
    noise = noise_rng(seed)
    n_releases = releases(m, cfg)
    res = make_reservoir(cfg, data.n_inputs, seeds["reservoir"])
    if m.algo == "fedip":
        from esnfed_core.federated import fedip  # noqa: PLC0415

        agg = fedip_aggregate(spec, noise, n_releases, ip_norms) if spec.private or ip_norms is not None else None
        res = fedip(res, [u.x for u in data.train.values()], _ip_config(cfg, settings),
                    rounds=int(cfg["rounds"]), local_epochs=int(cfg["local_epochs"]), seed=seeds["ip"],
                    client_names=list(data.train), aggregate=agg)
    stats = private_stats(unit_stats(res, data, settings, spec.relation if spec.private else "user"),
                          spec, noise, n_releases)
    lambdas = [float(x) for x in settings.lambdas]
    readouts = solve(stats, lambdas, settings.solver)
    counts = pooled_counts(res, list(data.validation.values()), readouts, settings.batch_size)
    return stationary_model(m, cfg, int(seed), seeds, data, res, readouts, lambdas, None, [], counts)
