"""``verbose``: what it prints, that it is silent at 0, that it prints only
public facts (never a label, an exact label statistic or a seed), and that a
bad value is refused before anything is spent."""

import re

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.utils._param_validation import InvalidParameterError

from skdp_label import BudgetAccountant, LabelDPClassifier, LabelDPRegressor
from skdp_label.mechanisms import OPTM, Laplace, OptimalUnbiased
from skdp_label.utils._progress import Progress

from _audit import audit_output_has_no_labels

SEED = 12345  # printed nowhere: audited below

rng = np.random.default_rng(0)
X = rng.normal(size=(240, 3))
# Labels with 6 significant digits: no count, size, epsilon (4 digits) or
# timing (2 decimals) a message prints can spell one by chance.
Y = np.round(np.clip(X @ [1.0, 2.0, 0.5] + 5.0, 0.5, 9.5), 5) + 1.23e-3
# Exact label statistics, as private as the labels.
Y_STATS = [Y.mean(), Y.std(), np.median(Y), Y.sum(), Y.var()]
# Classes with distinctive exact counts (137, 61, 42), shuffled.
CLASSES = ["ant", "bee", "cat"]
Y_CLASS = rng.permutation(np.repeat(CLASSES, [137, 61, 42]))
X_CLASS = rng.normal(size=(240, 4)) + (Y_CLASS == "bee")[:, None]


def _regressor(verbose, mechanism="unbiased", accountant=None):
    return LabelDPRegressor(
        Ridge(), mechanism=mechanism, bounds=(0, 10), verbose=verbose, accountant=accountant,
        # A private prior, so that the histogram step is printed too.
        mechanism_params={"prior_epsilon": 0.2} if mechanism == "unbiased" else None,
    )


def _classifier(verbose, accountant=None):
    return LabelDPClassifier(
        LogisticRegression(), classes=CLASSES, n_stages=3, prior="clusters", n_clusters=4,
        prior_epsilon=0.1, verbose=verbose, accountant=accountant,
    )


# -- what is printed --------------------------------------------------------------
def test_regressor_prints_mechanism_epsilon_per_step_and_solver(capsys):
    _regressor(0).fit(X, Y)
    assert capsys.readouterr() == ("", "")  # silent by default

    _regressor(1).fit(X, Y)
    out = capsys.readouterr().out
    # The estimator's steps, and the slow solver's own report (verbose passed on).
    assert "[LabelDPRegressor] OptimalUnbiased noisy label histogram: epsilon" in out
    assert "[LabelDPRegressor] OptimalUnbiased randomized labels: epsilon" in out
    assert "fitted Ridge on the noisy labels in" in out
    assert "[OptimalUnbiased] solved in" in out and "the continuous solver" in out
    assert "certified within" in out


def test_estimator_verbosity_reaches_a_mechanism_instance_without_changing_it(capsys):
    mech = OptimalUnbiased(bounds=(0, 10), outputs=20)
    LabelDPRegressor(Ridge(), mechanism=mech, verbose=1).fit(X, Y)
    out = capsys.readouterr().out
    assert "[OptimalUnbiased] solved in" in out and "the LP on 20 output points" in out
    assert mech.verbose == 0  # the instance is cloned, not modified


def test_epsilon_per_step_adds_up_to_what_was_charged(capsys):
    acc = BudgetAccountant(epsilon=5.0)
    _regressor(1, accountant=acc).fit(X, Y)
    out = capsys.readouterr().out
    printed = [float(v) for v in re.findall(r"\[LabelDPRegressor\] .*: epsilon ([\d.e-]+) on", out)]
    assert len(printed) == 2 and sum(printed) == pytest.approx(acc.spent_epsilon, rel=1e-3)


def test_classifier_prints_stages_and_a_progress_bar(capsys):
    _classifier(0).fit(X_CLASS, Y_CLASS)
    assert capsys.readouterr() == ("", "")

    _classifier(1).fit(X_CLASS, Y_CLASS)
    captured = capsys.readouterr()
    assert "3 stage(s) of [80, 80, 80] examples, RRWithPrior at epsilon 0.9" in captured.out
    assert "cluster prior: noisy class histograms of 4 clusters, epsilon 0.1" in captured.out
    for stage in (1, 2, 3):
        assert f"stage {stage}/3: epsilon 0.9 on 80 labels" in captured.out
    pytest.importorskip("tqdm")
    assert "LabelDPClassifier" in captured.err and "3/3" in captured.err  # the bar over stages


def test_optm_reports_bin_placement_and_lp(capsys):
    OPTM(1.0, bounds=(0, 10), bins=3).fit([1.0])
    assert capsys.readouterr() == ("", "")
    OPTM(1.0, bounds=(0, 10), bins=3, verbose=1).fit([1.0])
    out = capsys.readouterr().out
    # Placed once (here or by the silent fit above): the cache is named either way.
    assert "[OPTM] placed 3 bins for epsilon 1 in" in out and "from the cache" in out
    assert "[OPTM] solved the LP on 3 bins in" in out and "repair weight" in out


