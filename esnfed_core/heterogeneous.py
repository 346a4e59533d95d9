"""The heterogeneous-reservoir methods (docs/heterogeneous.md): every client draws its
own reservoir (esnfed_core.heterogeneity), so readouts live in different spaces.

  local      each client alone: its own ridge readout; the score is the mean over clients
  ensemble   each client its own reservoir and readout, uploaded once (ModelMessage); the
             prediction at every step is the argmax of the mean over clients of the softmax of
             the readout outputs (``combine: vote``: the majority of the clients' argmaxes)
  align-α    each client's reservoir interpolated toward the server's target by α, then IncFed
             over the clients' summed statistics: one shared readout; a client is scored through
             its own aligned reservoir, and the score is the mean over clients

One λ serves every client, chosen on the validation users (the first best of the grid). The
"mean over clients" of local and align is the accuracy pooled over the clients' predictions of
the same users (all clients see the same steps, so it equals the mean of their accuracies).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Sequence

import numpy as np

from esnfed_core.data.processed import UserData
from esnfed_core.errors import ConfigError
from esnfed_core.federated import incfed
from esnfed_core.heterogeneity import ClientReservoir, aligned_reservoirs, draw_clients, heterogeneity_of
from esnfed_core.messages import CommLedger, ModelMessage
from esnfed_core.method import Method
from esnfed_core.readout import Counts, grid_scores, solve
from esnfed_core.reservoir import Reservoir, run_batch
from esnfed_core.scoring import pooled_counts
from esnfed_core.settings import Settings
from esnfed_core.trial import (
    FittedModel, TrialData, check_config, clients_of, communication, make_reservoir, select_lambda,
    stationary_model, sub_seeds,
)


def client_counts(reservoirs: Sequence[Reservoir], readouts: Sequence[np.ndarray],
                  users: Sequence[UserData], batch_size: int) -> list[Counts]:
    """Each client's counts on ``users`` through its own reservoir and readout(s) ((L, C, N) or
    (C, N); N+1 columns with readout.bias)."""
    return [pooled_counts(r, list(users), w, batch_size) for r, w in zip(reservoirs, readouts)]


def pooled_over_clients(counts: Sequence[Counts]) -> Counts:
    """The clients' counts summed: accuracy = the mean of the clients' accuracies (same users)."""
    total = counts[0]
    for c in counts[1:]:
        total = total + c
    return total


def _votes(scores: np.ndarray, combine: str) -> np.ndarray:
    """(rows, L, C) readout outputs -> the client's contribution: softmax (float64) or one-hot argmax."""
    if combine == "vote":
        return np.eye(scores.shape[2])[scores.argmax(axis=2)]
    z = scores.astype(np.float64)
    z -= z.max(axis=2, keepdims=True)
    np.exp(z, out=z)
    z /= z.sum(axis=2, keepdims=True)
    return z


def ensemble_counts(reservoirs: Sequence[Reservoir], readouts: Sequence[np.ndarray],
                    users: Sequence[UserData], batch_size: int, combine: str = "softmax") -> Counts:
    """Counts of the ensemble on ``users``, per λ of the clients' readouts (each (L, C, N_c) or
    (C, N_c), or N_c + 1 columns, the last the bias, with readout.bias): every client runs the same batch of windows, its outputs are turned into class
    probabilities (softmax) or votes, summed over clients, and the argmax is the prediction (ties:
    the lowest class index). Memory: one batch of states and the (steps, L, C) sums."""
    grids = [w if w.ndim == 3 else w[None] for w in readouts]
    correct = np.zeros(grids[0].shape[0], np.int64)
    total = 0
    for u in users:
        for start in range(0, u.windows, batch_size):
            sums = _ensemble_sums(reservoirs, grids, u.x[start:start + batch_size], combine)
            y = np.asarray(u.y[start:start + batch_size]).T.reshape(-1)  # time-major, as the states
            correct += (sums.argmax(axis=2) == y[:, None]).sum(axis=0)
            total += y.size
    return Counts(correct, total)


def _ensemble_sums(reservoirs: Sequence[Reservoir], grids: Sequence[np.ndarray], xb: np.ndarray,
                   combine: str) -> np.ndarray:
    """The clients' class probabilities (or votes) on the windows ``xb``, summed over the clients:
    (steps x windows, L, C), time-major as the states; each grid (L, C, N_c)."""
    sums = None
    for res, w in zip(reservoirs, grids):
        states = run_batch(res, xb)
        t_len, b, n = states.shape
        scores = grid_scores(states.reshape(t_len * b, n), w)
        v = _votes(scores.reshape(t_len * b, *w.shape[:2]), combine)
        sums = v if sums is None else sums + v
    return sums


