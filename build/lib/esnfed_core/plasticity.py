"""Intrinsic plasticity (Schrauwen et al. 2008) for tanh reservoirs: the IP rule, centralised IP
epochs, and one FedIP round (the round the FedIP and FedCLIP loops and the accelerated path share;
the FedIP algorithm itself is esnfed_core.federated.fedip).

The gradient is reduced on the fly while the reservoir runs in cache-sized time chunks, so an IP
epoch costs about one plain state pass (PROTOCOL §4, §5).

Sign convention (checked in tests/test_plasticity.py): ``ip_gradients`` returns the derivative of
the per-sample loss ℓ = −log g − log(1 − h²) + (h − μ)²/(2σ²) (the KL divergence of h to N(μ, σ²)
up to terms free of g and b, x_net held fixed), so the step ``θ ← θ − η ∂θ`` descends that KL.
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

import numpy as np

from esnfed_core.aggregate import weighted_average
from esnfed_core.ip_rule import IP_BOUNDS, IPConfig, IPSettings  # noqa: F401 (the rule's parameters, re-exported)
from esnfed_core.messages import CommLedger, PlasticityMessage, ReservoirMessage
from esnfed_core.reservoir import DTYPE, Reservoir, run_batch
from esnfed_core.validation import ParameterError, check_param

# Target size (float32 elements) of one time chunk of (steps, windows, units): the chunk's
# x_net, states and gradient terms stay in cache while they are reduced.
_CHUNK_ELEMENTS = 1 << 18
_NORM_EPS = 1e-12  # as torch.nn.functional.normalize in the authors' code

Progress = Callable[[int, int], None]
# A FedIP server aggregation: (start reservoir, client gains, client biases, window counts) -> (g, b).
Aggregate = Callable[[Reservoir, Sequence[np.ndarray], Sequence[np.ndarray], Sequence[int]],
                     tuple[np.ndarray, np.ndarray]]


def _chunk_steps(n_win: int, units: int, t_len: int) -> int:
    # 8 to 32 steps: per-call overheads dominate below, cache misses above (bench_plasticity:
    # 400 units -> 8 steps, 100 units -> 26 steps for batches of 100 windows).
    return int(min(max(t_len, 1), max(8, min(32, _CHUNK_ELEMENTS // max(1, n_win * units)))))


def _fused_sums(
    res: Reservoir, x: np.ndarray, c: float, mu: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Σ q, Σ q·x_net and (μ ≠ 0) Σ x_net over steps and windows, with q = h(c + h(μ − h)).

    The reservoir runs chunk by chunk (``run_batch`` with ``x0`` = the previous chunk's last
    state), and each chunk is reduced while it is in cache: float32 sums over the chunk's steps,
    then float64 over windows and chunks.
    """
    n_win, t_len, _ = x.shape
    n = res.units
    k_max = _chunk_steps(n_win, n, t_len)
    states = np.empty((k_max, n_win, n), DTYPE)  # post-leak states, then reused for a³q
    xnet = np.empty_like(states)
    ah = np.empty_like(states)
    prev = np.zeros((n_win, n), DTYPE)
    a = res.leak  # a float, or per unit (N,) for a deep reservoir: the formulas broadcast over units
    keep = DTYPE(1.0 - a)
    # q in terms of v = a·h (what the states give directly): a³q = v(a²c + v(aμ − v)).
    a2c, amu = DTYPE(a * a * c), DTYPE(a * mu)
    sum_q = np.zeros(n)
    sum_qx = np.zeros(n)
    sum_x = np.zeros(n) if mu != 0.0 else None
    for t0 in range(0, t_len, k_max):
        k = min(k_max, t_len - t0)
        s, xn, v = states[:k], xnet[:k], ah[:k]
        run_batch(res, x[:, t0 : t0 + k], out=s, xnet_out=xn, x0=None if t0 == 0 else prev)
        # a·h(t) = x(t) − (1−a) x(t−1), from the leak equation: h without a second tanh, to
        # within a few float32 roundings of x (|error| ≲ 2e-7/a, far below IP's step sizes).
        np.multiply(prev, keep, out=v[0])
        np.multiply(s[:-1], keep, out=v[1:])
        np.subtract(s, v, out=v)
        np.copyto(prev, s[k - 1])
        q = s
        if mu == 0.0:
            np.multiply(v, v, out=q)
            np.subtract(a2c, q, out=q)
        else:
            np.subtract(amu, v, out=q)
            q *= v
            q += a2c
        q *= v
        sum_q += np.add.reduce(q, axis=0).sum(axis=0, dtype=np.float64)
        sum_qx += np.einsum("kbn,kbn->bn", q, xn).sum(axis=0, dtype=np.float64)
        if sum_x is not None:
            sum_x += np.add.reduce(xn, axis=0).sum(axis=0, dtype=np.float64)
    a3 = a**3
    return sum_q / a3, sum_qx / a3, sum_x


def ip_gradients(res: Reservoir, x: np.ndarray, cfg: IPConfig) -> tuple[np.ndarray, np.ndarray]:
    """(dg, db) for one mini-batch x (B,T,U): summed over time, mean over windows (float64).

    Per unit, step and window, with s2 = σ² and h = tanh(g·x_net + b) under the current g, b:
    ∂b = −μ/s2 + (h/s2)(2·s2 + 1 − h² + μh),  ∂g = −1/g + ∂b·x_net  (PROTOCOL §4).
    """
    x = np.asarray(x, dtype=DTYPE)
    if x.ndim != 3 or x.shape[0] == 0:
        raise ValueError(f"input: expected a non-empty (windows, steps, features) batch, got shape {x.shape}")
    n_win, t_len, _ = x.shape
    s2 = cfg.sigma**2
    sum_q, sum_qx, sum_x = _fused_sums(res, x, 2.0 * s2 + 1.0, cfg.mu)
    # ∂b = (q − μ)/s2 per element, so its sums follow from Σq, Σq·x_net and Σx_net.
    db_sum = (sum_q - cfg.mu * t_len * n_win) / s2
    dbx_sum = sum_qx / s2 if sum_x is None else (sum_qx - cfg.mu * sum_x) / s2
    gain = res.gain.astype(np.float64)
    return -t_len / gain + dbx_sum / n_win, db_sum / n_win


