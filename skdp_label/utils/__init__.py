"""Utilities shared by mechanisms and estimators."""

from ._random import check_random_generator

__all__ = ["check_random_generator"]
