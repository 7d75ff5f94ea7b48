"""mechanism='auto' (docs/auto.md), n_eff, clipped predictions and the far-from-best warning."""

import pickle
import warnings

import numpy as np
import pytest
from sklearn.ensemble import HistGradientBoostingRegressor, RandomForestRegressor
from sklearn.linear_model import Ridge
from sklearn.neighbors import KNeighborsRegressor
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVR

from skdp_label import BudgetAccountant, LabelDPRegressor
from skdp_label.estimators import effective_sample_size
from skdp_label.mechanisms import BiasVarianceRandomizer, AutoRegression, OptimalUnbiased, RROnBins
from skdp_label.mechanisms.auto import AUTO_CANDIDATES, bias_and_variance, predicted_risk

from _audit import assert_exactly_private, assert_no_random_state, audit_prior_is_noisy, audit_sampler

pytestmark = pytest.mark.filterwarnings("ignore::skdp_label.PrivacyLeakWarning")

VALUES = np.arange(11.0)
LABELS = np.tile(VALUES, 60)


def _random_prior(seed, k=9):
    rng = np.random.default_rng(seed)
    return np.sort(rng.choice(np.arange(40.0), k, replace=False)), rng.dirichlet(np.ones(k))


# -- the exact risk terms ---------------------------------------------------------------------
def test_bias_and_variance_match_a_direct_sum():
    rng = np.random.default_rng(1)
    y, z = np.arange(5.0), rng.normal(size=7) * 3
    matrix = rng.dirichlet(np.ones(7), size=5)
    bias, var = bias_and_variance(y, z, matrix)
    for i in range(5):
        mean = sum(matrix[i, j] * z[j] for j in range(7))
        assert bias[i] == pytest.approx(mean - y[i])
        assert var[i] == pytest.approx(sum(matrix[i, j] * (z[j] - mean) ** 2 for j in range(7)))


def test_risk_endpoints():
    """The unbiased randomizer has no bias; the constant prior mean has no
    variance and its bias^2 is the prior's variance."""
    values, probs = _random_prior(0)
    unbiased = OptimalUnbiased(1.0, prior=(values, probs)).fit(values[:1])
    b2, var, risk = predicted_risk(values, unbiased.output_values_, unbiased.transition_matrix_, probs, 7)
    assert b2 < 1e-12 * var and risk == pytest.approx(var / 7)
    mean = probs @ values
    b2, var, _ = predicted_risk(values, [mean], np.ones((values.size, 1)), probs, 7)
    assert var == pytest.approx(0, abs=1e-12) and b2 == pytest.approx(probs @ (values - mean) ** 2)


# -- the selection ---------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("epsilon", [0.1, 1.0, 4.0])
@pytest.mark.parametrize("n_eff", [1, 30])
def test_auto_picks_the_least_predicted_risk_of_the_standalone_mechanisms(seed, epsilon, n_eff):
    """Reference: each candidate fitted on its own for the same public prior."""
    values, probs = _random_prior(seed)
    auto = AutoRegression(
        epsilon, n_eff=n_eff, prior=(values, probs), candidates=list(AUTO_CANDIDATES)
    ).fit(values[:1])
    risks = {}
    for name, make in [
        ("rr-on-bins", lambda: RROnBins(epsilon, prior=(values, probs)).fit(values[:1])),
        ("unbiased", lambda: OptimalUnbiased(epsilon, prior=(values, probs)).fit(values[:1])),
        ("bias-variance", lambda: BiasVarianceRandomizer(
            epsilon, prior=(values, probs), bias_weight=n_eff).fit(values[:1])),
    ]:
        mech = make()
        risks[name] = predicted_risk(values, mech.output_values_, mech.transition_matrix_, probs, n_eff)[2]
        assert auto.predicted_risks_[name]["risk"] == pytest.approx(risks[name], rel=1e-6)
        if name == auto.selected_:
            np.testing.assert_allclose(auto.transition_matrix_, mech.transition_matrix_)
            np.testing.assert_allclose(auto.output_values_, mech.output_values_)
    assert risks[auto.selected_] <= min(risks.values()) * (1 + 1e-6)
    # The bias-regularised randomizer with lam = n_eff optimises the rule itself.
    assert risks["bias-variance"] <= min(risks["rr-on-bins"], risks["unbiased"]) * (1 + 1e-6)
    assert_exactly_private(auto.transition_matrix_, epsilon)


