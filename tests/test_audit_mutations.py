"""Mutation tests for the audit helpers: an audit that cannot fail proves nothing.

Each auditor of ``_audit.py`` gets deliberately broken variants of real
mechanisms (defined here, never in the package) that it must flag, next to a
correct control that it must pass. Statistical audits run at ``alpha = 1e-7``
(a correct control fails with probability below 1e-7), and every mutant is
sized so that it escapes with probability below 1e-6; the numbers are in the
comments. Test-side randomness (labels, configurations) has fixed seeds; the
mechanisms draw from OS entropy, which is what the audits are about.
"""

import functools
import logging
import pickle
import random
import secrets
import warnings

import numpy as np
import pytest
from sklearn.base import BaseEstimator
from sklearn.linear_model import LinearRegression, Ridge, SGDRegressor
from sklearn.metrics import make_scorer, mean_squared_error
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from _audit import (
    assert_exactly_private,
    assert_no_random_state,
    audit_copies_independent,
    audit_messages_have_no_labels,
    audit_prior_is_noisy,
    audit_sampler,
    find_random_state,
    pickle_random_state_refs,
)
from skdp_label.mechanisms import (
    ExponentialMechanism,
    Laplace,
    RandomizedResponse,
    RROnBins,
)
from skdp_label.mechanisms.classic._exponential import exponential_matrix
from skdp_label.mechanisms._prior import nearest_domain_index

ALPHA = 1e-7
DATA_RNG = np.random.default_rng(20260815)
CLASSES = ["ant", "bee", "cod", "dog"]


# -- a correct control: the randomness model of issue 8 ---------------------------
class _FreshNoise:
    """Mixin emulating the target randomness model on this branch.

    The base class here still stores a Generator at fit (the lead is removing
    it); this mixin discards it and hands every release a generator seeded
    from fresh OS entropy, so that nothing kept can reproduce the noise.
    """

    @property
    def _rng(self):
        return np.random.default_rng()

    @_rng.setter
    def _rng(self, value):
        pass  # the generator the base class tries to keep is dropped

    def _release_source(self):
        """Generator of one release (mutants override this)."""
        return np.random.default_rng()

    def _randomize_column(self, y, rng):
        # Fresh entropy per release, whatever generator the caller kept.
        return super()._randomize_column(y, self._release_source())


class FreshRR(_FreshNoise, RandomizedResponse):
    pass


class FreshLaplace(_FreshNoise, Laplace):
    pass


def _fresh_rr(**kwargs):
    return FreshRR(1.0, classes=CLASSES, **kwargs).fit(CLASSES)


# -- assert_exactly_private ------------------------------------------------------
class RRMatrixEpsPlus(RandomizedResponse):
    """Mutant: builds (and samples) the RR matrix for epsilon + 0.1."""

    def _fit_mechanism(self, y):
        super()._fit_mechanism(y)
        self._matrix_epsilon = float(self.epsilon) + 0.1  # transition_matrix_ is built from it


class ExponentialMatrixEpsPlus(ExponentialMechanism):
    """Mutant: its beta is scaled as if calibrated for epsilon + 0.1."""

    def _fit_mechanism(self, y):
        super()._fit_mechanism(y)
        eps = float(self.epsilon)
        self.beta_ *= (eps + 0.1) / eps
        self.transition_matrix_ = exponential_matrix(self.input_values_, self.beta_)
        self._cdf = None  # the sampler rebuilds its CDF from the new matrix


@pytest.mark.parametrize("eps", [0.05, 1.0, 5.0])
@pytest.mark.parametrize(
    "honest,mutant,kwargs",
    [
        (RandomizedResponse, RRMatrixEpsPlus, dict(classes=CLASSES)),
        (ExponentialMechanism, ExponentialMatrixEpsPlus, dict(bounds=(0, 10), resolution=1.0)),
    ],
    ids=["rr", "exponential"],
)
def test_exact_privacy_audit_flags_a_matrix_built_for_a_larger_epsilon(eps, honest, mutant, kwargs):
    y = [CLASSES[0]] if "classes" in kwargs else [0.0]
    assert_exactly_private(honest(eps, **kwargs).fit(y).transition_matrix_, eps)
    with pytest.raises(AssertionError, match="privacy loss"):
        assert_exactly_private(mutant(eps, **kwargs).fit(y).transition_matrix_, eps)


