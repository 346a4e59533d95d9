"""Metrics of continual runs (accuracy matrix, stream accuracy, forgetting, backward and forward
transfer) and reservoir activation statistics (per-unit histograms, density, KL divergence to the
IP target N(μ, σ²)).

Accuracies are computed from counts of correct and total time steps, so pooling over contexts or
users is a sum of counts (PROTOCOL §3, §6), never an average of accuracies; only the summaries of
an accuracy matrix (ACC, BWT, FWT, forgetting) average its entries, as their definitions do.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np

from esnfed_core.quote import quote
from esnfed_core.readout import predict
from esnfed_core.reservoir import DTYPE, Reservoir, iter_states
from esnfed_core.validation import COUNT, ParameterError, check_param

BINS = COUNT  # histogram bins (params.yaml assess.activation_bins)


def _counts(correct: np.ndarray, total: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    correct = np.asarray(correct, dtype=np.float64)
    total = np.asarray(total, dtype=np.float64)
    t = len(total)
    if correct.shape != (t, t):
        raise ValueError(f"correct: expected shape {(t, t)} for {t} contexts, got {correct.shape}")
    return correct, total


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """num / den with NaN where den is 0 (a context without evaluation data)."""
    num, den = np.broadcast_arrays(np.asarray(num, np.float64), np.asarray(den, np.float64))
    out = np.full(num.shape, np.nan)
    np.divide(num, den, out=out, where=den > 0)
    return out


def accuracy_matrix(correct: np.ndarray, total: np.ndarray) -> np.ndarray:
    """(T, T): entry [i, j] = accuracy of the model after context i on context j."""
    correct, total = _counts(correct, total)
    return _ratio(correct, total[None, :])


def stream_accuracy(correct: np.ndarray, total: np.ndarray) -> np.ndarray:
    """(T,): after context i, the accuracy on the pooled data of contexts 0..i (PROTOCOL §6)."""
    correct, total = _counts(correct, total)
    lower = np.tril(correct)  # row i keeps contexts j <= i
    return _ratio(lower.sum(axis=1), np.cumsum(total))


def _matrix(acc: np.ndarray) -> np.ndarray:
    acc = np.asarray(acc, dtype=np.float64)
    if acc.ndim != 2 or acc.shape[0] != acc.shape[1] or not acc.size:
        raise ValueError(f"acc: expected a square accuracy matrix (contexts × contexts), got shape {acc.shape}")
    return acc


def _mean_defined(values: np.ndarray) -> float:
    """The mean of the values that are not NaN (a context without test data), NaN if none is."""
    values = np.asarray(values, dtype=np.float64)
    defined = values[~np.isnan(values)]
    return float(defined.mean()) if defined.size else float("nan")


def forgetting(acc: np.ndarray) -> np.ndarray:
    """(T−1,): for each context j before the last, the best accuracy on j seen after contexts
    j..T−2 minus the final accuracy on j (Chaudhry et al. 2018); positive means forgotten.
    ``acc``: an accuracy matrix (:func:`accuracy_matrix`; NaN where j has no test data)."""
    acc = _matrix(acc)
    t = len(acc)
    return np.array([np.max(acc[j : t - 1, j]) - acc[t - 1, j] for j in range(t - 1)])


def mean_forgetting(acc: np.ndarray) -> float:
    """Average forgetting over the contexts before the last that have test data (NaN for a
    single context)."""
    return _mean_defined(forgetting(acc))


def average_accuracy(acc: np.ndarray) -> float:
    """ACC of Lopez-Paz & Ranzato (2017): the final model's accuracy averaged over the contexts
    (each context weighs the same, unlike the stream accuracy, which pools their time steps)."""
    return _mean_defined(_matrix(acc)[-1])


def backward_transfer(acc: np.ndarray) -> float:
    """BWT of Lopez-Paz & Ranzato (2017): the mean over contexts j before the last of the final
    accuracy on j minus the accuracy on j right after learning it, R[T−1, j] − R[j, j]; negative
    means forgotten (NaN for a single context)."""
    acc = _matrix(acc)
    return _mean_defined(acc[-1, :-1] - np.diag(acc)[:-1])


def forward_transfer(acc: np.ndarray, reference: float | np.ndarray) -> float:
    """FWT of Lopez-Paz & Ranzato (2017): the mean over contexts i after the first of the accuracy
    on i of the model that has not yet seen it (after context i − 1) minus ``reference`` (a number,
    or one per context: the accuracy on i of a model that learnt nothing), R[i−1, i] − b_i
    (NaN for a single context)."""
    acc = _matrix(acc)
    ref = np.broadcast_to(np.asarray(reference, dtype=np.float64), (len(acc),))
    return _mean_defined(np.diag(acc, k=1) - ref[1:])


# The continual-learning summary of one accuracy matrix (continual_metrics), in this order.
CONTINUAL_METRICS = ("acc", "forgetting", "bwt", "fwt")


def continual_metrics(acc: np.ndarray, reference: float | np.ndarray) -> dict[str, float]:
    """ACC, mean forgetting, BWT and FWT (against ``reference``) of one accuracy matrix."""
    return {"acc": average_accuracy(acc), "forgetting": mean_forgetting(acc),
            "bwt": backward_transfer(acc), "fwt": forward_transfer(acc, reference)}


def step_accuracy(
    res: Reservoir, x: np.ndarray, labels: np.ndarray, readout: np.ndarray, batch_size: int = 256
) -> tuple[np.ndarray, np.ndarray]:
    """Correct and total predictions at each time step position t of the windows: (T,), (T,).

    Shows how accuracy grows as the state leaves x(0) = 0 within a window.
    """
    t_len = x.shape[1]
    correct = np.zeros(t_len, np.int64)
    for sb in iter_states(res, x, batch_size):
        correct += (predict(sb.states, readout) == labels[sb.index]).sum(axis=0)
    return correct, np.full(t_len, len(x), np.int64)


# --- activation statistics -------------------------------------------------------------------

_KINDS = ("state", "activation")
_HIST_CHUNK_ELEMENTS = 1 << 20  # values binned at once by histogram_values


@dataclass(frozen=True, eq=False)
class ActivationHistogram:
    """Per-unit histograms of reservoir values on fixed bins: ``counts`` (N, bins), ``edges``
    (bins+1,). Values outside the edges are counted in the first or last bin. Adds with ``+``."""

    edges: np.ndarray
    counts: np.ndarray

    @property
    def n_values(self) -> int:
        """Values per unit (time steps × windows)."""
        return int(self.counts[0].sum()) if len(self.counts) else 0

    def __add__(self, other: "ActivationHistogram") -> "ActivationHistogram":
        if not np.array_equal(self.edges, other.edges) or self.counts.shape != other.counts.shape:
            raise ValueError("ActivationHistogram: cannot add histograms with different bins or units")
        return ActivationHistogram(self.edges, self.counts + other.counts)

    def density(self) -> np.ndarray:
        """(bins,): density of the values of all units pooled (integrates to 1 over the edges)."""
        pooled = self.counts.sum(axis=0).astype(np.float64)
        return _ratio(pooled, pooled.sum() * np.diff(self.edges))

    def unit_density(self) -> np.ndarray:
        """(N, bins): density of each unit's values."""
        c = self.counts.astype(np.float64)
        return _ratio(c, c.sum(axis=1, keepdims=True) * np.diff(self.edges)[None, :])

    def kl(self, mu: float, sigma: float) -> np.ndarray:
        """(N,): KL divergence of each unit's binned values to N(μ, σ²) (see gaussian_kl)."""
        return gaussian_kl(self.counts, self.edges, mu, sigma)

    def mean_kl(self, mu: float, sigma: float) -> float:
        """The units' KL divergences to N(μ, σ²), averaged over units: what IP minimises."""
        return float(np.mean(self.kl(mu, sigma)))

    def pooled_kl(self, mu: float, sigma: float) -> float:
        """KL divergence of all units' values pooled (the density of the figures) to N(μ, σ²)."""
        return float(gaussian_kl(self.counts.sum(axis=0), self.edges, mu, sigma))