def test_progress_prints_only_at_its_level(capsys):
    progress = Progress(1, "Owner")
    progress("shown")
    progress("hidden", level=2)
    with progress.timed("step") as facts:
        facts["grid points"] = 11
    out = capsys.readouterr().out
    assert out.startswith("[Owner] shown\n[Owner] step in ") and out.endswith(", grid points 11\n")
    assert "hidden" not in out
    assert list(Progress(0, "Owner").stages([1, 2], total=2, desc="x")) == [1, 2]
    assert capsys.readouterr() == ("", "")


# -- adversarial: the output quotes no label, statistic or seed -------------------
@pytest.mark.parametrize(
    "make",
    [
        lambda: _regressor(2),
        lambda: _regressor(2, mechanism=OPTM(bounds=(0, 10), bins=3)),
        lambda: _regressor(2, mechanism=Laplace(bounds=(0, 10))),
        lambda: LabelDPRegressor(Ridge(), bounds=(0, 10), verbose=2, random_state=SEED),
    ],
    ids=["unbiased", "optm", "laplace", "seeded"],
)
def test_regressor_output_quotes_no_label_statistic_or_seed(make):
    output = audit_output_has_no_labels(
        lambda: make().fit(X, Y), [*Y, *Y_STATS, SEED], public=[0, 10]
    )
    assert "epsilon" in output  # something was printed, and audited


def test_classifier_output_quotes_no_class_count():
    counts = [137, 61, 42]
    # Seeded: the examples reused by a stage (80 + those whose noisy label the
    # model puts in its top k) are a noisy count in [80, 160] that, unseeded,
    # equalled the class count 137 by chance in some runs.
    output = audit_output_has_no_labels(
        lambda: _classifier(2).set_params(random_state=3).fit(X_CLASS, Y_CLASS), counts,
        public=CLASSES,
    )
    assert "stage 3/3" in output


def test_output_audit_catches_a_printed_label_and_statistic():
    # Mutants: the auditor must be able to fail, on stdout, stderr and logs.
    import logging
    import sys

    with pytest.raises(AssertionError, match="stdout quotes a private label as '3.4567'"):
        audit_output_has_no_labels(lambda: print("label 3.4567 rounded"), [3.4567])
    with pytest.raises(AssertionError, match="stderr quotes"):
        audit_output_has_no_labels(lambda: print(f"mean {np.mean(Y):g}", file=sys.stderr), Y_STATS)
    with pytest.raises(AssertionError, match="log record"):
        audit_output_has_no_labels(lambda: logging.getLogger("x").info("n=%d", 137), [137])
    audit_output_has_no_labels(lambda: print("epsilon 0.5 on 240 labels"), [3.4567, 137])


# -- bad values are refused before anything is spent ------------------------------
@pytest.mark.parametrize("verbose", [-1, 1.5, "yes"])
@pytest.mark.parametrize(
    "make",
    [
        lambda v, acc: _regressor(v, accountant=acc),
        lambda v, acc: _classifier(v, accountant=acc),
        lambda v, acc: OptimalUnbiased(bounds=(0, 10), verbose=v, accountant=acc),
        lambda v, acc: OPTM(bounds=(0, 10), verbose=v, accountant=acc),
    ],
    ids=["regressor", "classifier", "unbiased", "optm"],
)
def test_invalid_verbose_is_refused_before_spending(make, verbose, capsys):
    acc = BudgetAccountant(epsilon=5.0)
    est = make(verbose, acc)
    with pytest.raises(InvalidParameterError, match="verbose"):
        if isinstance(est, (LabelDPRegressor, LabelDPClassifier)):
            est.fit(X_CLASS if isinstance(est, LabelDPClassifier) else X,
                    Y_CLASS if isinstance(est, LabelDPClassifier) else Y)
        else:
            est.fit(Y)
    assert acc.spent_epsilon == 0 and len(acc.to_records()) == 0
    assert capsys.readouterr().out == ""


def test_verbose_may_change_after_fit(capsys):
    mech = OptimalUnbiased(bounds=(0, 10), prior=(np.arange(11.0), np.full(11, 1 / 11)))
    mech.fit(Y)
    mech.set_params(verbose=1).transform(Y)  # how much it prints is not bound to the fit
    assert capsys.readouterr().out == ""  # transform runs no solver


def test_verbose_is_not_part_of_a_keyed_release(tmp_path):
    # A rerun of the same release with verbose on is the same release (free),
    # and the manifest does not carry it.
    from skdp_label.release import generate_key_file, load_key, privatize

    generate_key_file(tmp_path / "label.key")
    key = load_key(tmp_path / "label.key")
    acc = BudgetAccountant(epsilon=5.0)
    prior = (np.arange(11.0), np.full(11, 1 / 11))
    first, release = privatize(Y, OptimalUnbiased(bounds=(0, 10), prior=prior), key, "r1",
                               accountant=acc)
    again, _ = privatize(Y, OptimalUnbiased(bounds=(0, 10), prior=prior, verbose=1), key, "r1",
                         accountant=acc)
    np.testing.assert_array_equal(first, again)
    assert acc.spent_epsilon == pytest.approx(1.0) and len(acc.to_records()) == 1
    assert "verbose" not in str(release.manifest())
