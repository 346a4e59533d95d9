"""Significance tests between methods' retrain scores (PROTOCOL §6) and the tables' marks.

Two-sided t-tests (Welch by default, Student or paired as options) and a test of equal variances
(Brown–Forsythe by default, or Levene: :func:`variance_test`), with deterministic answers in the
degenerate cases scipy leaves as NaN, and the bold/italic rule of the papers' tables.

Variants: ``welch`` (scipy.stats.ttest_ind, unequal variances), ``student`` (ttest_ind, pooled
variance), ``paired`` (scipy.stats.ttest_rel: score k of ``a`` against score k of ``b``; retrain k
of every method shares its reservoir seed, so the scores pair up by retrain). The papers say
"two-sided T-Test" and name no variant: Welch stays the default.

Degenerate cases (scipy returns NaN for them; we decide instead):
- either group has fewer than 2 scores: no test is possible -> t = p = None, not significant;
- both groups have zero variance (paired: the differences have zero variance): equal means ->
  t = 0, p = 1; different means -> t = ±inf, p = 0 (the difference is exact, hence significant).
A group with zero variance against one with positive variance is a regular case for Welch/Student.

Marking rule, per group of compared cells (a table's dataset, share and column):
- the best method is the one with the highest mean;
- **bold**: the best, when it is significantly better (p <= alpha) than every other method;
- *italic*: otherwise, the best and every method not significantly different from it;
- no mark: a method significantly worse than the best (or the others when the best is bold).
With two methods this is the papers' convention: bold winner, or both italic. Equal means get
equal marks: when several methods share the highest mean, each of them is a best, none is bold
(none is better than the others), all are italic, and so is every method not significantly
different from one of them.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Literal, Mapping, Sequence

import numpy as np

from esnfed_core.quote import quote
from esnfed_core.stats_names import VarianceTest
from esnfed_core.validation import Bound, ParameterError, check_finite
from esnfed_core.vocabulary import VARIANTS

Variant = Literal["welch", "student", "paired"]
Mark = Literal["bold", "italic", ""]


@dataclass(frozen=True)
class TestResult:
    """One two-sided test of ``a`` against ``b``; ``t``/``p`` are None when no test is possible."""

    __test__ = False  # not a pytest class despite the name

    mean_a: float
    mean_b: float
    n_a: int
    n_b: int
    t: float | None
    p: float | None
    significant: bool


def check_variant(variant: str) -> None:
    if variant not in VARIANTS:
        raise ParameterError(f"variant: expected one of {', '.join(VARIANTS)}, got {quote(variant)}")


ALPHA = Bound(low=0.0, high=1.0, low_open=True, high_open=True)  # significance level (ttest.alpha)


def check_alpha(alpha: float) -> None:
    ALPHA.check("alpha", alpha)


def _groups(a: Sequence[float], b: Sequence[float], alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """The two groups of scores as float64 vectors, checked finite (and ``alpha`` in (0, 1))."""
    check_alpha(alpha)
    xa = np.asarray(a, dtype=np.float64).ravel()
    xb = np.asarray(b, dtype=np.float64).ravel()
    check_finite("scores a", xa)
    check_finite("scores b", xb)
    return xa, xb


def ttest(a: Sequence[float], b: Sequence[float], variant: str = "welch",
          alpha: float = 0.05) -> TestResult:
    """Two-sided t-test of the scores ``a`` against ``b``; significant when p <= alpha."""
    check_variant(variant)
    xa, xb = _groups(a, b, alpha)
    if variant == "paired" and xa.size != xb.size:
        raise ParameterError(f"paired t-test: the groups must pair up score by score, got {xa.size} "
                             f"and {xb.size} scores")
    mean_a = float(xa.mean()) if xa.size else math.nan
    mean_b = float(xb.mean()) if xb.size else math.nan
    if xa.size < 2 or xb.size < 2:
        return TestResult(mean_a, mean_b, int(xa.size), int(xb.size), None, None, False)
    if variant == "paired":
        t, p = _paired(xa, xb)
        return TestResult(mean_a, mean_b, int(xa.size), int(xb.size), t, p, p <= alpha)
    if np.ptp(xa) == 0 and np.ptp(xb) == 0:
        if mean_a == mean_b:
            t, p = 0.0, 1.0
        else:
            t, p = math.copysign(math.inf, mean_a - mean_b), 0.0
    else:
        with warnings.catch_warnings():
            # Raised when one group is constant; the statistic is still exact enough here.
            warnings.filterwarnings("ignore", "Precision loss", RuntimeWarning)
            import scipy.stats  # lazy: every stage imports this module, few run a test

            res = scipy.stats.ttest_ind(xa, xb, equal_var=(variant == "student"))
        t, p = float(res.statistic), float(res.pvalue)
    return TestResult(mean_a, mean_b, int(xa.size), int(xb.size), t, p, p <= alpha)


def _paired(xa: np.ndarray, xb: np.ndarray) -> tuple[float, float]:
    """(t, p) of scipy.stats.ttest_rel, decided when the differences have zero variance."""
    d = xa - xb
    if np.ptp(d) == 0:
        mean = float(d[0])
        return (0.0, 1.0) if mean == 0 else (math.copysign(math.inf, mean), 0.0)
    import scipy.stats  # lazy, as in ttest

    res = scipy.stats.ttest_rel(xa, xb)
    return float(res.statistic), float(res.pvalue)


@dataclass(frozen=True)
class VarianceResult:
    """One two-sided test of equal variances of ``a`` and ``b``; ``std_a``/``std_b`` are the
    population standard deviations (ddof = 0, as the tables' cells); ``statistic``/``p`` are None
    when no test is possible."""

    std_a: float
    std_b: float
    n_a: int
    n_b: int
    statistic: float | None
    p: float | None
    significant: bool


VARIANCE_TESTS = VarianceTest.values()
# The centre each group's absolute deviations are taken from (scipy.stats.levene's ``center``).
VARIANCE_CENTERS = {"brown-forsythe": "median", "levene": "mean"}
MIN_VARIANCE_SCORES = 3  # with 2 scores, both deviations from the centre are equal: nothing to test


def check_variance_test(test: str) -> None:
    if test not in VARIANCE_TESTS:
        raise ParameterError(f"variance_test: expected one of {', '.join(VARIANCE_TESTS)}, got {quote(test)}")


def variance_test(a: Sequence[float], b: Sequence[float], test: str = "brown-forsythe",
                  alpha: float = 0.05) -> VarianceResult:
    """Two-sided test that ``a`` and ``b`` have equal variances: scipy.stats.levene with
    center="median" (Brown–Forsythe) or "mean" (Levene), i.e. a one-way ANOVA of each score's
    absolute deviation from its group's centre; significant when p <= alpha.

    Degenerate cases, decided as :func:`ttest` decides its own: a group with fewer than
    :data:`MIN_VARIANCE_SCORES` scores -> no test (statistic = p = None; with two scores both
    deviations are equal, so the ANOVA has no within-group variance whatever the scores); the
    deviations constant within both groups (scipy: NaN or a division by zero) -> equal deviations:
    statistic 0, p = 1; different: statistic inf, p = 0 (the spreads differ exactly).
    """
    check_variance_test(test)
    xa, xb = _groups(a, b, alpha)
    std_a = float(xa.std()) if xa.size else math.nan
    std_b = float(xb.std()) if xb.size else math.nan
    if xa.size < MIN_VARIANCE_SCORES or xb.size < MIN_VARIANCE_SCORES:
        return VarianceResult(std_a, std_b, int(xa.size), int(xb.size), None, None, False)
    center = VARIANCE_CENTERS[test]
    centre = np.median if center == "median" else np.mean
    za, zb = np.abs(xa - centre(xa)), np.abs(xb - centre(xb))
    if np.ptp(za) == 0 and np.ptp(zb) == 0:
        stat, p = (0.0, 1.0) if za[0] == zb[0] else (math.inf, 0.0)
    else:
        import scipy.stats  # lazy, as in ttest

        res = scipy.stats.levene(xa, xb, center=center)
        stat, p = float(res.statistic), float(res.pvalue)
    return VarianceResult(std_a, std_b, int(xa.size), int(xb.size), stat, p, p <= alpha)


def best_method(scores: Mapping[str, Sequence[float]]) -> str:
    """The method with the highest mean score; ties go to the first in mapping order."""
    if not scores:
        raise ParameterError("scores: no method to compare")
    best, best_mean = None, -math.inf
    for method, values in scores.items():
        m = float(np.mean(values)) if len(values) else -math.inf
        if best is None or m > best_mean:
            best, best_mean = method, m
    return best  # type: ignore[return-value]


def compare_to_best(scores: Mapping[str, Sequence[float]], variant: str = "welch",
                    alpha: float = 0.05) -> tuple[str, dict[str, TestResult]]:
    """Test the best method against each other one: (best, {other: test of best vs other})."""
    best = best_method(scores)
    return best, {m: ttest(scores[best], v, variant, alpha) for m, v in scores.items() if m != best}


def compare_pairs(scores: Mapping[str, Sequence[float]], pairs: Sequence[tuple[str, str]],
                  variant: str = "welch", alpha: float = 0.05) -> list[tuple[str, str, TestResult]]:
    """Test each (a, b) of ``pairs`` whose two methods both have scores: [(a, b, test of a vs b)]."""
    return [(a, b, ttest(scores[a], scores[b], variant, alpha)) for a, b in pairs
            if a in scores and b in scores]


def pair_marks(methods: Sequence[str], tests: Sequence[tuple[str, str, TestResult]]
               ) -> dict[str, Mark]:
    """Marks of a group where only ``tests`` (pairs) were run; ``methods`` in table order.

    The best is the highest mean among the tested methods; the module rule applies to the tests
    that involve the best. A method never tested against the best gets no mark (the table makes
    no claim about it). Methods tied for the highest mean are all bests, marked alike (module
    rule), whatever their order in ``methods``.
    """
    means: dict[str, float] = {}
    for a, b, r in tests:
        means.setdefault(a, r.mean_a)
        means.setdefault(b, r.mean_b)
    if not means:
        return {}
    order = [m for m in methods if m in means] + [m for m in means if m not in methods]
    top = max(means.values())
    bests = [m for m in order if means[m] == top]
    out: dict[str, Mark] = {m: "" for m in order}
    if len(bests) > 1:  # a tie at the top: each is a best, none better than the others
        for a, b, r in tests:
            for best, other in ((a, b), (b, a)):
                if best in bests and not r.significant:
                    out[other] = "italic"
        out.update({m: "italic" for m in bests})
        return out
    best = bests[0]
    with_best = {}
    for a, b, r in tests:
        if best in (a, b):
            with_best[b if a == best else a] = r
    out.update(marks(best, with_best))
    return out


def marks(best: str, tests: Mapping[str, TestResult]) -> dict[str, Mark]:
    """Bold/italic marks of a group from the tests of ``best`` against the others (module rule)."""
    if not tests:  # a single method: nothing was compared, nothing to mark
        return {best: ""}
    if all(r.significant for r in tests.values()):
        return {best: "bold", **{m: "" for m in tests}}
    return {best: "italic", **{m: ("" if r.significant else "italic") for m, r in tests.items()}}
