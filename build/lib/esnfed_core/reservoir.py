"""The Echo State Network reservoir: deterministic construction and the batched recurrence.

Windows advance together, one BLAS-3 product per time step, in float32; memory is bounded by the
batch. States are time-major: ``states[t, i]`` is the post-leak state of window ``i`` at step ``t``.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator

import numpy as np

from esnfed_core.validation import COUNT, POSITIVE, Bound, ParameterError, check_finite, check_param

DTYPE = np.float32


LEAK = Bound(low=0.0, high=1.0, low_open=True)
# The largest reservoir: Ŵ is N×N float32 (4·N² bytes, 1 GiB at 16384) and the ridge statistics
# SᵀS N×N float64 (2 GiB), each held per trial in every worker, so a units typo (10^9) fails here,
# naming the key, instead of as a MemoryError in every trial. The protocol's spaces stop at 500.
MAX_UNITS = 16384
UNITS = Bound(integer=True, low=1, high=MAX_UNITS)
# The searched hyperparameters' ranges (params.yaml budgets.*.space.<dataset> is checked against them).
RESERVOIR_BOUNDS = {"units": UNITS, "spectral_radius": POSITIVE, "leak": LEAK, "input_scaling": POSITIVE}
# Sparse reservoirs (the IncFed paper's "input connectivity" and "recurrent connectivity", Tables
# I-IV, searched in [1, 60]): the percentage of W_in's and of Ŵ's entries that are nonzero, as the
# paper prints them. Optional: a config without them draws the dense reservoir of PROTOCOL §2
# (docs/protocol.md §2, "Sparse reservoirs", says why a percentage of the whole matrix).
CONNECTIVITY = Bound(low=0.0, high=100.0, low_open=True)
CONNECTIVITY_BOUNDS = {"input_connectivity": CONNECTIVITY, "recurrent_connectivity": CONNECTIVITY}
# Masks a sparse Ŵ may draw before one has a cycle (an acyclic pattern makes Ŵ nilpotent: spectral
# radius 0, which no scale factor brings to ρ). At the paper's lowest setting (1 % of 100 units, ~1
# connection a unit) about 1 mask in 10 is acyclic (measured: 9.7 % of 2000; 0 % at 2 % or at 200
# units), at 1 % of 50 units 1 in 2, at 1 % of 10 units (one connection) 9 in 10: the chance that
# all MAX_MASK_DRAWS fail is then 0.9^100 ≈ 3e-5, and such a draw is refused naming the key.
MAX_MASK_DRAWS = 100
BATCH_SIZE = COUNT  # windows per reservoir batch (params.yaml readout.batch_size)


@dataclass(frozen=True)
class ReservoirConfig:
    """Hyperparameters of a reservoir (PROTOCOL §2)."""

    n_inputs: int
    units: int
    spectral_radius: float
    leak: float
    input_scaling: float
    input_connectivity: float | None = None  # percent of W_in's entries nonzero; None: dense
    recurrent_connectivity: float | None = None  # percent of Ŵ's entries nonzero; None: dense

    def __post_init__(self) -> None:
        check_param("n_inputs", self.n_inputs, integer=True, low=1)
        for name, bound in RESERVOIR_BOUNDS.items():
            bound.check(name, getattr(self, name))
        for name, bound in CONNECTIVITY_BOUNDS.items():
            if getattr(self, name) is not None:
                bound.check(name, getattr(self, name))


@dataclass(frozen=True, eq=False)
class Reservoir:
    """A built reservoir: fixed weights plus the IP-adapted gain ``g`` and bias ``b``.

    ``w_in`` is (N, U), ``w`` is (N, N), ``gain`` and ``bias`` are (N,), all float32.
    Instances are immutable; :meth:`with_ip` returns a copy with new gain and bias.
    """

    w_in: np.ndarray
    w: np.ndarray
    leak: float
    gain: np.ndarray
    bias: np.ndarray
    _w_t: np.ndarray = field(init=False, repr=False)
    _w_in_t: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        if np.ndim(self.w_in) != 2:
            raise ParameterError(f"w_in: expected a 2-D (units, inputs) matrix, got shape {np.shape(self.w_in)}")
        n, u = np.shape(self.w_in)
        if np.shape(self.w) != (n, n):
            raise ParameterError(f"w: shape {np.shape(self.w)} does not match w_in rows {n}")
        for name in ("gain", "bias"):
            if np.shape(getattr(self, name)) != (n,):
                raise ParameterError(f"{name}: shape {np.shape(getattr(self, name))}, expected ({n},)")
        LEAK.check("leak", self.leak)
        for name in ("w_in", "w", "gain", "bias"):
            arr = np.ascontiguousarray(getattr(self, name), dtype=DTYPE)
            check_finite(name, arr)
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)
        # Transposed copies so the hot loop multiplies row-major batches without re-layout.
        object.__setattr__(self, "_w_t", np.ascontiguousarray(self.w.T))
        object.__setattr__(self, "_w_in_t", np.ascontiguousarray(self.w_in.T))

    @property
    def units(self) -> int:
        return self.w.shape[0]

    @property
    def n_inputs(self) -> int:
        return self.w_in.shape[1]

    @property
    def has_ip(self) -> bool:
        """True when gain or bias differ from their initial values (1, 0)."""
        return bool(np.any(self.gain != 1.0) or np.any(self.bias != 0.0))

    def with_ip(self, gain: np.ndarray, bias: np.ndarray) -> "Reservoir":
        """Copy with new intrinsic-plasticity parameters (weights shared, not copied)."""
        return replace(self, gain=np.asarray(gain, DTYPE), bias=np.asarray(bias, DTYPE))

    # The layer protocol a deep reservoir (esnfed_core.deep.DeepReservoir) shares: a shallow
    # reservoir is one layer covering every unit, so code written against ``layers`` and
    # ``segments`` (the recurrence, IP's per-layer step) runs both.
    @property
    def layers(self) -> tuple["Reservoir", ...]:
        return (self,)

    @property
    def segments(self) -> tuple[tuple[int, int], ...]:
        """Unit ranges [lo, hi) of the layers in the state vector: one range here."""
        return ((0, self.units),)


def spectral_radius(w: np.ndarray) -> float:
    """Largest eigenvalue modulus, computed in float64."""
    return float(np.max(np.abs(np.linalg.eigvals(np.asarray(w, np.float64)))))


def build_reservoir(config: ReservoirConfig, seed: int | np.random.Generator) -> Reservoir:
    """Draw W_in ~ U(-1,1)·input_scaling and Ŵ ~ N(0,1) rescaled to the spectral radius.

    With ``input_connectivity`` or ``recurrent_connectivity`` (percent) the matrix is then masked
    to :func:`nonzero_count` entries at positions drawn, after both dense draws, from the same
    generator (input mask first): the kept entries hold the dense draw's values, and a dense
    config draws nothing more than before. A sparse Ŵ whose pattern has no cycle is nilpotent
    (spectral radius 0) and its mask is drawn again, at most MAX_MASK_DRAWS times; Ŵ is rescaled
    to ρ after masking.

    The same config and seed give bit-identical matrices on every platform numpy supports.
    """
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    n, u = config.units, config.n_inputs
    w_in = rng.uniform(-1.0, 1.0, size=(n, u)) * config.input_scaling
    w = rng.standard_normal(size=(n, n))
    if config.input_connectivity is not None:
        keep = _draw_mask(rng, w_in.shape, config.input_connectivity)
        if keep is not None:
            w_in = np.where(keep, w_in, 0.0)
    if config.recurrent_connectivity is not None:
        w, rho = _sparse_recurrent(rng, w, config.recurrent_connectivity)
    else:
        rho = spectral_radius(w)
    if rho == 0.0:  # only possible for a 1x1 reservoir drawing exactly 0
        w = np.ones((n, n))
        rho = spectral_radius(w)
    w *= config.spectral_radius / rho
    return Reservoir(
        w_in=w_in, w=w, leak=float(config.leak), gain=np.ones(n), bias=np.zeros(n)
    )


def nonzero_count(connectivity: float, size: int) -> int:
    """Entries a matrix of ``size`` entries keeps at ``connectivity`` percent: the nearest integer
    to connectivity·size/100 (halves up), at least 1 (a matrix is never all zero)."""
    CONNECTIVITY.check("connectivity", connectivity)
    return int(min(size, max(1, math.floor(float(connectivity) * size / 100.0 + 0.5))))


def _draw_mask(rng: np.random.Generator, shape: tuple[int, int], connectivity: float) -> np.ndarray | None:
    """A boolean mask of ``shape`` with exactly :func:`nonzero_count` True entries at uniformly
    drawn positions (without replacement), or None, drawing nothing, when every entry is kept."""
    size = shape[0] * shape[1]
    k = nonzero_count(connectivity, size)
    if k == size:
        return None
    keep = np.zeros(size, dtype=bool)
    keep[rng.choice(size, size=k, replace=False)] = True
    return keep.reshape(shape)


def has_cycle(keep: np.ndarray) -> bool:
    """Whether the directed graph of a square pattern (an edge j → i where ``keep[i, j]``) has a
    cycle, a self-loop included. Without one, every matrix of that pattern is nilpotent: a
    permutation makes it strictly triangular, so all its eigenvalues are 0."""
    from scipy.sparse import csr_array  # noqa: PLC0415 (sparse reservoirs only)
    from scipy.sparse.csgraph import connected_components  # noqa: PLC0415

    if np.any(np.diagonal(keep)):
        return True
    _, labels = connected_components(csr_array(keep), directed=True, connection="strong")
    return bool(np.bincount(labels).max() > 1)  # a strongly connected component of 2+ units


def _sparse_recurrent(rng: np.random.Generator, w: np.ndarray, connectivity: float) -> tuple[np.ndarray, float]:
    """``w`` masked to ``connectivity`` percent and its spectral radius, the mask drawn again while
    its pattern has no cycle (or, by cancellation, the radius is 0); ParameterError naming the key
    when MAX_MASK_DRAWS masks all fail."""
    for _ in range(MAX_MASK_DRAWS):
        keep = _draw_mask(rng, w.shape, connectivity)
        if keep is None:  # every entry kept: the dense matrix
            return w, spectral_radius(w)
        if not has_cycle(keep):
            continue
        sparse = np.where(keep, w, 0.0)
        rho = spectral_radius(sparse)
        if rho > 0.0:
            return sparse, rho
    n = w.shape[0]
    raise ParameterError(
        f"recurrent_connectivity: {connectivity} % of a {n}x{n} Ŵ ({nonzero_count(connectivity, n * n)} "
        f"connections) gave a nilpotent matrix (no cycle, spectral radius 0) in each of {MAX_MASK_DRAWS} "
        "draws, so it cannot be rescaled to the spectral radius; raise recurrent_connectivity or units")


def _check_batch(res: Reservoir, x: np.ndarray) -> np.ndarray:
    if np.ndim(x) != 3:
        raise ParameterError(f"input: expected (windows, steps, features), got shape {np.shape(x)}")
    if np.shape(x)[2] != res.n_inputs:
        raise ParameterError(
            f"input: width {np.shape(x)[2]} does not match reservoir n_inputs {res.n_inputs}"
        )
    x = np.asarray(x, dtype=DTYPE)
    check_finite("input", x)
    return x


# Steps whose input projection W_in u(t) is computed by one product into a small scratch buffer
# that stays in cache (projecting the whole window at once streams T·B·N floats through memory).
_TIME_CHUNK = 8
# run_batch splits a batch over threads only when each thread's product per step has at least
# this many multiply-adds (windows · N²; 2^24 = 105 windows of 400 units): below it, handing the
# GIL back and forth six times a step costs more than the second core gives (measured on 2 cores:
# a 256-window batch gains at 400 units, loses at 300 and below; see BENCHMARKS.md).
_MIN_THREAD_WORK = 1 << 24
# Threads run_batch may use; None = as many as numpy's BLAS would use. Benchmarks set 1.
_MAX_THREADS: int | None = None
_BLAS = None  # threadpoolctl.ThreadpoolController, imported on first use


def _blas():
    """The process's threadpoolctl controller (imported lazily: the accelerated path's kernels
    import this module on machines that may lack threadpoolctl; run_batch itself needs it)."""
    global _BLAS
    if _BLAS is None:
        from threadpoolctl import ThreadpoolController  # noqa: PLC0415

        _BLAS = ThreadpoolController()
    return _BLAS


def _n_threads(windows: int, square_units: int) -> int:
    """Threads for one batch: numpy's BLAS thread count (so a caller's limit, e.g. one thread per
    process, is respected), capped so that every thread has enough work per step
    (``square_units``: Σ N_l² over the layers, N² for a shallow reservoir)."""
    threads = _MAX_THREADS or max(
        (lib.num_threads for lib in _blas().lib_controllers if lib.user_api == "blas"), default=1
    )
    return max(1, min(threads, windows * square_units // _MIN_THREAD_WORK))


def run_batch(
    res: Reservoir,
    x: np.ndarray,
    *,
    out: np.ndarray | None = None,
    xnet_out: np.ndarray | None = None,
    x0: np.ndarray | None = None,
) -> np.ndarray:
    """Run the reservoir over a batch of windows ``x`` (B, T, U); return states (T, B, N).

    Each window starts from x(0) = 0 (or ``x0``, (B, N), used by the echo-state tests).
    A deep reservoir (``res.layers``, esnfed_core.deep) runs layer by layer over the batch: layer
    l's input is layer l−1's states, and layer l's states fill units ``res.segments[l]`` of the
    output (so N is the total over the layers, and x0 and xnet_out follow the same split).
    ``out`` and ``xnet_out`` are optional preallocated (T, B, N) float32 buffers; when
    ``xnet_out`` is given it receives x_net(t) = W_in u(t) + Ŵ x(t-1) (before gain and bias),
    which intrinsic plasticity needs.

    On a multi-core machine the windows are split into contiguous groups, one thread each, with
    single-threaded BLAS inside: the elementwise work (tanh, leak) then runs on every core too,
    and no BLAS thread pool spins waiting for the others. Windows are independent, so the split
    does not change what is computed.
    """
    x = _check_batch(res, x)
    b, t_len, _ = x.shape
    n = res.units
    shape = (t_len, b, n)
    states = np.empty(shape, DTYPE) if out is None else out
    for name, buf in (("out", states), ("xnet_out", xnet_out)):
        if buf is not None and (
            buf.shape != shape or buf.dtype != DTYPE or not buf.flags.c_contiguous
        ):
            raise ParameterError(
                f"{name}: expected float32 {shape}, got {buf.dtype} {buf.shape}"
                + ("" if buf.flags.c_contiguous else " (not C-contiguous)")
            )
    if x0 is not None:
        x0 = np.asarray(x0, dtype=DTYPE)
        if x0.shape != (b, n):
            raise ParameterError(f"x0: expected shape {(b, n)}, got {x0.shape}")
    if b == 0 or t_len == 0:
        return states
    xt = np.ascontiguousarray(x.transpose(1, 0, 2))  # (T, B, U): step t of every window is a block
    threads = _n_threads(b, sum(layer.units ** 2 for layer in res.layers))
    if threads == 1:
        _recur_layers(res, xt, states, xnet_out, x0, 0, b)
        return states
    bounds = np.linspace(0, b, threads + 1).astype(int)
    errors: list[BaseException] = []

    def work(lo: int, hi: int) -> None:
        try:
            _recur_layers(res, xt, states, xnet_out, x0, lo, hi)
        except BaseException as exc:  # re-raised in the caller below
            errors.append(exc)

    with _blas().limit(limits=1, user_api="blas"):
        workers = [
            threading.Thread(target=work, args=(lo, hi), daemon=True)
            for lo, hi in zip(bounds[:-1], bounds[1:])
        ]
        for w in workers:
            w.start()
        for w in workers:
            w.join()
    if errors:
        raise errors[0]
    return states


# Steps a deep reservoir advances through all its layers before the next block (a multiple of
# _TIME_CHUNK, so each layer's input projections have the shapes of a shallow run's).
_DEEP_CHUNK = 2 * _TIME_CHUNK


def _recur_layers(res, xt: np.ndarray, states: np.ndarray, xnet_out: np.ndarray | None,
                  x0: np.ndarray | None, lo: int, hi: int) -> None:
    """The recurrence of every layer for windows lo:hi: one layer covering the whole state (the
    shallow reservoir: in place in ``states``), or, for a deep reservoir, block by block of
    ``_DEEP_CHUNK`` steps, every layer in turn on the block, fed the previous layer's block while
    it is in cache. A layer's block runs in a contiguous scratch buffer (two, alternating: layer l
    reads one while it writes the other) and is then copied into its units of ``states``: the
    elementwise passes on a layer's strided slice of the concatenated state cost 1.5-2x more at
    25-50 units a layer (benchmarks/bench_deep.py). Scratch memory: 2-3 blocks, whatever T."""
    if len(res.layers) == 1:
        _recur(res.layers[0], xt, states, xnet_out, x0, lo, hi)
        return
    t_len, m = xt.shape[0], hi - lo
    k_max = min(_DEEP_CHUNK, t_len)
    size = k_max * m * max(layer.units for layer in res.layers)
    flat = [np.empty(size, DTYPE) for _ in range(2)]
    xflat = np.empty(size, DTYPE) if xnet_out is not None else None
    last = [np.empty((m, layer.units), DTYPE) for layer in res.layers]  # x(t0 − 1) of each layer
    for t0 in range(0, t_len, k_max):
        k = min(k_max, t_len - t0)
        inp = xt[t0 : t0 + k, lo:hi]
        for i, (layer, (a, b)) in enumerate(zip(res.layers, res.segments)):
            shape = (k, m, b - a)
            out = flat[i % 2][: k * m * (b - a)].reshape(shape)
            xnet = None if xflat is None else xflat[: out.size].reshape(shape)
            if t0 > 0:
                start = last[i]
            else:
                start = None if x0 is None else np.ascontiguousarray(x0[lo:hi, a:b])
            _recur(layer, inp, out, xnet, start, 0, m)
            states[t0 : t0 + k, lo:hi, a:b] = out
            if xnet is not None:
                xnet_out[t0 : t0 + k, lo:hi, a:b] = xnet
            np.copyto(last[i], out[k - 1])
            inp = out


def _recur(
    res: Reservoir,
    xt: np.ndarray,
    states: np.ndarray,
    xnet_out: np.ndarray | None,
    x0: np.ndarray | None,
    lo: int,
    hi: int,
) -> None:
    """The recurrence for windows lo:hi, in place in ``states[:, lo:hi]`` (PROTOCOL §2).

    Every pass of a step works in the step's own slot of ``states`` (the product writes it, the
    elementwise passes update it), so no (windows, N) scratch buffer is touched besides the input
    projection: one array fewer in cache per step, the same operations in the same order (4 %
    less CPU time at 100 units, BENCHMARKS.md "Reservoir core").
    """
    t_len, _, _ = xt.shape
    m, n = hi - lo, res.units
    a = DTYPE(res.leak)
    use_ip = res.has_ip
    g, bias = res.gain, res.bias
    proj = np.empty((min(_TIME_CHUNK, t_len), m, n), DTYPE)
    prev = None if x0 is None else x0[lo:hi]
    for t0 in range(0, t_len, _TIME_CHUNK):
        t1 = min(t0 + _TIME_CHUNK, t_len)
        np.matmul(xt[t0:t1, lo:hi], res._w_in_t, out=proj[: t1 - t0])
        for t in range(t0, t1):
            cur = states[t, lo:hi]
            if prev is None:  # x(0) = 0: no recurrent term
                np.copyto(cur, proj[t - t0])
            else:
                np.matmul(prev, res._w_t, out=cur)
                cur += proj[t - t0]
            if xnet_out is not None:
                np.copyto(xnet_out[t, lo:hi], cur)
            if use_ip:
                cur *= g
                cur += bias
            np.tanh(cur, out=cur)
            if a != 1.0:
                # x(t) = x(t-1) + a (h(t) - x(t-1)): the leak in three passes, no extra buffer.
                if prev is not None:
                    cur -= prev
                cur *= a
                if prev is not None:
                    cur += prev
            prev = cur


@dataclass(frozen=True)
class StateBatch:
    """States of one batch of windows: ``states`` (T, B, N), the window indices, and
    ``xnet`` (T, B, N) when it was requested."""

    index: np.ndarray
    states: np.ndarray
    xnet: np.ndarray | None = None


def iter_states(
    res: Reservoir,
    x: np.ndarray,
    batch_size: int = 256,
    *,
    order: np.ndarray | None = None,
    with_xnet: bool = False,
) -> Iterator[StateBatch]:
    """Yield the states of ``x`` (windows, T, U) batch by batch, in ``order`` if given.

    One buffer is reused for every batch (a shorter last batch uses its front): consume or copy
    each batch before asking for the next. Memory is O(batch_size · T · N), whatever the number of windows.
    """
    BATCH_SIZE.check("batch_size", batch_size)
    n_win = x.shape[0]
    idx_all = np.arange(n_win) if order is None else np.asarray(order)
    flat: np.ndarray | None = None  # one buffer for every batch; a shorter last batch uses its front
    xflat: np.ndarray | None = None
    for start in range(0, len(idx_all), batch_size):
        idx = idx_all[start : start + batch_size]
        batch = x[idx] if order is not None else x[start : start + len(idx)]
        shape = (batch.shape[1], len(idx), res.units)
        size = shape[0] * shape[1] * shape[2]
        if flat is None or flat.size < size:
            flat = np.empty(size, DTYPE)
            xflat = np.empty(size, DTYPE) if with_xnet else None
        buf = flat[:size].reshape(shape)
        xbuf = xflat[:size].reshape(shape) if xflat is not None else None
        states = run_batch(res, batch, out=buf, xnet_out=xbuf)
        yield StateBatch(index=idx, states=states, xnet=xbuf)


def map_states(
    res: Reservoir,
    x: np.ndarray,
    consumer: Callable[[StateBatch], None],
    batch_size: int = 256,
) -> None:
    """Feed every batch of states of ``x`` to ``consumer`` (a callback form of iter_states)."""
    for sb in iter_states(res, x, batch_size):
        consumer(sb)