# -- audit_sampler ---------------------------------------------------------------
def _moved_to_mode(mechanism, y, out, threshold):
    """Outputs of probability < threshold in their row replaced by the row's mode."""
    rows = nearest_domain_index(mechanism.input_values_, y)
    cols = nearest_domain_index(mechanism.output_values_, out)
    matrix = mechanism.transition_matrix_
    rare = matrix[rows, cols] < threshold
    mode = mechanism.output_values_[matrix[rows].argmax(axis=1)]
    return np.where(rare, mode, out)


class TailToModeExponential(ExponentialMechanism):
    """Mutant: outputs of probability < 0.02 go to the mode instead."""

    def _randomize_column(self, y, rng):
        return _moved_to_mode(self, y, super()._randomize_column(y, rng), 0.02)


class RareOutputsDroppedExponential(ExponentialMechanism):
    """Mutant: outputs of probability < 1e-3 are never produced (a 53-bit-uniform
    style tail loss, of total mass 1.5e-3 here)."""

    def _randomize_column(self, y, rng):
        return _moved_to_mode(self, y, super()._randomize_column(y, rng), 1e-3)


class OffGridExponential(ExponentialMechanism):
    """Mutant: a float artifact carries the label into the output's low bits."""

    def _randomize_column(self, y, rng):
        out = super()._randomize_column(y, rng)
        return out + 1e-9 * (y - out)


class RRSamplerEpsPlus(RandomizedResponse):
    """Mutant: an honest matrix, but the sampler keeps labels as at epsilon + 0.1."""

    def _randomize_column(self, y, rng):
        # The RR kernel samples from epsilon (its exact flip probability), so
        # the mutant samples at a larger epsilon than fit computed the matrix for.
        honest = self.epsilon
        self.epsilon = honest + 0.1
        try:
            return super()._randomize_column(y, rng)
        finally:
            self.epsilon = honest


@pytest.mark.parametrize(
    "mechanism,labels",
    [
        (RandomizedResponse(1.0, classes=CLASSES).fit(CLASSES), None),
        (ExponentialMechanism(6.0, bounds=(0, 10), resolution=1.0).fit([0.0]), [0.0, 5.0, 10.0]),
        (
            RROnBins(2.0, prior=(np.arange(8.0), [6, 4, 2, 2, 2, 2, 1, 1])).fit([0.0]),
            None,
        ),
    ],
    ids=["rr", "exponential", "rr-on-bins"],
)
def test_sampler_audit_passes_correct_samplers(mechanism, labels):
    pvalues = audit_sampler(mechanism, labels, n_per_label=20_000, alpha=ALPHA)
    assert len(pvalues) == (len(mechanism.input_values_) if labels is None else len(labels))


def test_sampler_audit_flags_a_sampler_moving_the_tail_onto_the_mode():
    # eps = 6 on 0..10: the end rows put 2.6% on outputs of probability < 0.02
    # (each between 0.0011 and 0.0123, expected 22 to 246 times in 20 000
    # draws, all above the coverage threshold log(2*2*11/1e-7) = 19.9). The
    # chi-square statistic's noncentrality is ~570 against a critical value
    # near 60, and the coverage check cannot miss an output never produced.
    mech = TailToModeExponential(6.0, bounds=(0, 10), resolution=1.0).fit([0.0])
    with pytest.raises(AssertionError) as info:
        audit_sampler(mech, [0.0, 10.0], n_per_label=20_000, alpha=ALPHA)
    assert "chi-square p =" in str(info.value)
    assert "never observed" in str(info.value)


def test_sampler_audit_flags_rare_outputs_never_produced():
    # eps = 8: row 0 gives output 8 probability 9.2e-4, expected 37 times in
    # 40 000 draws, above the coverage threshold log(2*11/1e-7) = 19.2; the
    # mutant never produces it. (The pooled chi-square alone may miss this.)
    mech = RareOutputsDroppedExponential(8.0, bounds=(0, 10), resolution=1.0).fit([0.0])
    with pytest.raises(AssertionError, match="never observed"):
        audit_sampler(mech, [0.0], n_per_label=40_000, alpha=ALPHA)


def test_sampler_audit_flags_outputs_off_the_declared_outputs():
    mech = OffGridExponential(1.0, bounds=(0, 10), resolution=0.5).fit([0.0])
    with pytest.raises(AssertionError, match="outside the row's support"):
        audit_sampler(mech, [2.5], n_per_label=2_000, alpha=ALPHA)


