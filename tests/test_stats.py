"""t-tests and marks (esnfed_core.stats) against scipy computed here, and the degenerate rules."""

import math

import numpy as np
import pytest
import scipy.stats

from esnfed_core.stats import (
    ParameterError, TestResult, best_method, compare_pairs, compare_to_best, marks, pair_marks, ttest,
)

A = [0.70, 0.72, 0.71]
B = [0.80, 0.79, 0.81]
# Unequal variances and sizes: Welch and Student differ clearly.
C = [0.70, 0.75, 0.80, 0.65, 0.72]
D = [0.74, 0.745, 0.75]


@pytest.mark.parametrize("variant,equal_var", [("welch", False), ("student", True)])
def test_ttest_matches_scipy(variant, equal_var):
    ref = scipy.stats.ttest_ind(C, D, equal_var=equal_var)
    r = ttest(C, D, variant)
    assert r.t == pytest.approx(float(ref.statistic), rel=1e-12)
    assert r.p == pytest.approx(float(ref.pvalue), rel=1e-12)
    assert r.n_a == 5 and r.n_b == 3
    assert r.mean_a == pytest.approx(np.mean(C)) and r.mean_b == pytest.approx(np.mean(D))


def test_welch_and_student_differ():
    assert ttest(C, D, "welch").p != pytest.approx(ttest(C, D, "student").p, rel=1e-3)


def test_significance_uses_alpha_inclusively():
    p = ttest(A, B).p
    assert p < 0.05
    assert ttest(A, B, alpha=p).significant  # p <= alpha
    assert not ttest(A, B, alpha=p * 0.999).significant


def test_two_sided():
    assert ttest(A, B).p == pytest.approx(ttest(B, A).p)
    assert ttest(A, B).t == pytest.approx(-ttest(B, A).t)


def test_zero_variance_equal_means_is_not_significant():
    r = ttest([0.5, 0.5, 0.5], [0.5, 0.5])
    assert (r.t, r.p, r.significant) == (0.0, 1.0, False)


def test_zero_variance_different_means_is_significant():
    r = ttest([0.6, 0.6], [0.5, 0.5, 0.5], "student")
    assert r.p == 0.0 and r.significant and r.t == math.inf
    assert ttest([0.5, 0.5], [0.6, 0.6]).t == -math.inf


@pytest.mark.filterwarnings("ignore:Precision loss:RuntimeWarning")
def test_zero_variance_in_one_group_is_a_regular_test():
    ref = scipy.stats.ttest_ind([0.5, 0.5, 0.5], A, equal_var=False)
    assert ttest([0.5, 0.5, 0.5], A).p == pytest.approx(float(ref.pvalue))


@pytest.mark.parametrize("a,b", [([0.7], B), (A, [0.8]), ([], B)])
def test_fewer_than_two_scores_gives_no_test(a, b):
    r = ttest(a, b)
    assert r.t is None and r.p is None and not r.significant


@pytest.mark.parametrize("kwargs,name", [({"variant": "fisher"}, "variant"), ({"alpha": 0.0}, "alpha"),
                                         ({"alpha": 1.5}, "alpha")])
def test_bad_options_name_the_parameter(kwargs, name):
    with pytest.raises(ParameterError, match=f"^{name}"):
        ttest(A, B, **kwargs)


def test_nan_scores_rejected():
    with pytest.raises(ParameterError, match="scores a"):
        ttest([0.5, float("nan")], B)


def test_best_method_and_ties_go_to_first():
    assert best_method({"x": A, "y": B}) == "y"
    assert best_method({"x": [0.5, 0.7], "y": [0.6, 0.6]}) == "x"


def test_marks_two_methods_bold_or_both_italic():
    best, tests = compare_to_best({"a": A, "b": B})
    assert best == "b" and marks(best, tests) == {"b": "bold", "a": ""}
    close = [0.705, 0.715, 0.712]
    best, tests = compare_to_best({"a": A, "b": close})
    assert not tests["a"].significant
    assert marks(best, tests) == {"a": "italic", "b": "italic"}


