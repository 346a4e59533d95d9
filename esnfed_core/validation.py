"""Boundary checks shared by the core: every error names the parameter and the offending value."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass

import numpy as np

from esnfed_core.errors import EsnfedError
from esnfed_core.quote import quote


class ParameterError(EsnfedError, ValueError):
    """A hyperparameter or input is invalid; the message starts with its name."""


def check_param(
    name: str,
    value,
    *,
    integer: bool = False,
    low: float | None = None,
    high: float | None = None,
    low_open: bool = False,
    high_open: bool = False,
) -> None:
    """Raise ParameterError unless ``value`` is a finite number in the given range."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise ParameterError(f"{name}: expected a number, got {quote(value)}")
    if integer and not isinstance(value, numbers.Integral):
        raise ParameterError(f"{name}: expected an integer, got {quote(value)}")
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an int past float's range: finite, compared exactly below
        finite = True
    if not finite:
        raise ParameterError(f"{name}: must be finite, got {quote(value)}")
    if low is not None and (value <= low if low_open else value < low):
        op = ">" if low_open else ">="
        raise ParameterError(f"{name}: must be {op} {low}, got {quote(value)}")
    if high is not None and (value >= high if high_open else value > high):
        op = "<" if high_open else "<="
        raise ParameterError(f"{name}: must be {op} {high}, got {quote(value)}")


@dataclass(frozen=True)
class Bound:
    """The range of one numeric parameter, defined once beside the core value type it constrains;
    the params schema (esnfed_stages/params/schema.py) checks params.yaml against the same object."""

    integer: bool = False
    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False

    def check(self, name: str, value) -> None:
        """Raise ParameterError("<name>: ...") unless ``value`` is in range."""
        check_param(name, value, integer=self.integer, low=self.low, high=self.high,
                    low_open=self.low_open, high_open=self.high_open)


COUNT = Bound(integer=True, low=1)
POSITIVE = Bound(low=0.0, low_open=True)


def check_finite(name: str, arr: np.ndarray) -> None:
    """Raise ParameterError if ``arr`` holds NaN or infinity."""
    finite = np.isfinite(arr)
    if not finite.all():
        where = np.argwhere(~finite)
        first = tuple(int(i) for i in where[0])
        raise ParameterError(
            f"{name}: contains {len(where)} NaN or infinite value(s), "
            f"first {float(arr[first])} at index {first}"
        )