def test_more_averaging_moves_the_choice_toward_unbiased():
    prior = (VALUES, np.ones(11))
    two = ["rr-on-bins", "unbiased"]
    chosen = [
        AutoRegression(1.0, n_eff=n, prior=prior, candidates=two).fit([0.0]).selected_
        for n in (1, 10**4)
    ]
    assert chosen == two
    assert AutoRegression(0.05, n_eff=20, prior=prior, candidates=two).fit([0.0]).selected_ == "rr-on-bins"
    # With the bias-regularised family: RR-on-Bins (its lam = 1 end, a tie) for a
    # model that averages nothing, a biased compromise in between.
    everything = {
        n: AutoRegression(1.0, n_eff=n, prior=prior, candidates=list(AUTO_CANDIDATES)).fit([0.0])
        for n in (1, 30)
    }
    # By default 'bias-variance' is opt-in (docs/auto.md: the rule trusts n_eff too far).
    assert "bias-variance" not in AutoRegression(1.0, n_eff=30, prior=prior).fit([0.0]).predicted_risks_
    assert everything[1].selected_ == "rr-on-bins"
    assert everything[30].selected_ == "bias-variance"
    risks = everything[30].predicted_risks_
    assert risks["bias-variance"]["risk"] < min(risks["rr-on-bins"]["risk"], risks["unbiased"]["risk"])


def test_candidates_parameter_and_hook():
    prior = (VALUES, np.ones(11))
    assert AutoRegression(8.0, n_eff=10**4, prior=prior, candidates=["rr-on-bins"]).fit([0.0]).selected_ == "rr-on-bins"
    with pytest.raises(ValueError, match="candidates"):
        AutoRegression(1.0, prior=prior, candidates=["nope"]).fit([0.0])
    assert set(AUTO_CANDIDATES) >= {"rr-on-bins", "unbiased"}


# -- privacy: one prior, charged once, before anything is randomized ---------------------------------
@pytest.mark.parametrize("epsilon", [0.1, 2.0])
def test_the_prior_is_charged_once_and_the_total_is_epsilon(epsilon):
    acc = BudgetAccountant()
    auto = AutoRegression(epsilon, bounds=(0, 10), grid_size=11, accountant=acc)
    auto.fit_transform(LABELS)
    steps = [entry.details["step"] for entry in acc.ledger]
    assert steps == ["noisy label histogram", "randomized labels"]
    assert acc.spent_epsilon == pytest.approx(epsilon)
    assert auto.prior_epsilon_ == pytest.approx(min(np.sqrt(11 / LABELS.size), epsilon / 2))
    # The candidates never charged anything themselves.
    assert auto.selected_mechanism_.accountant is None
    assert getattr(auto.selected_mechanism_, "epsilon_spent_", 0.0) == 0.0
    assert_exactly_private(auto.transition_matrix_, epsilon - auto.prior_epsilon_)


def test_the_prior_is_noisy_and_fresh():
    audit_prior_is_noisy(
        lambda: AutoRegression(4.0, bounds=(0, 9), grid_size=10, prior_epsilon=0.5), np.tile(np.arange(10.0), 100)
    )


@pytest.mark.parametrize(
    "epsilon, name", [(0.2, "rr-on-bins"), (6.0, "unbiased"), (1.0, "bias-variance")]
)
def test_auto_samples_its_transition_matrix(epsilon, name):
    auto = AutoRegression(
        epsilon, n_eff=30, prior=(VALUES, np.ones(11)), candidates=[name]
    ).fit([0.0])
    assert auto.selected_ == name
    audit_sampler(auto, labels=VALUES, n_per_label=4000)


def test_fitted_auto_holds_no_random_state_and_pickles():
    auto = AutoRegression(1.0, bounds=(0, 10), random_state=3).fit(LABELS)
    assert_no_random_state(auto)
    clone = pickle.loads(pickle.dumps(auto))
    assert clone.selected_ == auto.selected_
    assert clone.transform(LABELS[:5]).shape == (5,)


def test_privacy_report_shows_the_choice():
    auto = AutoRegression(1.0, n_eff=20, bounds=(0, 10)).fit(LABELS)
    report = auto.privacy_report()
    assert report.selection["selected"] == auto.selected_
    assert set(report.selection) >= {"n_eff", "rr-on-bins predicted risk / prior variance"}
    assert "selected" in str(report)