def ensemble_step_predictions(reservoirs: Sequence[Reservoir], readouts: Sequence[np.ndarray], x: np.ndarray,
                              batch_size: int = 256, combine: str = "softmax") -> np.ndarray:
    """Per-step class predictions (W, T) int64 of the ensemble (each client one readout (C, N_c), or
    N_c + 1 columns with readout.bias) on windows ``x`` (W, T, U): the argmax that
    :func:`ensemble_counts` scores, batch by batch, so the share equal to the labels is its accuracy."""
    grids = [np.asarray(w)[None] for w in readouts]
    out = np.empty(x.shape[:2], np.int64)
    for start in range(0, len(x), batch_size):
        xb = x[start:start + batch_size]
        sums = _ensemble_sums(reservoirs, grids, xb, combine)
        out[start:start + len(xb)] = sums[:, 0].argmax(axis=1).reshape(xb.shape[1], len(xb)).T
    return out


def fit(method: str | Method, config: dict, seed: int, data: TrialData, settings: Settings, *,
        score: bool = True) -> FittedModel:
    """One trial of local, ensemble or align-α, with :func:`esnfed_core.trial.fit`'s contract
    (``score``: λ chosen and the model scored on ``data.validation``; else ``config["lambda"]``)."""
    m = method if isinstance(method, Method) else Method.parse(method)
    if not m.heterogeneous:
        raise ConfigError(f"{m.id}: not a heterogeneous method (local, ensemble, align-<alpha>)")
    check_config(m, config, need_lambda=not score)
    return fit_heterogeneous(m, dict(config), int(seed), sub_seeds(seed), data, settings, score)


def fit_heterogeneous(m: Method, cfg: dict, seed: int, seeds: dict, data: TrialData, settings: Settings,
                      score: bool) -> FittedModel:
    """One trial of local, ensemble or align-α (see the module docstring)."""
    het = heterogeneity_of(settings)
    names = list(data.train)
    draws = draw_clients(het, cfg, data.n_inputs, len(names), seeds["reservoir"])
    lambdas = [float(cfg["lambda"])] if "lambda" in cfg else [float(x) for x in settings.lambdas]
    clients = clients_of(data, settings)
    validation = list(data.validation.values())
    ledger = CommLedger()
    if m.family.aligned:
        target = ClientReservoir(dict(cfg), _target(cfg, data, seeds))
        reservoirs = aligned_reservoirs(draws, target, float(m.alpha))
        readouts = incfed(reservoirs, clients, lambdas, ledger=ledger, solver=settings.solver).readouts
        counts = pooled_over_clients(client_counts(reservoirs, [readouts] * len(reservoirs), validation,
                                                   settings.batch_size)) if score else None
        model = stationary_model(m, cfg, seed, seeds, data, target.reservoir, readouts, lambdas, ledger, [],
                                 counts)
        return replace(model, clients=tuple(reservoirs), client_configs=tuple(d.config for d in draws),
                       communication=_sizes(model.communication, data))
    reservoirs = [d.reservoir for d in draws]
    per_client = [solve(c.fit_stats(r).stats, lambdas, settings.solver) for c, r in zip(clients, reservoirs)]
    counts = None
    if score:
        counts = (ensemble_counts(reservoirs, per_client, validation, settings.batch_size, het.combine)
                  if m.family.ensemble else
                  pooled_over_clients(client_counts(reservoirs, per_client, validation, settings.batch_size)))
    best, val = select_lambda(counts, lambdas)
    chosen = tuple(np.asarray(w[best], np.float64) for w in per_client)
    if m.family.ensemble:  # each client uploads its whole model once; nothing comes down
        for c, r, w in zip(clients, reservoirs, chosen):
            ledger.record("ensemble", 0, c.name, "up",
                          ModelMessage(r.w_in, r.w, r.gain, r.bias, r.leak, w, num_examples=c.num_examples))
    return FittedModel(m.id, seed, {**cfg, "lambda": lambdas[best]}, data.n_classes, seeds,
                       readout=None, lam=lambdas[best],
                       communication=_sizes(communication(ledger, len(names), settings.readout_bias), data),
                       validation=val, clients=tuple(reservoirs), client_readouts=chosen,
                       client_configs=tuple(d.config for d in draws))


def _sizes(comm: dict[str, int], data: TrialData) -> dict[str, int]:
    """The message totals with the sizes their formulas need (U inputs, C classes)."""
    return {**comm, "inputs": int(data.n_inputs), "classes": int(data.n_classes)}


def _target(cfg: dict, data: TrialData, seeds: dict) -> Reservoir:
    """The server's target reservoir: the one IncFed builds from the same config and seed."""
    return make_reservoir(cfg, data.n_inputs, seeds["reservoir"])


def assess_scores(model: FittedModel, users: Sequence[UserData], batch_size: int,
                combine: str = "softmax") -> dict[str, Any]:
    """A heterogeneous model on ``users``: ``score`` (ensemble: the ensemble's accuracy; local and
    align: the mean over clients) and ``clients`` (each client's own accuracy)."""
    readouts = model.client_readouts if model.client_readouts is not None else [model.readout] * len(model.clients)
    per = client_counts(model.clients, readouts, users, batch_size)
    accs = [float(c.accuracy[0]) for c in per]
    if Method.parse(model.method).family.ensemble:
        value = float(ensemble_counts(model.clients, readouts, users, batch_size, combine).accuracy[0])
    else:
        value = float(pooled_over_clients(per).accuracy[0])
    return {"score": value, "clients": accs}
