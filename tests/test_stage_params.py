"""ttest and report take their params section as a frozen, checked object (read from params.yaml
once, by the CLI): command-line values win, defaults apply, bad values name the key."""

from __future__ import annotations

import dataclasses

import pytest

from esnfed_core.errors import ConfigError
from esnfed_stages.report import ReportParams, report_params
from esnfed_stages.ttest import TTestParams, ttest_params


def test_ttest_params_command_line_wins_and_is_frozen():
    p = ttest_params({"ttest": {"variant": "paired", "alpha": 0.05}}, alpha=0.01)
    assert p == TTestParams("paired", 0.01)
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.alpha = 0.5  # type: ignore[misc]
    with pytest.raises(ConfigError, match="^ttest.variant"):
        ttest_params({"ttest": {"variant": "greedy", "alpha": 0.05}})


def test_report_params_default_and_bad_share():
    assert report_params({"report": {"activation_pct": "100"}}) == ReportParams("100", "25")
    assert report_params({"report": {"activation_pct": 50, "contexts_pct": "75"}}) == ReportParams("50", "75")
    with pytest.raises(ConfigError, match="report.contexts_pct must be one of"):
        report_params({"report": {"activation_pct": "100", "contexts_pct": "33"}})