def _log_gaussian_mass(edges: np.ndarray, mu: float, sigma: float) -> np.ndarray:
    """log P(lo ≤ Z < hi) for Z ~ N(μ, σ²) per bin, accurate far in the tails."""
    import scipy.special  # noqa: PLC0415 (lazy: every stage imports this module, few bin activations)

    z = (np.asarray(edges, np.float64) - mu) / sigma
    lo, hi = z[:-1], z[1:]
    out = np.empty(len(lo))
    # Work in the tail each bin lies in, as a difference of log-CDFs, so that bins many σ
    # away keep a finite, accurate mass instead of 1 − 1 = 0.
    right = lo >= 0
    left = hi <= 0
    mid = ~(right | left)
    a, b = scipy.special.log_ndtr(-lo[right]), scipy.special.log_ndtr(-hi[right])
    out[right] = a + np.log1p(-np.exp(b - a))
    a, b = scipy.special.log_ndtr(hi[left]), scipy.special.log_ndtr(lo[left])
    out[left] = a + np.log1p(-np.exp(b - a))
    out[mid] = np.log(scipy.special.ndtr(hi[mid]) - scipy.special.ndtr(lo[mid]))
    return out


def gaussian_kl(counts: np.ndarray, edges: np.ndarray, mu: float, sigma: float) -> np.ndarray:
    """KL(p ‖ q) along the last axis, p = the histogram's bin frequencies, q = the mass of
    N(μ, σ²) in each bin.

    q is not renormalised to the edges: as the bins narrow this tends to the continuous KL
    divergence of the values' density to N(μ, σ²), the quantity IP minimises; it is ≥ −log of
    the Gaussian mass inside the edges, hence > 0. An empty histogram gives NaN.
    """
    check_param("sigma", sigma, low=0.0, low_open=True)
    counts = np.asarray(counts, dtype=np.float64)
    if counts.shape[-1] != len(edges) - 1:
        raise ValueError(f"counts: {counts.shape[-1]} bins but {len(edges)} edges")
    logq = _log_gaussian_mass(edges, mu, sigma)
    total = counts.sum(axis=-1, keepdims=True)
    p = _ratio(counts, total)
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(counts > 0, p * (np.log(p) - logq), 0.0)
    kl = terms.sum(axis=-1)
    return np.where(total[..., 0] > 0, kl, np.nan)