# -- n_eff -------------------------------------------------------------------------------------------------
def test_effective_sample_size_rules():
    assert effective_sample_size(KNeighborsRegressor(n_neighbors=7), 500, 3) == 7
    assert effective_sample_size(HistGradientBoostingRegressor(), 500, 3) == 20
    assert effective_sample_size(RandomForestRegressor(min_samples_leaf=0.1), 500, 3) == 50
    assert effective_sample_size(make_pipeline(StandardScaler(), Ridge()), 500, 4) == 100
    assert effective_sample_size(SVR(), 400, 3) == 20  # the sqrt(n) default
    assert effective_sample_size(KNeighborsRegressor(n_neighbors=50), 10, 3) == 10  # at most n


def _data(n=300):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(n, 3))
    return X, np.clip(np.rint(X @ [2.0, 1.0, 0.0] + 5), 0, 10)


def test_regressor_passes_n_eff_and_the_user_can_override_it():
    X, y = _data()
    reg = LabelDPRegressor(KNeighborsRegressor(n_neighbors=9), "auto", 1.0, bounds=(0, 10)).fit(X, y)
    assert reg.mechanism_.n_eff_ == 9 and reg.n_eff_ == 9
    reg.set_params(mechanism_params={"n_eff": 123}).fit(X, y)
    assert reg.mechanism_.n_eff_ == 123
    assert reg.predicted_risks_ is reg.mechanism_.predicted_risks_
    assert reg.privacy_report().selection["selected"] == reg.mechanism_.selected_


# -- predictions inside the public bounds -------------------------------------------------------------
def test_predictions_are_clipped_to_the_bounds_unless_opted_out():
    X, y = _data()
    kw = dict(mechanism="unbiased", epsilon=0.2, bounds=(0, 10), mechanism_params={"grid_size": 11})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clipped = LabelDPRegressor(KNeighborsRegressor(n_neighbors=1), random_state=0, **kw).fit(X, y)
        raw = LabelDPRegressor(KNeighborsRegressor(n_neighbors=1), random_state=0, clip_predictions=False,
                               **kw).fit(X, y)
    p_raw, p_clip = raw.predict(X), clipped.predict(X)
    assert p_raw.min() < 0 and p_raw.max() > 10  # 1-NN reproduces the noisy labels
    np.testing.assert_array_equal(p_clip, np.clip(p_raw, 0, 10))
    assert clipped.prediction_bounds_ == (0.0, 10.0) and raw.prediction_bounds_ is None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from sklearn.metrics import r2_score

        assert clipped.score(X, y) == pytest.approx(r2_score(y, p_clip))
        assert raw.score(X, y) == pytest.approx(r2_score(y, p_raw))