def test_sampler_audit_flags_a_sampler_keeping_labels_too_often():
    # k = 4, eps 1 -> 1.1: keep probability 0.475 -> 0.500. With 100 000
    # draws the noncentrality is 250 against a critical value of 36.8 (df 3,
    # level 5e-8): the mutant escapes with probability ~4e-23.
    mech = RRSamplerEpsPlus(1.0, classes=CLASSES).fit(CLASSES)
    with pytest.raises(AssertionError, match="chi-square"):
        audit_sampler(mech, CLASSES[:1], n_per_label=100_000, alpha=ALPHA)


# -- find_random_state / pickle_random_state_refs / assert_no_random_state ----------
_MODULE_RNG = np.random.default_rng()


def _uniforms(n, rng):
    return rng.random(n)


def _draw_from_module_rng(n):
    return _MODULE_RNG.random(n)


def _closure_over(rng):
    def draw(n):
        return rng.random(n)

    return draw


class _Slotted:
    __slots__ = ("source",)

    def __init__(self, source):
        self.source = source


class _StoredGenerator:
    """Mutant mixin: keeps one generator from fit and draws every release from
    it (the library's behaviour before issue 8)."""

    def fit(self, y, X=None):
        super().fit(y, X)
        self.source_ = np.random.default_rng()
        return self

    def _release_source(self):
        return self.source_


class _HiddenSeed:
    """Mutant mixin: draws an int from OS entropy at fit and seeds every release with it."""

    def fit(self, y, X=None):
        super().fit(y, X)
        self.seed_ = secrets.randbits(63)
        return self

    def _release_source(self):
        return np.random.default_rng(self.seed_)


class StoredGeneratorRR(_StoredGenerator, FreshRR):
    pass


class HiddenSeedRR(_HiddenSeed, FreshRR):
    pass


class HiddenSeedLaplace(_HiddenSeed, FreshLaplace):
    pass


class StoredSeedSequenceRR(FreshRR):
    """Mutant: keeps the SeedSequence its release generators are spawned from."""

    def fit(self, y, X=None):
        super().fit(y, X)
        self.entropy_ = np.random.SeedSequence()
        return self


class Keeps(FreshRR):
    """A fitted FreshRR to which a test attaches some state as ``kept_``."""

    def keep(self, value):
        self.kept_ = value
        return self


def _keeps(make):
    return Keeps(1.0, classes=CLASSES).fit(CLASSES).keep(make())


class _ClassLevelGenerator(FreshRR):
    shared_source = np.random.default_rng()


class _SeedAsParam(BaseEstimator):
    """Mutant: keeps an int, but its ``random_state`` parameter rebuilds the stream."""

    def __init__(self, seed=0):
        self.seed = seed

    @property
    def random_state(self):
        return np.random.default_rng(self.seed)

    def get_params(self, deep=True):
        return {"seed": self.seed, "random_state": self.random_state}


class _HiddenBehindReduce:
    """Mutant: keeps only a seed, but its pickle carries the generator."""

    def __init__(self):
        self.seed = secrets.randbits(64)

    def __reduce__(self):
        return (_HiddenBehindReduce._rebuild, (np.random.default_rng(self.seed),))

    @staticmethod
    def _rebuild(source):
        obj = _HiddenBehindReduce.__new__(_HiddenBehindReduce)
        obj.source = source
        return obj


