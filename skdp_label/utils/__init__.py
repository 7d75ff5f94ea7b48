"""Utilities shared by mechanisms and estimators."""

from ._random import PrivacyLeakWarning, check_random_state, release_generator

__all__ = ["PrivacyLeakWarning", "check_random_state", "release_generator"]
