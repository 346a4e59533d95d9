"""Names of the statistical tests the ttest stage offers, free of heavy imports so that the
command line can build its options from them (esnfed_core.stats computes them)."""

from __future__ import annotations

from esnfed_core.vocabulary import Name


class VarianceTest(Name):
    """Two-sample test of equal variances (scipy.stats.levene): Brown–Forsythe centres each group
    on its median (scipy's default, robust to skewed scores), Levene on its mean. Named here, not
    in esnfed_core.vocabulary: that module is part of every trial's code fingerprint
    (esnfed_stages/experiment/fingerprint.py), and a name no trial uses must not invalidate every saved trial."""

    brown_forsythe = "brown-forsythe"
    levene = "levene"
