"""Mechanisms over many classes stay small: randomized response and RR-Top-k
build their k x k transition matrix on access instead of storing it (20,000
classes: 3.2 GB in memory and in every pickle), and a manifest leaves out a
matrix too large to be useful."""

import pickle
import warnings

import numpy as np
import pytest

from skdp_label.mechanisms._validation import law_epsilon
from skdp_label.mechanisms import RandomizedResponse, RRTopK, RRWithPrior
from skdp_label.mechanisms.classic._randomized_response import randomized_response_matrix
from skdp_label.mechanisms.classification._solver import rr_top_k_matrix
from skdp_label.release import mechanism_from_manifest, privatize

_K = 20_000


def _skewed_prior(k):
    prior = 1.0 / np.arange(1, k + 1)
    return prior / prior.sum()


@pytest.mark.parametrize("make", [
    lambda: RandomizedResponse(epsilon=1.0, classes=np.arange(_K)),
    lambda: RRTopK(epsilon=1.0, classes=np.arange(_K), prior=_skewed_prior(_K)),
    lambda: RRWithPrior(epsilon=1.0, classes=np.arange(_K), prior=_skewed_prior(_K)),
])
def test_a_fitted_mechanism_over_many_classes_pickles_small(make):
    y = np.random.default_rng(0).integers(0, _K, 5_000)
    mech = make()
    noisy = mech.fit_transform(y)
    assert noisy.shape == y.shape and np.isin(noisy, np.arange(_K)).all()
    # A stored k x k matrix would be 3.2 GB; the classes alone are 160 kB.
    assert len(pickle.dumps(mech)) < 2_000_000


def test_the_matrix_built_on_access_is_the_one_sampled_from():
    classes = np.array(["a", "b", "c", "d"])
    rr = RandomizedResponse(epsilon=0.7, classes=classes).fit(classes)
    np.testing.assert_array_equal(rr.transition_matrix_, randomized_response_matrix(4, law_epsilon(0.7)))
    prior = np.array([0.5, 0.3, 0.15, 0.05])
    top = RRTopK(epsilon=0.7, classes=classes, prior=prior).fit(classes)
    in_top = np.isin(classes, top.top_k_)
    np.testing.assert_array_equal(top.transition_matrix_, rr_top_k_matrix(in_top, law_epsilon(0.7)))
    # A parameter changed after fit: the matrix is still the fitted one (what
    # was sampled), and sampling refuses until the next fit.
    for mech, matrix in ((rr, rr.transition_matrix_), (top, top.transition_matrix_)):
        mech.set_params(epsilon=3.0)
        np.testing.assert_array_equal(mech.transition_matrix_, matrix)
        with pytest.raises(ValueError, match="epsilon"):
            mech.transform(classes)


def test_the_matrix_needs_a_fit():
    with pytest.raises(AttributeError):
        RandomizedResponse(epsilon=1.0, classes=[0, 1]).transition_matrix_
    assert not hasattr(RRTopK(epsilon=1.0, classes=[0, 1]), "transition_matrix_")


def test_a_manifest_leaves_out_a_huge_matrix_and_still_rebuilds(key):
    k = 1_500  # 2.25 million entries: above the manifest's limit
    y = np.arange(3_000) % k
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, release = privatize(y, RandomizedResponse(epsilon=1.0, classes=np.arange(k)), key, "big")
        _, small = privatize(y % 5, RandomizedResponse(epsilon=1.0, classes=np.arange(5)), key, "s")
    manifest = release.manifest()
    assert "transition_matrix" not in manifest and len(manifest["input_values"]) == k
    assert "transition_matrix" in small.manifest()
    rebuilt = mechanism_from_manifest(manifest)
    np.testing.assert_array_equal(rebuilt.transition_matrix_, randomized_response_matrix(k, law_epsilon(1.0)))
