"""Numba kernels: the hot loops of sampling and optimisation (private)."""