def test_marks_three_methods():
    worst = [0.30, 0.31, 0.29]
    best, tests = compare_to_best({"naive": worst, "replay": B, "joint": [0.80, 0.775, 0.815]})
    # replay vs joint not significant: both italic; naive significantly worse: no mark.
    assert best == "replay"
    assert marks(best, tests) == {"replay": "italic", "joint": "italic", "naive": ""}
    best, tests = compare_to_best({"naive": worst, "replay": A, "joint": B})
    assert marks(best, tests) == {"joint": "bold", "naive": "", "replay": ""}


def test_untestable_comparison_is_italic():
    best, tests = compare_to_best({"a": [0.9], "b": A})
    assert marks(best, tests) == {"a": "italic", "b": "italic"}


# ------------------------------------------------------------------ paired (docs/fidelity.md §5)
P_A = [0.70, 0.74, 0.69, 0.77, 0.72]
P_B = [0.68, 0.735, 0.67, 0.76, 0.705]  # every retrain a little below A: pairing matters


def test_paired_matches_scipy_ttest_rel():
    ref = scipy.stats.ttest_rel(P_A, P_B)
    r = ttest(P_A, P_B, "paired")
    assert r.t == pytest.approx(float(ref.statistic), rel=1e-12)
    assert r.p == pytest.approx(float(ref.pvalue), rel=1e-12)
    # The same scores unpaired: the retrain-to-retrain spread hides the difference.
    assert r.significant and not ttest(P_A, P_B, "welch").significant


def test_paired_needs_equal_sizes_and_decides_constant_differences():
    with pytest.raises(ParameterError, match="pair up"):
        ttest(P_A, P_B[:4], "paired")
    shifted = [v - 0.01 for v in P_A]
    d = np.asarray(P_A) - np.asarray(shifted)
    if np.ptp(d) == 0:  # exact in float64 only for some values: the rule applies then
        r = ttest(P_A, shifted, "paired")
        assert (r.t, r.p, r.significant) == (math.inf, 0.0, True)
    r = ttest(P_A, P_A, "paired")
    assert (r.t, r.p, r.significant) == (0.0, 1.0, False)
    assert ttest([0.5], [0.4], "paired").p is None


def test_pairs_test_only_the_given_pairs_and_mark_from_the_best():
    scores = {"naive": [0.3, 0.32, 0.31], "replay": [0.80, 0.79, 0.81], "joint": [0.70, 0.72, 0.71]}
    tests = compare_pairs(scores, [("replay", "naive"), ("replay", "joint"), ("replay", "absent")])
    assert [(a, b) for a, b, _ in tests] == [("replay", "naive"), ("replay", "joint")]
    ref = scipy.stats.ttest_ind(scores["replay"], scores["joint"], equal_var=False)
    assert tests[1][2].p == pytest.approx(float(ref.pvalue), rel=1e-12)
    assert pair_marks(["naive", "replay", "joint"], tests) == {"replay": "bold", "naive": "", "joint": ""}
    # joint best: only replay was tested against it; naive gets no mark (never compared to joint).
    scores["joint"] = [0.805, 0.80, 0.795]
    tests = compare_pairs(scores, [("replay", "naive"), ("replay", "joint")])
    assert pair_marks(["naive", "replay", "joint"], tests) == {"joint": "italic", "replay": "italic",
                                                              "naive": ""}


def _result(mean_a, mean_b, significant):
    return TestResult(mean_a, mean_b, 3, 3, 1.0, 0.01 if significant else 0.5, significant)


