"""The federated algorithms: IncFed (sum of ridge statistics), FedAvg (average of local readouts)
and FedIP (rounds of local IP epochs on (g, b), averaged by window count).

Clients keep their windows; only messages from :mod:`esnfed_core.messages` reach the server,
and each one is recorded in the :class:`CommLedger` when one is given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from esnfed_core.aggregate import weighted_average
from esnfed_core.messages import CommLedger, ReadoutMessage, StatsMessage
from esnfed_core.readout import LAMBDA, Counts, RidgeStats, evaluate, ridge_stats, solve
from esnfed_core.reservoir import Reservoir
from esnfed_core.sampling import FULL, KEY, CLIENT_FRACTION, sample_clients
from esnfed_core.validation import check_param

__all__ = ["Client", "IncFedResult", "incfed", "fedavg", "fedip"]

if TYPE_CHECKING:
    from esnfed_core.plasticity import Aggregate, IPConfig, Progress


class Client:
    """A federation member: holds windows ``x`` (W, T, U) and labels (W, T) privately."""

    def __init__(self, name: str, x: np.ndarray, labels: np.ndarray, n_classes: int,
                 batch_size: int = 256, solver: str = "cholesky", bias: bool = False):
        if len(x) != len(labels):
            raise ValueError(f"client {name}: {len(x)} windows but {len(labels)} label rows")
        self.name = name
        self._x = x
        self._labels = labels
        self.n_classes = n_classes
        self.batch_size = batch_size
        self.solver = solver  # readout.solve's solver for the local FedAvg readout
        self.bias = bias  # readout.bias: statistics of the augmented states [S, 1] (RidgeStats.bias)

    @property
    def num_examples(self) -> int:
        return len(self._x)

    def fit_stats(self, res: Reservoir) -> StatsMessage:
        """IncFed: the client's ridge statistics."""
        return StatsMessage(ridge_stats(res, self._x, self._labels, self.n_classes, self.batch_size,
                                        self.bias))

    def fit_readout(self, res: Reservoir, lam: float) -> ReadoutMessage:
        """FedAvg: a readout solved on the client's data alone."""
        stats = ridge_stats(res, self._x, self._labels, self.n_classes, self.batch_size, self.bias)
        return ReadoutMessage(solve(stats, lam, self.solver), num_examples=self.num_examples)

    def evaluate(self, res: Reservoir, readouts: np.ndarray) -> Counts:
        return evaluate(res, self._x, self._labels, readouts, self.batch_size)


@dataclass(frozen=True)
class IncFedResult:
    stats: RidgeStats
    readouts: np.ndarray  # (L, C, N), one per λ


def incfed(
    res: Reservoir | Sequence[Reservoir],
    clients: Sequence[Client],
    lambdas: Sequence[float],
    ledger: CommLedger | None = None,
    rnd: int = 0,
    solver: str = "cholesky",
) -> IncFedResult:
    """IncFed: every client uploads (A_c, B_c, n_c); the server sums and solves for each λ
    (``solver``: see :func:`esnfed_core.readout.solve`).

    Identical to centralised ridge on the pooled data. Each client then downloads one readout.
    ``res`` (a Reservoir or DeepReservoir) may also be a list or tuple of one reservoir per client (structural alignment, esnfed_core.heterogeneous:
    every client's statistics through its own aligned reservoir, of equal units).
    """
    if not clients:
        raise ValueError("incfed: no clients")
    reservoirs = list(res) if isinstance(res, (list, tuple)) else [res] * len(clients)
    if len(reservoirs) != len(clients):
        raise ValueError(f"incfed: {len(reservoirs)} reservoirs for {len(clients)} clients")
    total: RidgeStats | None = None
    for c, r in zip(clients, reservoirs):
        msg = c.fit_stats(r)
        if ledger is not None:
            ledger.record("incfed", rnd, c.name, "up", msg)
        total = msg.stats if total is None else total + msg.stats
    readouts = solve(total, list(lambdas), solver)
    if ledger is not None:
        for c in clients:
            ledger.record("incfed", rnd, c.name, "down", ReadoutMessage(readouts[0]))
    return IncFedResult(total, readouts)


