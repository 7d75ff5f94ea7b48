"""Pytest configuration shared by the test suite and the doctests."""

import pytest
from threadpoolctl import threadpool_limits


@pytest.fixture(autouse=True)
def _single_blas_thread():
    """One BLAS thread per test: on a small shared machine, multithreaded BLAS
    in small problems spins and slows solvers like LogisticRegression by 10-50x."""
    with threadpool_limits(limits=1):
        yield