def test_methods_tied_for_the_best_get_the_same_mark_whatever_the_table_order():
    # Two baselines tied at the top, each tested against the proposed method only (never against
    # each other): both are a best, so both are italic in either order; none is bold.
    tests = [("replay", "naive", _result(0.70, 0.80, True)), ("replay", "joint", _result(0.70, 0.80, True))]
    for order in (["naive", "replay", "joint"], ["joint", "replay", "naive"]):
        assert pair_marks(order, tests) == {"naive": "italic", "joint": "italic", "replay": ""}
    # Not significantly worse than one of the tied bests: italic as well.
    tests[1] = ("replay", "joint", _result(0.70, 0.80, False))
    assert pair_marks(["naive", "replay", "joint"], tests) == {"naive": "italic", "joint": "italic",
                                                              "replay": "italic"}
    # Tied and tested against each other: equal means are never significant, both italic.
    tied = [("a", "b", ttest([0.8, 0.81, 0.79], [0.8, 0.81, 0.79]))]
    assert pair_marks(["a", "b"], tied) == pair_marks(["b", "a"], tied) == {"a": "italic", "b": "italic"}


# ---------------------------------------------------------------- test of equal variances
from esnfed_core.stats import variance_test  # noqa: E402

NARROW = [0.780, 0.781, 0.779, 0.782, 0.778]   # std ~0.0014
SPREAD = [0.60, 0.80, 0.70, 0.90, 0.65]        # std ~0.11: 80x wider
SAME_SPREAD = [0.880, 0.881, 0.879, 0.882, 0.878]  # NARROW shifted by 0.1: the same spread


@pytest.mark.parametrize("test,center", [("brown-forsythe", "median"), ("levene", "mean")])
def test_variance_test_matches_scipy_levene(test, center):
    ref = scipy.stats.levene(C, D, center=center)
    r = variance_test(C, D, test)
    assert r.statistic == pytest.approx(float(ref.statistic), rel=1e-12)
    assert r.p == pytest.approx(float(ref.pvalue), rel=1e-12)
    assert (r.n_a, r.n_b) == (5, 3)
    assert r.std_a == pytest.approx(np.std(C)) and r.std_b == pytest.approx(np.std(D))  # population std


@pytest.mark.parametrize("test", ["brown-forsythe", "levene"])
def test_variance_test_known_answers(test):
    """Clearly different spreads are significant whichever group is first; the same spread around
    another mean is not (the test looks at the spread only)."""
    wide = variance_test(NARROW, SPREAD, test)
    assert wide.significant and wide.p < 0.05 and wide.std_a < wide.std_b
    assert variance_test(SPREAD, NARROW, test).p == pytest.approx(wide.p)
    same = variance_test(NARROW, SAME_SPREAD, test)
    assert not same.significant and same.p > 0.5


def test_brown_forsythe_and_levene_differ_on_skewed_scores():
    skewed = [0.70, 0.71, 0.70, 0.72, 0.90]
    assert variance_test(skewed, NARROW, "levene").p != pytest.approx(variance_test(skewed, NARROW).p, rel=1e-3)


def test_variance_test_needs_three_scores_per_group():
    """With two scores both deviations from the centre are equal: no within-group variance, no test."""
    r = variance_test([0.1, 0.3], SPREAD)
    assert (r.statistic, r.p, r.significant) == (None, None, False)
    assert r.std_a == pytest.approx(0.1)


def test_variance_test_constant_deviations_are_decided():
    r = variance_test([0.5, 0.5, 0.5], [0.7, 0.7, 0.7, 0.7])  # no spread in either: equal
    assert (r.statistic, r.p, r.significant) == (0.0, 1.0, False)
    r = variance_test([0.5, 0.5, 0.5], [0.0, 0.0, 1.0, 1.0], "levene")  # deviations 0 against 0.5 exactly
    assert (r.statistic, r.p, r.significant) == (math.inf, 0.0, True)


def test_variance_test_refuses_an_unknown_test():
    with pytest.raises(ParameterError, match="^variance_test: expected one of brown-forsythe, levene, got 'bartlett'"):
        variance_test(C, D, "bartlett")
