"""The arithmetic neighbour lookup of evenly spaced grids (rounding_grid,
nearest_indices) picks the same neighbours, with the same floats, as the
bucket table and the binary search: the same outputs, bit for bit."""

import numpy as np
import pytest

from skdp_label._kernels import _sampling as S
from skdp_label.mechanisms._prior import NUMPY_BELOW, nearest_by_search, nearest_domain_index

_GRIDS = [
    np.arange(0.0, 401.0),  # resolution 1
    np.linspace(0.0, 400.0, 101),  # the 'auto' grids are np.linspace
    np.linspace(-3.3, 17.1, 77),  # a step that is not a binary fraction
    np.linspace(1e6, 1e6 + 5.0, 1001),  # a small step far from zero
    -2.0 + 0.1 * np.arange(41.0),  # a resolution grid (resolve_domain: lo + step * i)
    -3.0 + 0.25 * np.arange(41.0),
    np.array([-1.0, 0.0, 1.0]),
    np.array([0.0, 1.0, 3.0]),  # the last gap is free: longer,
    np.array([0.0, 1.0, 2.0, 2.5]),  # or shorter
]


def _probe(values, rng):
    """Labels where a neighbour lookup can go wrong: the grid points, one
    float either side, the midpoints (the nearest value's ties) and their
    neighbours, -0.0, labels beyond both ends, and random ones."""
    mids = (values[1:] + values[:-1]) / 2
    edges = np.concatenate([values, mids])
    span = values[-1] - values[0]
    return np.concatenate([
        edges, np.nextafter(edges, -np.inf), np.nextafter(edges, np.inf), [-0.0, 0.0],
        [values[0] - span, values[-1] + span], rng.uniform(values[0], values[-1], 5000),
    ])


@pytest.mark.parametrize("values", _GRIDS, ids=lambda v: f"k={v.size}")
def test_arithmetic_rounding_is_the_bucket_rounding(values):
    assert S.arithmetic_grid(values) is not None
    arithmetic = S.rounding_grid(values)
    buckets = S.rounding_grid(values, arithmetic=False)
    assert arithmetic[1].size == 0 and buckets[1].size > 0  # the two lookups
    y = np.repeat(_probe(values, np.random.default_rng(1)), 3)
    keep = S.rr_constants(values.size, 0.0)  # RR that never flips: the rounded value
    out = [S.sample_rows(np.random.default_rng(7), values, y=y, grid=g, rr=keep)
           for g in (arithmetic, buckets)]
    np.testing.assert_array_equal(out[0], out[1])
    # And through the alias tables (the unbiased mechanisms' path).
    matrix = np.random.default_rng(3).dirichlet(np.ones(6), size=values.size)
    tables = S.categorical_tables(matrix)
    out = [S.sample_rows(np.random.default_rng(8), np.arange(6.0), y=y, grid=g, tables=tables)
           for g in (arithmetic, buckets)]
    np.testing.assert_array_equal(out[0], out[1])


@pytest.mark.parametrize("values", _GRIDS, ids=lambda v: f"k={v.size}")
def test_nearest_indices_are_the_binary_search(values):
    y = _probe(values, np.random.default_rng(2))
    np.testing.assert_array_equal(S.nearest_indices(values, y), nearest_by_search(values, y))
    # The mechanisms' encoding takes the arithmetic path for releases.
    y = np.resize(y, max(y.size, NUMPY_BELOW))
    np.testing.assert_array_equal(nearest_domain_index(values, y), nearest_by_search(values, y))


