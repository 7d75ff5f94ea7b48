"""Adversarial review of the Python twins of the sampling kernels and of the
seeded release streams (the twins' claim: bit for bit the compiled kernels'
output, the same digits read, for every input a kernel can see)."""

import warnings

import numpy as np
import pytest

from conftest import force_kernels
from skdp_label.mechanisms import get_mechanism_class


def _same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.dtype == b.dtype and a.shape == b.shape and a.tobytes() == b.tobytes()


def _state(rng):
    return rng.bit_generator.state["state"]


def _both(monkeypatch, release):
    """``release()`` through the forced twins, then the forced compiled kernels."""
    outs = []
    for use_twin in (True, False):
        with monkeypatch.context() as m, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            force_kernels(m, use_twin)
            outs.append(release())
    return outs


# -- randomized response on labels of a narrow dtype ---------------------------

# numba promotes int8 - int64 to int64 (and uint64 - int64 to float64); numpy
# scalars in a twin keep the label's dtype against a Python int (NEP 50): the
# code y - lo wrapped (int8; int16 alike, from 32,768 classes) or raised
# (uint64 below a negative lo).
# numba has no float16 at all (the compiled kernel raised).
@pytest.mark.parametrize("y, classes", [
    (np.array([100, -100, 0, 50, 99] * 40, np.int8), np.arange(-100, 101)),
    (np.array([0, 1, 2] * 60, np.uint64), np.arange(-1, 3)),
    (np.array([2047, -2048, 0, 5] * 40, np.float16), np.arange(-2048, 2048)),
    (np.array([3, 1, 2] * 60, np.uint8), np.arange(0, 4)),
    (np.array([2**63, 2**63 + 2] * 60, np.uint64), np.arange(2**63, 2**63 + 3, dtype=np.uint64)),
])
def test_rr_on_narrow_label_dtypes_is_the_same_through_twins(monkeypatch, y, classes):
    mech = get_mechanism_class("rr")(epsilon=0.5, classes=classes, random_state=3)
    twin, compiled = _both(monkeypatch, lambda: mech.fit_transform(y))
    assert _same(twin, compiled)
    assert twin.dtype == y.dtype
    # (uint64 labels: the class -1 comes out as 2**64 - 1, in both paths.)
    assert np.isin(twin, classes.astype(y.dtype)).all()
    assert not np.array_equal(twin, y)


# -- RR-on-Bins lookup: a domain value -0.0 and a label +0.0 --------------------

# values[j] - v = -0.0 - 0.0 = -0.0: its bit pattern is negative. The compiled
# kernel's int64 difference of patterns overflowed (LLVM folded it into a
# signed compare: bin j, right by luck); the twin's Python ints do not wrap
# and picked bin j + 1 (the value 1.0 for a label at distance 0 from -0.0).
def test_bins_lookup_of_a_label_zero_next_to_a_domain_value_minus_zero(monkeypatch):
    from skdp_label.mechanisms.bins._sampling import BinLookup

    values = np.array([-2.0, -1.0, -0.0, 1.0, 2.0])
    lookup = BinLookup(values, np.arange(5))
    y = np.array([0.0, -0.0, 0.0, 0.4, -0.6, 1e-300, -1e-300] * 30)
    outputs = np.array([10.0, 20.0, 30.0, 40.0, 50.0])
    runs = []
    for use_twin in (True, False):
        rng = np.random.default_rng(0)
        with monkeypatch.context() as m:
            force_kernels(m, use_twin)
            runs.append((lookup.sample(y, rng, outputs, 0.0), _state(rng)))  # no flip
    assert _same(runs[0][0], runs[1][0]) and runs[0][1] == runs[1][1]
    nearest = np.argmin(np.abs(y[:, None] - values[None, :]), axis=1)  # first of ties: not here
    assert np.array_equal(runs[0][0], outputs[nearest])
    assert np.array_equal(lookup(y), nearest)


# -- seeded streams: the public context must itself be reproducible -------------

# 'auto' measures n_eff by fitting the base estimator on synthetic labels; an
# unseeded random forest gave another n_eff on each fit, and n_eff is a
# parameter of the mechanism, hashed into the release's stream: the same
# random_state released other noise at every fit (none of 300 labels alike).
def test_a_seeded_auto_fit_with_an_unseeded_random_base_estimator_reproduces():
    from sklearn.ensemble import RandomForestRegressor

    from skdp_label import LabelDPRegressor

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    y = np.clip(X[:, 0] * 10.0 + 25.0, 0.0, 50.0)
    runs = []
    for _ in range(2):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            est = LabelDPRegressor(
                RandomForestRegressor(n_estimators=3, max_depth=3), epsilon=1.0,
                bounds=(0, 50), mechanism="auto", random_state=0,
            ).fit(X, y)
            runs.append((est.n_eff_, est.mechanism_.transform(y)))
    assert runs[0][0] == runs[1][0]
    assert _same(runs[0][1], runs[1][1])