MUTANTS_WITH_STATE = {
    "generator kept at fit": (
        lambda: StoredGeneratorRR(1.0, classes=CLASSES).fit(CLASSES),
        "StoredGeneratorRR.source_",
    ),
    "seed sequence kept at fit": (
        lambda: StoredSeedSequenceRR(1.0, classes=CLASSES).fit(CLASSES),
        "StoredSeedSequenceRR.entropy_",
    ),
    "bit generator in nested containers": (
        lambda: _keeps(lambda: {"streams": [(1, {np.random.PCG64()})]}),
        "Keeps.kept_['streams'][0][1]<set item>",
    ),
    "numpy object array": (
        lambda: _keeps(lambda: np.array([None, np.random.default_rng()], dtype=object)),
        "Keeps.kept_[1]",
    ),
    "slots": (lambda: _keeps(lambda: _Slotted(random.Random())), "Keeps.kept_.source"),
    "functools.partial": (
        lambda: _keeps(lambda: functools.partial(_uniforms, rng=np.random.default_rng())),
        "Keeps.kept_.keywords['rng']",
    ),
    "closure": (
        lambda: _keeps(lambda: _closure_over(np.random.default_rng())),
        "Keeps.kept_.<closure rng>",
    ),
    "bound method of a generator": (
        lambda: _keeps(lambda: np.random.default_rng().random),
        "Keeps.kept_.__self__",
    ),
    "module-level generator read by a stored function": (
        lambda: _keeps(lambda: _draw_from_module_rng),
        "Keeps.kept_.__globals__['_MODULE_RNG']",
    ),
    "saved bit generator state": (
        lambda: _keeps(lambda: np.random.default_rng().bit_generator.state),
        "Keeps.kept_",
    ),
    "class-level generator": (
        lambda: _ClassLevelGenerator(1.0, classes=CLASSES).fit(CLASSES),
        "_ClassLevelGenerator<class _ClassLevelGenerator>.shared_source",
    ),
    "nested estimator": (
        lambda: make_pipeline(
            StandardScaler(), SGDRegressor(random_state=np.random.RandomState(0))
        ),
        "Pipeline.steps[1][1].random_state",
    ),
    "parameter only get_params sees": (
        lambda: _SeedAsParam(7),
        "_SeedAsParam.get_params()['random_state']",
    ),
    "scorer closure in a model selection object": (
        lambda: GridSearchCV(
            Ridge(),
            {"alpha": [1.0]},
            scoring=make_scorer(_closure_over(np.random.default_rng())),
        ),
        "GridSearchCV.scoring._score_func.<closure rng>",
    ),
}


@pytest.mark.parametrize("case", MUTANTS_WITH_STATE, ids=str)
def test_random_state_walker_flags_every_hiding_place(case):
    make, expected_path = MUTANTS_WITH_STATE[case]
    obj = make()
    assert expected_path in find_random_state(obj)
    with pytest.raises(AssertionError):
        assert_no_random_state(obj)


@pytest.mark.parametrize(
    "make",
    [
        lambda: RandomizedResponse(1.0, classes=CLASSES),  # unfitted: no noise yet
        lambda: _fresh_rr(),
        lambda: LinearRegression().fit(DATA_RNG.normal(size=(50, 3)), DATA_RNG.normal(size=50)),
        lambda: make_pipeline(StandardScaler(), SGDRegressor(random_state=3)),
        lambda: GridSearchCV(Ridge(), {"alpha": [1.0]}, scoring=make_scorer(mean_squared_error)),
    ],
    ids=[
        "unfitted-rr", "fresh-noise-rr", "linear-regression", "int-seeded-pipeline", "grid-search"
    ],
)
def test_random_state_audit_passes_objects_without_random_state(make):
    obj = make()
    assert find_random_state(obj) == []
    assert pickle_random_state_refs(obj) == []
    assert_no_random_state(obj)


@pytest.mark.parametrize("protocol", [0, 2, 4, pickle.HIGHEST_PROTOCOL])
def test_pickle_scan_finds_generators_under_every_protocol(protocol):
    # GLOBAL opcodes (protocols 0-3) and STACK_GLOBAL with memoized strings (4+).
    mech = StoredGeneratorRR(1.0, classes=CLASSES).fit(CLASSES)
    refs = pickle_random_state_refs(mech, protocol=protocol)
    assert "numpy.random._pickle.__generator_ctor" in refs
    assert "numpy.random._pickle.__bit_generator_ctor" in refs
    assert "random.Random" in pickle_random_state_refs([random.Random(), 1], protocol=protocol)


def test_pickle_scan_catches_state_behind_a_custom_reduce():
    obj = _HiddenBehindReduce()
    assert find_random_state(obj) == []  # only an int is visible
    assert "numpy.random._pickle.__generator_ctor" in pickle_random_state_refs(obj)
    with pytest.raises(AssertionError, match="unpickled copy: _HiddenBehindReduce.source"):
        assert_no_random_state(obj)


def test_random_state_audit_fails_on_an_object_it_cannot_pickle():
    with pytest.raises(AssertionError, match="cannot be pickled"):
        assert_no_random_state(_keeps(lambda: (lambda n: n)))


# -- audit_copies_independent ------------------------------------------------------
def _copies_labels():
    return DATA_RNG.choice(np.asarray(CLASSES), size=2_000)


