"""The words of `esnfed import`'s options that the command line offers as choices: the time
column's units and what to do with a missing feature value. Free of heavy imports, so that the
command line can build its option types without importing the readers."""

from __future__ import annotations

# Seconds per unit of the time column.
TIME_UNITS = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "ns": 1e-9}
# What a missing (empty, NaN) feature value does (``imports.<name>.missing``): refused while
# reading (the default), its value interpolated (tabular.fill_missing), or its row dropped.
MISSING = ("refuse", "interpolate", "drop")