# -- the warning ------------------------------------------------------------------------------------------
def test_default_unbiased_warns_far_from_the_best_with_public_figures():
    X, y = _data()
    reg = LabelDPRegressor(Ridge(), "unbiased", 0.05, bounds=(0, 10), mechanism_params={"grid_size": 11})
    with pytest.warns(UserWarning, match=r"'unbiased' adds noise of variance [\d.e+]+ times the prior's variance") as rec:
        reg.fit(X, y)
    message = str([w.message for w in rec if "adds noise" in str(w.message)][0])
    assert "'rr-on-bins'" in message and "mechanism='auto'" in message
    assert reg.predicted_risks_["unbiased"]["risk"] > 2 * reg.predicted_risks_["rr-on-bins"]["risk"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        LabelDPRegressor(Ridge(), "auto", 0.05, bounds=(0, 10)).fit(X, y)  # never warns
        LabelDPRegressor(Ridge(), "unbiased", 4.0, bounds=(0, 10)).fit(X, y)  # the best here


# -- the noisy histogram's post-processing -----------------------------------------------------------
@pytest.mark.parametrize("seed", range(5))
def test_norm_sub_keeps_the_noisy_total_and_removes_spurious_mass(seed):
    from skdp_label.mechanisms._prior import norm_sub

    rng = np.random.default_rng(seed)
    counts = np.r_[1000.0, np.zeros(30)] + rng.laplace(0, 40, 31)  # one real value, 30 empty
    out = norm_sub(counts)
    assert np.all(out >= 0) and out.sum() == pytest.approx(counts.sum())
    delta = (counts - out)[out > 0]
    assert np.allclose(delta, delta[0]) and delta[0] >= 0  # one common shift
    clipped = np.maximum(counts, 0)
    assert out[1:].sum() < clipped[1:].sum()  # some count was negative: mass removed
    positive = np.abs(counts) + 1.0
    np.testing.assert_array_equal(norm_sub(positive), positive)  # nothing to remove


def test_norm_sub_halves_the_spurious_mass_on_average():
    """Over 200 draws, clipping at 0 puts ~30 % of the mass on 30 empty values
    (half of each one's noise scale); norm-sub less than half of that."""
    from skdp_label.mechanisms._prior import norm_sub

    rng = np.random.default_rng(0)
    counts = np.r_[1000.0, np.zeros(30)] + rng.laplace(0, 40, (200, 31))
    clip = np.mean([np.maximum(c, 0)[1:].sum() / np.maximum(c, 0).sum() for c in counts])
    sub = np.mean([norm_sub(c)[1:].sum() / norm_sub(c).sum() for c in counts])
    assert sub < 0.5 * clip


# -- budget splits per mechanism, visible before spending ---------------------------------------------
def test_unbiased_split_is_small_or_the_uniform_prior_and_matches_the_fit():
    acc = BudgetAccountant()
    mech = OptimalUnbiased(0.3, bounds=(0, 10), resolution=1, accountant=acc)
    assert mech.budget_split(LABELS.size) == (0.0, 0.3)  # 11 values, 660 labels: noise > counts
    mech.fit_transform(LABELS)
    assert mech.prior_epsilon_ == 0.0 and [e.details["step"] for e in acc.ledger] == ["randomized labels"]
    np.testing.assert_allclose(mech.prior_, 1 / 11)
    many = np.tile(VALUES, 2000)
    eps1, eps2 = OptimalUnbiased(2.0, bounds=(0, 10), resolution=1).budget_split(many.size)
    assert eps1 == pytest.approx(min(np.sqrt(11 / many.size), 0.2)) and eps1 + eps2 == 2.0
    fitted = OptimalUnbiased(2.0, bounds=(0, 10), resolution=1).fit(many)
    assert fitted.prior_epsilon_ == pytest.approx(eps1)
    assert RROnBins(2.0, bounds=(0, 10), resolution=1).budget_split(100)[0] == pytest.approx(np.sqrt(11 / 100))


def test_cluster_prior_budget_is_relative_and_shown_before_fit():
    from sklearn.linear_model import LogisticRegression

    from skdp_label import LabelDPClassifier

    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 3))
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0).astype(int)
    for eps in [0.05, 0.3, 4.0]:
        clf = LabelDPClassifier(LogisticRegression(), "rr-with-prior", eps, classes=[0, 1, 2], prior="clusters",
                                n_clusters=4)
        eps_prior, eps_labels = clf.prior_budget(400)
        assert eps_prior == pytest.approx(min(np.sqrt(4 * 3 / 400), eps / 2)) and eps_prior + eps_labels == eps
        clf.fit(X, y)  # eps = 0.05 used to raise with the absolute default 0.1
        assert clf.prior_epsilon_ == pytest.approx(eps_prior)
    assert LabelDPClassifier(LogisticRegression(), classes=[0, 1]).prior_budget(50) == (0.0, 1.0)


def test_cluster_kmeans_ignores_the_scale_of_features():
    from skdp_label.estimators._cluster_prior import feature_clusters

    rng = np.random.default_rng(0)
    # Two groups apart on feature 0; feature 1 is noise in large units (e.g. dollars).
    X = np.c_[np.r_[rng.normal(0, 1, 50), rng.normal(6, 1, 50)], rng.normal(0, 1e4, 100)]
    a, _ = feature_clusters(X, 2)
    assert np.array_equal(a[:50], np.full(50, a[0])) and np.array_equal(a[50:], np.full(50, 1 - a[0]))


def test_cluster_seed_depends_on_the_features_only():
    # Two fits with fresh OS entropy cluster the same features identically: the
    # k-means seed (kept inside the fitted centres) is not drawn from the noise stream.
    from sklearn.linear_model import LogisticRegression

    from skdp_label import LabelDPClassifier

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 3))
    y = (X[:, 0] > 0).astype(int)
    fits = [
        LabelDPClassifier(LogisticRegression(), classes=[0, 1], prior="clusters", n_clusters=6)
        .fit(X, y) for _ in range(2)
    ]
    np.testing.assert_array_equal(fits[0].cluster_centers_.centers, fits[1].cluster_centers_.centers)