def test_copies_audit_passes_fresh_noise():
    # Independent RR at k = 4, eps = 1 agrees on a fraction sum_j p_j^2 = 0.318
    # of rows; Bernstein's bound at 2000 rows allows +-0.066 per pair.
    agreement = audit_copies_independent(_fresh_rr(), _copies_labels(), alpha=ALPHA)
    assert agreement["expected"] == pytest.approx(0.3175, abs=1e-3)


def test_copies_audit_flags_copies_replaying_a_stored_generator():
    mech = StoredGeneratorRR(1.0, classes=CLASSES).fit(CLASSES)
    with pytest.raises(AssertionError) as info:
        audit_copies_independent(mech, _copies_labels(), alpha=ALPHA)
    message = str(info.value)
    assert "first release vs deepcopy: outputs agree on 2000/2000" in message
    assert "first release vs pickled copy: outputs agree on 2000/2000" in message
    assert "first release vs second release" not in message  # the stream does advance


def _laplace_labels():
    return np.repeat([1.0, 4.5, 8.0], 1_002)  # 334 triples per label


def test_copies_audit_without_a_matrix_passes_fresh_noise():
    # Unclipped Laplace on a fine grid: independent outputs almost never agree.
    mech = FreshLaplace(1.0, bounds=(0.0, 10.0), clip=False).fit([0.0])
    agreement = audit_copies_independent(mech, _laplace_labels(), alpha=ALPHA)
    assert agreement["expected"] < 0.01


def test_copies_audit_without_a_matrix_flags_a_hidden_seed():
    # 1002 triples: Hoeffding allows a difference of 0.19 in agreement rate; a replay shows 1.
    mech = HiddenSeedLaplace(1.0, bounds=(0.0, 10.0), clip=False).fit([0.0])
    with pytest.raises(AssertionError) as info:
        audit_copies_independent(mech, _laplace_labels(), alpha=ALPHA)
    assert "deepcopy vs pickled copy: outputs agree on 1002/1002" in str(info.value)


def test_copies_audit_flags_a_hidden_seed_the_walker_cannot_see():
    mech = HiddenSeedRR(1.0, classes=CLASSES).fit(CLASSES)
    assert find_random_state(mech) == []  # an int is not a generator...
    with pytest.raises(AssertionError) as info:
        audit_copies_independent(mech, _copies_labels(), alpha=ALPHA)  # ...but it replays
    assert "first release vs second release: outputs agree on 2000/2000" in str(info.value)


# -- audit_prior_is_noisy ----------------------------------------------------------
class _PriorFromLabels(RROnBins):
    """RR-on-Bins whose prior is replaced by ``self._replace_prior(exact_counts)``."""

    def _fit_mechanism(self, y):
        self._labels_seen = y
        try:
            super()._fit_mechanism(y)
        finally:
            del self._labels_seen

    def _build_mechanism(self, prior_values, prior_probabilities, epsilon):
        codes = nearest_domain_index(prior_values, self._labels_seen.ravel())
        counts = np.bincount(codes, minlength=prior_values.size).astype(np.float64)
        prior = self._replace_prior(counts)
        self.prior_ = prior / prior.sum()
        super()._build_mechanism(prior_values, self.prior_, epsilon)


class ExactPriorRROnBins(_PriorFromLabels):
    """Mutant: the 'noisy' prior is the exact label histogram."""

    def _replace_prior(self, counts):
        return counts


class ReplayedNoisePriorRROnBins(_PriorFromLabels):
    """Mutant: the prior's noise comes from a fixed seed, the same at every fit."""

    def _replace_prior(self, counts):
        noise = np.random.default_rng(0).integers(-4, 5, size=counts.size)
        return np.maximum(counts + noise, 0.0)


class TinyNoisePriorRROnBins(_PriorFromLabels):
    """Mutant: fresh noise, but far below one label."""

    def _replace_prior(self, counts):
        return counts + np.random.default_rng().normal(scale=1e-3, size=counts.size)


def _prior_labels():
    # 10 domain values, each with 40 to 80 labels.
    return np.repeat(np.arange(10.0), DATA_RNG.integers(40, 81, size=10))


def _make_prior_mechanism(cls):
    # eps1 = 0.5: the discrete-Laplace histogram is exact with probability
    # tanh(1/8)**10 < 1e-9 per fit, and two fits coincide with probability
    # (sum_z p(z)^2)**10 < 1e-11.
    return lambda: cls(2.0, bounds=(0, 9), resolution=1, prior_epsilon=0.5)  # the 10 integers


def test_prior_audit_passes_the_noisy_histogram():
    priors = audit_prior_is_noisy(_make_prior_mechanism(RROnBins), _prior_labels())
    assert priors.shape == (4, 10)


