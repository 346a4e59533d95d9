"""Significance tests between methods' retrain scores (PROTOCOL §6) and the tables' marks.

Two-sided t-tests (Welch by default, Student as an option) with deterministic answers in the
degenerate cases scipy leaves as NaN, and the bold/italic rule of the papers' tables.

Degenerate cases (scipy.stats.ttest_ind returns NaN for them; we decide instead):
- either group has fewer than 2 scores: no test is possible -> t = p = None, not significant;
- both groups have zero variance (every score equal within its group): equal means -> t = 0,
  p = 1; different means -> t = ±inf, p = 0 (the difference is exact, hence significant).
A group with zero variance against one with positive variance is a regular case for both variants.

Marking rule, per group of compared cells (a table's dataset, share and column):
- the best method is the one with the highest mean (ties: the first in table order);
- **bold**: the best, when it is significantly better (p <= alpha) than every other method;
- *italic*: otherwise, the best and every method not significantly different from it;
- no mark: a method significantly worse than the best (or the others when the best is bold).
With two methods this is the papers' convention: bold winner, or both italic.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from typing import Literal, Mapping, Sequence

import numpy as np

from esnfed_core.validation import Bound, ParameterError, check_finite

Variant = Literal["welch", "student"]
VARIANTS: tuple[str, ...] = ("welch", "student")
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
        raise ParameterError(f"variant: expected one of {', '.join(VARIANTS)}, got {variant!r}")


ALPHA = Bound(low=0.0, high=1.0, low_open=True, high_open=True)  # significance level (ttest.alpha)


def check_alpha(alpha: float) -> None:
    ALPHA.check("alpha", alpha)


def ttest(a: Sequence[float], b: Sequence[float], variant: str = "welch",
          alpha: float = 0.05) -> TestResult:
    """Two-sided t-test of the scores ``a`` against ``b``; significant when p <= alpha."""
    check_variant(variant)
    check_alpha(alpha)
    xa = np.asarray(a, dtype=np.float64).ravel()
    xb = np.asarray(b, dtype=np.float64).ravel()
    check_finite("scores a", xa)
    check_finite("scores b", xb)
    mean_a = float(xa.mean()) if xa.size else math.nan
    mean_b = float(xb.mean()) if xb.size else math.nan
    if xa.size < 2 or xb.size < 2:
        return TestResult(mean_a, mean_b, int(xa.size), int(xb.size), None, None, False)
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


def marks(best: str, tests: Mapping[str, TestResult]) -> dict[str, Mark]:
    """Bold/italic marks of a group from the tests of ``best`` against the others (module rule)."""
    if not tests:  # a single method: nothing was compared, nothing to mark
        return {best: ""}
    if all(r.significant for r in tests.values()):
        return {best: "bold", **{m: "" for m in tests}}
    return {best: "italic", **{m: ("" if r.significant else "italic") for m, r in tests.items()}}
