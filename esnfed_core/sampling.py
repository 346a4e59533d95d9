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
# SecAgg+ survivors. Flower 1.42 folds each 32-byte mask seed to 32 bits before expanding it with
# Mersenne Twister, so after unmasking a survivor's vector is hidden only by its K' − 1 pairwise masks
# with the other survivors: 32·(K' − 1) bits of search (K' = 2: 2^32, practical). Deployment
# requires K' − 1 ≥ 4 (≥ 128 bits), i.e. a reconstruction threshold of at least 5; each client that
# colludes with the server removes 32 bits. The run config's key, absent = this deployment bound.
SURVIVORS_KEY = "secagg-min-survivors"
SECAGG_MIN_SURVIVORS = 5
# What esnfed flower (the pipeline's simulation) sets: Flower's own floor (a threshold ≥ 2), no
# bound; its SecAgg+ results are labelled a simulation of the protocol (esnfed_stages.studies.flower).
SIMULATION_MIN_SURVIVORS = 2


def secagg_threshold(k: int) -> int:
    """SecAgg+'s reconstruction threshold for ``k`` clients: max(2, k − 1), so one may drop out;
    the fewest vectors an unmasked sum can hold (distributed DP's K_min), i.e. the fewest survivors."""
    return max(2, int(k) - 1)


def min_survivors(value: object = None) -> int:
    """The run config's ``secagg-min-survivors`` (None: SECAGG_MIN_SURVIVORS), an integer ≥ 2; a
    ValueError naming the key otherwise."""
    if value is None:
        return SECAGG_MIN_SURVIVORS
    if isinstance(value, bool) or not isinstance(value, int) or value < SIMULATION_MIN_SURVIVORS:
        raise ValueError(f"{SURVIVORS_KEY}: expected an integer >= {SIMULATION_MIN_SURVIVORS}, got {quote(value)}")
    return value


def check_survivors(k: int, least: int) -> None:
    """A ValueError naming ``secagg-min-survivors`` when a SecAgg+ round of ``k`` clients could
    complete with fewer than ``least`` survivors (its threshold max(2, k − 1) below it)."""
    if secagg_threshold(k) < least:
        raise ValueError(f"{SURVIVORS_KEY}: a SecAgg+ round of {k} clients may complete with "
                         f"{secagg_threshold(k)} survivors, below {least}: Flower 1.42's 32-bit mask seeds leave a "
                         f"survivor hidden by {32 * (secagg_threshold(k) - 1)} bits (needs {least + 1} or more clients "
                         f"per round, or {SURVIVORS_KEY}: {SIMULATION_MIN_SURVIVORS} for a simulation)")


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