@pytest.mark.parametrize(
    "mutant,expected",
    [
        (ExactPriorRROnBins, ["varies by at most 0 labels", "fit 0: prior_ is within"]),
        (ReplayedNoisePriorRROnBins, ["varies by at most 0 labels"]),
        (TinyNoisePriorRROnBins, ["varies by at most", "fit 3: prior_ is within"]),
    ],
    ids=["exact-histogram", "replayed-noise", "tiny-noise"],
)
def test_prior_audit_flags_priors_built_from_raw_labels(mutant, expected):
    with pytest.raises(AssertionError) as info:
        audit_prior_is_noisy(_make_prior_mechanism(mutant), _prior_labels())
    for fragment in expected:
        assert fragment in str(info.value)


def test_prior_audit_refuses_a_public_prior():
    public = lambda: RROnBins(2.0, prior=(np.arange(3.0), [0.2, 0.3, 0.5]))  # noqa: E731
    with pytest.raises(ValueError, match="public prior"):
        audit_prior_is_noisy(public, [0.0, 1.0, 2.0])


# -- audit_messages_have_no_labels -------------------------------------------------
PRIVATE = np.array([3.25, 12.75, 6.5])  # 12.75 lies outside the bounds (0, 10)


def _leaks(leak):
    """ExponentialMechanism whose range check leaks through ``leak(bad_labels)``."""

    class Leaky(ExponentialMechanism):
        def _label_range(self):
            return None  # the mutant replaces the library's range check by its own

        def _check_label_values(self, y):
            bad = y[(y < 0) | (y > 10)]
            if bad.size:
                leak(bad)

    return Leaky(1.0, bounds=(0, 10), resolution=0.5)


def _raise(message, cause=None):
    raise ValueError(message) from cause


LEAKS = {
    "array in the message": lambda bad: _raise(f"labels {bad} are outside the bounds"),
    "formatted with :g": lambda bad: _raise(f"label {bad[0]:g} is outside the bounds"),
    "repr of a numpy scalar": lambda bad: _raise(f"got {bad[0]!r}"),
    "in the chained cause": lambda bad: _raise(
        "labels outside the bounds", KeyError(float(bad[0]))
    ),
    "in a warning": lambda bad: (
        warnings.warn(f"clipping {bad.tolist()}", UserWarning),
        _raise("labels outside the bounds"),
    ),
    "in a log record": lambda bad: (
        logging.getLogger("skdp_label.test").debug("bad labels: %s", bad.tolist()),
        _raise("labels outside the bounds"),
    ),
}


def test_message_audit_passes_a_message_naming_only_public_bounds():
    mech = ExponentialMechanism(1.0, bounds=(0, 10), resolution=0.5)
    error = audit_messages_have_no_labels(lambda: mech.fit(PRIVATE), PRIVATE)
    assert isinstance(error, ValueError) and "[0, 10]" in str(error)


@pytest.mark.parametrize("case", LEAKS, ids=str)
def test_message_audit_flags_a_quoted_label(case):
    mech = _leaks(LEAKS[case])
    with pytest.raises(AssertionError, match="quotes a private label as '12.75'"):
        audit_messages_have_no_labels(lambda: mech.fit(PRIVATE), PRIVATE)


def test_message_audit_matches_whole_values_only():
    # 3.25 inside 13.25 and 'ant' inside 'want' are not the labels.
    def fail():
        raise ValueError("13.25 units wanted")

    audit_messages_have_no_labels(fail, [3.25, "ant"])
    with pytest.raises(AssertionError, match="as '3.25'"):
        audit_messages_have_no_labels(lambda: _raise("value 3.25."), [3.25])


def test_message_audit_separates_public_classes_from_quoted_labels():
    # Naming the declared classes is fine; quoting the offending label is not.
    def fail():
        raise ValueError(f"a label is not among the declared classes {CLASSES}")

    audit_messages_have_no_labels(fail, ["ant", "yak"], public=CLASSES)
    with pytest.raises(AssertionError, match="private label as .*yak"):
        audit_messages_have_no_labels(
            lambda: _raise("unknown label 'yak'"), ["ant", "yak"], public=CLASSES
        )


def test_message_audit_fails_when_nothing_fails():
    with pytest.raises(AssertionError, match="did not raise"):
        audit_messages_have_no_labels(lambda: None, PRIVATE)
