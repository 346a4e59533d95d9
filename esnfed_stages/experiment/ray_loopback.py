"""A local Ray instance reachable from this machine only: every Ray process of it (GCS, raylet,
object manager, agents, workers) listens on 127.0.0.1. Used by the "ray" trial backend
(esnfed_stages/experiment/ray_backend.py) and by the Flower runs' shared session (esnfed_flower/session.py);
imports only Ray and the core's errors, so the Flower environment (.venv-flower) can use it.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Iterator

import ray
from ray._private import ray_constants

from esnfed_core.errors import ConfigError

LOOPBACK = "127.0.0.1"
# Ray picks a local node's address by this switch, read when the node starts (0: the loopback).
_CLUSTER_SWITCH = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


@contextlib.contextmanager
def _loopback_node() -> Iterator[None]:
    """While a local instance starts, make Ray choose 127.0.0.1 as the node address.

    ``ray.init(_node_ip_address="127.0.0.1")`` does not do it (Ray swaps a loopback address for
    the machine's own on Linux); with the node address on the loopback, the GCS, raylet, object
    manager, agents and workers all bind to it. Ray reads the address from its cluster switch,
    as a module constant in this process and from the environment in the processes it spawns.
    """
    saved_const = getattr(ray_constants, "ENABLE_RAY_CLUSTER", None)
    saved_env = os.environ.get(_CLUSTER_SWITCH)
    ray_constants.ENABLE_RAY_CLUSTER = False
    os.environ[_CLUSTER_SWITCH] = "0"
    try:
        yield
    finally:
        ray_constants.ENABLE_RAY_CLUSTER = saved_const
        if saved_env is None:
            os.environ.pop(_CLUSTER_SWITCH, None)
        else:
            os.environ[_CLUSTER_SWITCH] = saved_env


def start_local(what: str, hint: str, **init_args: Any) -> None:
    """``ray.init(**init_args)`` as a local instance on the loopback (no dashboard); refuse (shut
    down, one-line ConfigError naming ``what``, ending with ``hint``) one whose node listens
    anywhere else."""
    with _loopback_node():
        ray.init(include_dashboard=False, dashboard_host=LOOPBACK, **init_args)
    addresses = {n.get("NodeManagerAddress") for n in ray.nodes()}
    if addresses != {LOOPBACK}:
        ray.shutdown()
        raise ConfigError(f"{what}: the local Ray instance listens on {', '.join(sorted(map(str, addresses)))}, "
                          f"not only {LOOPBACK} (this Ray version starts differently; {hint})")