def ip_step(res: Reservoir, x: np.ndarray, cfg: IPConfig) -> Reservoir:
    """One SGD step on one mini-batch: g ← g − η ∂g, b ← b − η ∂b (each step L2-normalised, per
    layer for a deep reservoir)."""
    dg, db = ip_gradients(res, x, cfg)
    if cfg.normalize_step:
        dg, db = _normalized(dg, res.segments), _normalized(db, res.segments)
    gain = res.gain.astype(np.float64) - cfg.eta * dg
    bias = res.bias.astype(np.float64) - cfg.eta * db
    return res.with_ip(gain, bias)


def _normalized(step: np.ndarray, segments: Sequence[tuple[int, int]]) -> np.ndarray:
    """The step L2-normalised per layer (``segments``: each layer's unit range; a shallow
    reservoir is one layer, the authors' per-vector normalisation): every layer of a deep
    reservoir moves by η, as a shallow reservoir does."""
    if len(segments) == 1:
        return step / max(float(np.linalg.norm(step)), _NORM_EPS)
    return np.concatenate([step[a:b] / max(float(np.linalg.norm(step[a:b])), _NORM_EPS)
                           for a, b in segments])


def ip_pass(res: Reservoir, batches: Iterable[np.ndarray], cfg: IPConfig) -> Reservoir:
    """One IP step per mini-batch, in order (replay builds its own mixed batches)."""
    for batch in batches:
        res = ip_step(res, batch, cfg)
    return res


def shuffled_batches(x: np.ndarray, batch_size: int, rng: np.random.Generator) -> Iterable[np.ndarray]:
    """Mini-batches of ``x`` in the order of one permutation drawn from ``rng`` (drawn at once).

    ``x`` may be lazy windows on disk (esnfed_core.data.windows): each batch is read when needed.
    """
    order = rng.permutation(len(x))
    return (x[order[i : i + batch_size]] for i in range(0, len(order), batch_size))


def ip_epoch(res: Reservoir, x: np.ndarray, cfg: IPConfig, rng: np.random.Generator) -> Reservoir:
    """One shuffled pass over the windows ``x`` (W,T,U); returns the reservoir with new g, b."""
    return ip_pass(res, shuffled_batches(x, cfg.batch_size, rng), cfg)


def train_ip(
    res: Reservoir, x: np.ndarray, cfg: IPConfig, epochs: int, seed: int,
    *, progress: Progress | None = None,
) -> Reservoir:
    """Centralised IP: ``epochs`` shuffled passes over the pooled windows ``x``."""
    check_param("epochs", epochs, integer=True, low=0)
    rng = np.random.default_rng(seed)
    for e in range(epochs):
        res = ip_epoch(res, x, cfg, rng)
        if progress is not None:
            progress(e + 1, epochs)
    return res


def broadcast_reservoir(
    res: Reservoir, names: Sequence[str], ledger: CommLedger | None, algorithm: str
) -> None:
    """Record the one-off download of the reservoir to every client (FedIP/FedCLIP set-up)."""
    if ledger is None:
        return
    # One message per layer (a deep reservoir sends each layer's weights, gain, bias and leak).
    msgs = [ReservoirMessage(r.w_in, r.w, r.gain, r.bias, r.leak) for r in res.layers]
    for name in names:
        for msg in msgs:
            ledger.record(algorithm, 0, name, "down", msg)


def fedip_round(
    res: Reservoir,
    local_fits: Sequence[Callable[[Reservoir], Reservoir]],
    weights: Sequence[int],
    names: Sequence[str],
    ledger: CommLedger | None = None,
    algorithm: str = "fedip",
    rnd: int = 0,
    aggregate: Aggregate | None = None,
) -> Reservoir:
    """One FedAvg round of (g, b): every client starts from the global values it downloads,
    fits locally, uploads (g_c, b_c, n_c); the server returns Σ (n_c/n) g_c and likewise b
    (or what ``aggregate(start, gains, biases, weights)`` returns, e.g. the DP average of
    :mod:`esnfed_core.privacy`)."""
    if not local_fits:
        raise ValueError("fedip: no clients")
    down = PlasticityMessage(res.gain, res.bias)
    gains, biases = [], []
    for fit, n_c, name in zip(local_fits, weights, names, strict=True):
        if ledger is not None:
            ledger.record(algorithm, rnd, name, "down", down)
        local = fit(res.with_ip(down.gain, down.bias))
        up = PlasticityMessage(local.gain, local.bias, num_examples=int(n_c))
        if ledger is not None:
            ledger.record(algorithm, rnd, name, "up", up)
        gains.append(up.gain)
        biases.append(up.bias)
    if aggregate is not None:
        return res.with_ip(*aggregate(res, gains, biases, weights))
    return res.with_ip(weighted_average(gains, weights), weighted_average(biases, weights))


def client_names_or_default(names: Sequence[str] | None, n: int) -> list[str]:
    """The given client names (checked against the number of clients) or client0, client1, ..."""
    if names is None:
        return [f"client{i}" for i in range(n)]
    if len(names) != n:
        raise ParameterError(f"client_names: {len(names)} names for {n} clients")
    return list(names)
