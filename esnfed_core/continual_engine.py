"""Where a continual run's heavy work runs (IP epochs and passes, ridge statistics, correct counts,
joining contexts): :class:`ContinualEngine`, the numpy core (:data:`NUMPY_ENGINE`; an accelerated
engine, esnfed_core.accel.continual, overrides every method with the same meaning), and
:class:`DryEngine`, which computes nothing but draws what the real fits draw (a stateless client
replays its history with it)."""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

import numpy as np

from esnfed_core.plasticity import IPConfig, ip_epoch, ip_pass, shuffled_batches
from esnfed_core.readout import Counts, RidgeStats, ridge_stats
from esnfed_core.readout import evaluate as evaluate_counts
from esnfed_core.replay import Split, concat_splits
from esnfed_core.reservoir import Reservoir


class ContinualEngine:
    """Where a continual run's heavy work runs: the numpy core (this class, the default). An
    accelerated engine overrides every method with the same meaning (results equal within
    float32 rounding)."""

    def concat(self, splits: Sequence[Split]) -> Split:
        """The windows and labels of ``splits`` one after the other."""
        return concat_splits(splits)

    def ip_epoch(self, res: Reservoir, x: np.ndarray, cfg: IPConfig, rng: np.random.Generator) -> Reservoir:
        """One shuffled IP epoch (:func:`esnfed_core.plasticity.ip_epoch`)."""
        return ip_epoch(res, x, cfg, rng)

    def ip_pass(self, res: Reservoir, batches: Iterable[np.ndarray], cfg: IPConfig) -> Reservoir:
        """One IP step per given mini-batch (:func:`esnfed_core.plasticity.ip_pass`)."""
        return ip_pass(res, batches, cfg)

    def fit_clients(self, start: Reservoir, fits: Sequence[Callable[[Reservoir], Reservoir]]) -> list[Reservoir]:
        """Every client's local fit of one FedCLIP round from ``start`` (one after the other
        here; an accelerated engine runs them side by side)."""
        return [fit(start) for fit in fits]

    def stats(self, res: Reservoir, x: np.ndarray, y: np.ndarray, n_classes: int,
              bias: bool = False) -> RidgeStats:
        """A client's ridge statistics (as :meth:`esnfed_core.federated.Client.fit_stats`), of
        the augmented states [S, 1] with ``bias``."""
        return ridge_stats(res, x, y, n_classes, bias=bias)

    def counts(self, res: Reservoir, x: np.ndarray, y: np.ndarray, w: np.ndarray) -> Counts:
        """Correct steps of readout ``w`` (C, N), or (C, N+1) with the bias, on windows ``x``."""
        return evaluate_counts(res, x, y, w)


NUMPY_ENGINE = ContinualEngine()


class DryEngine(ContinualEngine):
    """An engine that computes nothing but draws what the real fits draw: an IP epoch draws its
    shuffle (:func:`esnfed_core.plasticity.shuffled_batches`), an IP pass runs its batch iterator
    to the end (replay batches draw their permutations and read the buffer) and the reservoir
    comes back unchanged. It replays a client's history to rebuild its generators
    (:meth:`LocalClient.at`)."""

    def ip_epoch(self, res, x, cfg, rng):
        shuffled_batches(x, cfg.batch_size, rng)  # draws the epoch's permutation, reads nothing
        return res

    def ip_pass(self, res, batches, cfg):
        for _ in batches:
            pass
        return res


DRY_ENGINE = DryEngine()