def histogram_values(values: np.ndarray, bins: int = 100, low: float = -1.0,
                     high: float = 1.0) -> ActivationHistogram:
    """Per-unit histogram of ``values`` (..., N): the last axis is the unit."""
    BINS.check("bins", bins)
    if not high > low:
        raise ParameterError(f"histogram range: high {high} must exceed low {low}")
    values = np.asarray(values)
    n = values.shape[-1]
    counts = np.zeros(n * bins, np.int64)
    _add_counts(counts, values.reshape(-1, n), bins, low, high)
    return ActivationHistogram(np.linspace(low, high, bins + 1), counts.reshape(n, bins))


def _add_counts(counts: np.ndarray, flat: np.ndarray, bins: int, low: float, high: float,
                cycle: np.ndarray | None = None) -> None:
    """Add the per-unit bin counts of the rows ``flat`` (rows, N) to ``counts`` (groups·N·bins,):
    row r to group ``cycle[r mod len(cycle)]`` (every row to group 0 without it)."""
    n = flat.shape[1]
    offsets = (np.arange(n) * bins)[None, :]
    # A chunk of rows at a time: the float64 and index temporaries of a whole state block
    # (T·B·N values) would be several times its size, the largest buffers of an assessment.
    step = max(1, _HIST_CHUNK_ELEMENTS // max(n, 1))
    for lo in range(0, len(flat), step):
        idx = np.floor((flat[lo : lo + step].astype(np.float64) - low) * (bins / (high - low))).astype(np.intp)
        np.clip(idx, 0, bins - 1, out=idx)
        idx += offsets
        if cycle is not None:
            idx += (cycle[np.arange(lo, lo + len(idx)) % len(cycle)] * (n * bins))[:, None]
        counts += np.bincount(idx.ravel(), minlength=len(counts))


def activation_histogram(
    res: Reservoir, x: np.ndarray, *, kind: str = "state", bins: int = 100, batch_size: int = 256
) -> ActivationHistogram:
    """Histogram of the reservoir's values on windows ``x``, streamed batch by batch.

    ``kind="state"``: post-leak states x(t) (the papers' activation-density figures);
    ``kind="activation"``: h(t) = tanh(g·x_net + b), the values IP shapes toward N(μ, σ²).
    Both lie in (−1, 1), the histogram's range.
    """
    if kind not in _KINDS:
        raise ParameterError(f"kind: expected one of {', '.join(_KINDS)}, got {quote(kind)}")
    hist: ActivationHistogram | None = None
    for sb in iter_states(res, x, batch_size, with_xnet=kind == "activation"):
        vals = sb.states
        if kind == "activation":
            vals = np.tanh(sb.xnet * res.gain + res.bias, dtype=DTYPE)
        part = histogram_values(vals, bins)
        hist = part if hist is None else hist + part
    if hist is None:
        return ActivationHistogram(np.linspace(-1.0, 1.0, bins + 1), np.zeros((res.units, bins), np.int64))
    return hist


def group_histograms(res: Reservoir, x: np.ndarray, groups: np.ndarray, n_groups: int, *, bins: int = 100,
                     batch_size: int = 256) -> list[ActivationHistogram]:
    """Per-unit histograms of the post-leak states of windows ``x``, one per group: window i
    belongs to group ``groups[i]`` in 0..n_groups − 1 (a group without windows: zero counts). One
    pass over ``x`` in full batches, the groups' windows sharing them: the bins of
    activation_histogram on each group's windows alone, without a short batch per group (a
    user's context is a few windows, and a batch's cost is its T sequential steps)."""
    BINS.check("bins", bins)
    groups = np.asarray(groups, np.intp)
    if len(groups) != x.shape[0] or (len(groups) and (groups.min() < 0 or groups.max() >= n_groups)):
        raise ValueError(f"group_histograms: {len(groups)} groups in 0..{n_groups - 1} for {x.shape[0]} windows")
    n = res.units
    counts = np.zeros(n_groups * n * bins, np.int64)
    for sb in iter_states(res, x, batch_size):
        # states (T, B, N) flattened to rows t·B + b: row r is window r mod B of the batch
        _add_counts(counts, sb.states.reshape(-1, n), bins, -1.0, 1.0, groups[sb.index])
    edges = np.linspace(-1.0, 1.0, bins + 1)
    return [ActivationHistogram(edges, c) for c in counts.reshape(n_groups, n, bins)]


def activation_histograms(
    res: Reservoir, contexts: Sequence[np.ndarray], *, kind: str = "state", bins: int = 100,
    batch_size: int = 256,
) -> list[ActivationHistogram]:
    """One histogram per context (windows of each context in ``contexts``)."""
    return [activation_histogram(res, x, kind=kind, bins=bins, batch_size=batch_size) for x in contexts]
