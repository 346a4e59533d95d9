"""Shared setup of the Flower apps' tests."""

from __future__ import annotations

import pytest
from threadpoolctl import threadpool_limits


@pytest.fixture(autouse=True)
def one_blas_thread():
    """The expected arrays are computed in this process with one BLAS thread, as the apps' Ray
    workers (num_cpus=1) and the pipeline's trials run: OpenBLAS splits its sums by thread, so
    equal bits are only asserted between computations with the same thread count."""
    with threadpool_limits(1):
        yield
