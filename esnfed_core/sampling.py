"""Client sampling per round (params.yaml ``federated.client_fraction``): which clients a FedIP or
FedCLIP round broadcasts (g, b) to, drawn uniformly without replacement as in the FedCLIP paper's
FedAvg (Appendix A, "a random subset of participants S^r ⊂ C^r sampled uniformly").

The round size follows Flower's FedAvg (``flwr.serverapp.strategy.FedAvg.configure_train``:
``max(int(C · fraction_train), min_train_nodes)``) with ``min_train_nodes`` = 1: k = max(1,
⌊fraction · C⌋). The draw of round r comes from a generator seeded with (trial seed, salt, r), so a
trial's sets are the same on every run and a round's set does not depend on earlier rounds.
"""

from __future__ import annotations

import numpy as np

from esnfed_core.quote import quote
from esnfed_core.validation import Bound

# federated.client_fraction's range: (0, 1]; 1 (the default) = every client in every round.
CLIENT_FRACTION = Bound(low=0.0, high=1.0, low_open=True)
FULL = 1.0
# Keeps the sampling stream apart from the other draws seeded with the same trial seed (shuffles).
_SALT = 0x5A3

KEY = "federated.client_fraction"
# federated.sampling_pool: whom a FedCLIP IP round draws its clients from. ``context`` (default): the
# context's participants (the clients with windows there); ``roster``: all K training clients, the
# drawn ones without windows at the context sending nothing (data-independent sets: DP-FedCLIP
# samples only with it, docs/privacy.md "Client sampling under DP"). FedIP has no contexts: its
# rounds draw among the clients with windows whatever the pool.
POOL_KEY = "federated.sampling_pool"
POOLS = ("context", "roster")
CONTEXT_POOL, ROSTER_POOL = POOLS
# The fewest clients a sampled SecAgg+ round may go to: Flower's SecAggPlusWorkflow takes an
# integer number of shares above 2 (esnfed_flower.secagg sizes each round's shares to its clients).
SECAGG_MIN_CLIENTS = 3


def sample_size(n_clients: int, fraction: float) -> int:
    """Clients per round: max(1, ⌊fraction · n_clients⌋) (Flower's rule, at least one client)."""
    CLIENT_FRACTION.check(KEY, fraction)
    return max(1, int(n_clients * fraction))


def check_pool(pool: object) -> str:
    """``pool`` when it is one of :data:`POOLS`, else ValueError naming :data:`POOL_KEY`."""
    if pool not in POOLS:
        raise ValueError(f"{POOL_KEY}: expected one of {', '.join(POOLS)}, got {quote(pool)}")
    return str(pool)


def sample_clients(n_clients: int, fraction: float, seed: int, rnd: int) -> list[int]:
    """The indices (ascending: the server averages in client order) of the clients taking part in
    round ``rnd``; every index when ``fraction`` is 1, without drawing anything."""
    if n_clients < 1:
        raise ValueError(f"sample_clients: no clients (got {n_clients})")
    k = sample_size(n_clients, fraction)
    if k >= n_clients:
        return list(range(n_clients))
    rng = np.random.default_rng([int(seed), _SALT, int(rnd)])
    return sorted(int(i) for i in rng.choice(n_clients, size=k, replace=False))