def fedavg(
    res: Reservoir,
    clients: Sequence[Client],
    lam: float,
    ledger: CommLedger | None = None,
    rnd: int = 0,
    *,
    aggregate: Callable[[Sequence[np.ndarray], Sequence[int]], np.ndarray] | None = None,
) -> np.ndarray:
    """FedAvg of readouts: local ridge with the same λ, averaged by window count: (C, N), or
    (C, N+1) with the clients' readout bias (averaged like the weights).
    ``aggregate`` (readouts, window counts) -> readout replaces the server's weighted mean (e.g.
    DP-FedAvg, :func:`esnfed_core.privacy.fedavg_aggregate`)."""
    LAMBDA.check("lambda", lam)
    if not clients:
        raise ValueError("fedavg: no clients")
    msgs = []
    for c in clients:
        msg = c.fit_readout(res, lam)
        if ledger is not None:
            ledger.record("fedavg", rnd, c.name, "up", msg)
        msgs.append(msg)
    w = (aggregate or weighted_average)([m.w for m in msgs], [m.num_examples for m in msgs])
    if ledger is not None:
        for c in clients:
            ledger.record("fedavg", rnd, c.name, "down", ReadoutMessage(w))
    return w


def fedip(
    res: Reservoir,
    client_xs: Sequence[np.ndarray],
    cfg: IPConfig,
    rounds: int,
    local_epochs: int,
    seed: int,
    ledger: CommLedger | None = None,
    client_names: Sequence[str] | None = None,
    *,
    progress: Progress | None = None,
    aggregate: Aggregate | None = None,
    client_fraction: float = FULL,
) -> Reservoir:
    """FedIP (PROTOCOL §5): ``rounds`` rounds of ``local_epochs`` local IP epochs per client,
    averaged by window count; 2N floats each way per client and round (ledger: "fedip").
    ``aggregate`` replaces the server's weighted mean of (g, b) (e.g. the DP average of
    esnfed_core.privacy); see :func:`esnfed_core.plasticity.fedip_round`.

    ``client_fraction`` < 1 (params.yaml federated.client_fraction): each round only the clients
    :func:`esnfed_core.sampling.sample_clients` draws from ``seed`` and the round index (among
    those with windows) download (g, b), fit and upload; the server averages theirs (weights n_c
    over the sampled ones). A client left out of a round does not fit, so its shuffle generator
    does not advance.

    Every client shuffles with its own generator seeded with ``seed``: a client's batches do not
    depend on which other clients take part, so FedIP on one client is centralised IP
    (``train_ip`` with rounds·local_epochs epochs), and identical clients stay identical.
    """
    # The IP code is imported when FedIP runs: a trial of a method without IP does not import
    # plasticity, so its code fingerprint (esnfed_stages.experiment.fingerprint.trial_modules) leaves it out.
    from esnfed_core.plasticity import (  # noqa: PLC0415
        broadcast_reservoir, client_names_or_default, fedip_round, ip_epoch,
    )

    check_param("rounds", rounds, integer=True, low=0)
    check_param("local_epochs", local_epochs, integer=True, low=1)
    CLIENT_FRACTION.check(KEY, client_fraction)
    if not client_xs:
        raise ValueError("fedip: no clients")
    names = client_names_or_default(client_names, len(client_xs))
    keep = [i for i, x in enumerate(client_xs) if len(x) > 0]  # clients without windows sit out
    if not keep:
        raise ValueError("fedip: every client has zero windows")
    rngs = [np.random.default_rng(seed) for _ in keep]
    broadcast_reservoir(res, [names[i] for i in keep], ledger, "fedip")

    def local_fit(i: int, rng: np.random.Generator) -> Callable[[Reservoir], Reservoir]:
        def fit(start: Reservoir) -> Reservoir:
            for _ in range(local_epochs):
                start = ip_epoch(start, client_xs[i], cfg, rng)
            return start
        return fit

    fits = [local_fit(i, rng) for i, rng in zip(keep, rngs)]
    weights = [len(client_xs[i]) for i in keep]
    kept_names = [names[i] for i in keep]
    for r in range(rounds):
        s = sample_clients(len(keep), client_fraction, seed, r)  # every client at fraction 1, nothing drawn
        res = fedip_round(res, [fits[j] for j in s], [weights[j] for j in s], [kept_names[j] for j in s],
                          ledger, "fedip", r, aggregate)
        if progress is not None:
            progress(r + 1, rounds)
    return res