def test_uneven_grids_keep_the_bucket_lookup():
    values = np.linspace(0.0, 40.0, 41)
    # One interior value off by one float, or by 0.3 of a step: not arithmetic.
    ulp = values.copy()
    ulp[7] = np.nextafter(ulp[7], np.inf)
    shifted = values.copy()
    shifted[7] += 0.3
    for grid in (ulp, shifted, np.array([0.0, 1.0, 3.0, 4.0]), np.array([0.0, 1.0]),
                 np.array([0.0, 1.0, 2.0, 2.0])):
        assert S.arithmetic_grid(grid) is None
        assert S.rounding_grid(grid)[1].size > 0
        assert S.nearest_indices(grid, np.array([1.0])) is None
    # The last value is free (np.linspace sets it to the end point).
    loose_end = values.copy()
    loose_end[-1] = np.nextafter(loose_end[-1], np.inf)
    assert S.arithmetic_grid(loose_end) == 1.0
    # A step too small for the float resolution of the grid's magnitude.
    assert S.arithmetic_grid(1e12 + np.arange(3.0) * 2.0**-10) is None


def test_a_wrong_arithmetic_lookup_is_caught():
    # Mutation: the arithmetic constants forced onto the grid with one value
    # shifted by 0.3 of a step (the detector refuses it) round labels just
    # below the shifted value onto the wrong neighbours; the comparison of
    # test_arithmetic_rounding_is_the_bucket_rounding sees it.
    shifted = np.linspace(0.0, 40.0, 41)
    shifted[7] += 0.3
    y = np.full(2000, 7.1)  # between 7.0 (where 7 was) and 7.3
    keep = S.rr_constants(shifted.size, 0.0)
    exact = S.sample_rows(np.random.default_rng(7), shifted, y=y, grid=S.rounding_grid(shifted), rr=keep)
    assert set(np.unique(exact)) == {6.0, 7.3}  # between its true neighbours
    broken = (shifted, np.zeros(0, np.int64), np.array([0.0, 1.0, 1.0]))
    wrong = S.sample_rows(np.random.default_rng(7), shifted, y=y, grid=broken, rr=keep)
    assert not np.array_equal(wrong, exact)


@pytest.mark.parametrize("values", [np.arange(4.0) * 5e-324, np.arange(5.0) * 1e-310,
                                    np.arange(5.0) * 2.0**-1030],
                         ids=["denormal-min", "denormal", "denormal-pow2"])
def test_a_subnormal_step_keeps_the_search(values):
    # 1 / step overflows (or the step's roundings are not relative): the
    # arithmetic guess was nan -> index -2**63 (compiled) or a ValueError (twin).
    y = _probe(values, np.random.default_rng(4))
    codes = S.nearest_indices(values, y)
    assert codes is None or np.array_equal(codes, nearest_by_search(values, y))
    keep = S.rr_constants(values.size, 0.0)
    out = S.sample_rows(np.random.default_rng(7), values, y=y, grid=S.rounding_grid(values), rr=keep)
    ref = S.sample_rows(np.random.default_rng(7), values, y=y,
                        grid=S.rounding_grid(values, arithmetic=False), rr=keep)
    np.testing.assert_array_equal(out, ref)


def test_a_subnormal_domain_bin_lookup_is_the_search():
    from skdp_label.mechanisms.bins._sampling import BinLookup

    values = np.arange(6.0) * 5e-324  # span / buckets underflows: 1 / width is inf
    y = _probe(values, np.random.default_rng(5))
    lookup = BinLookup(values, np.array([0, 0, 1, 1, 2, 2]))
    np.testing.assert_array_equal(lookup(y), lookup.bin_map[nearest_by_search(values, y)])


def test_arithmetic_indices_fit_the_int32_conversion():
    # The arithmetic passes (rounding, nearest rows, MVU's pieces) convert a
    # grid index to int64 through int32 (vectorised): exact only while every
    # arithmetic grid has fewer than 2**31 points, which arithmetic_grid
    # guarantees; a larger cap would wrap indices silently.
    assert S._MAX_ARITHMETIC_POINTS <= 2**31
    values = np.linspace(-3.0, 5.0, 1001)
    y = np.concatenate([values, np.random.default_rng(2).uniform(-4.0, 6.0, 3000)])
    np.testing.assert_array_equal(S.nearest_indices(values, y), nearest_by_search(values, y))
