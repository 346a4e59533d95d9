"""Report figures rendered as title-only PNGs, for tests whose subject is not the figures."""

from __future__ import annotations

import pytest


def title_only_figures(mp: pytest.MonkeyPatch) -> None:
    """Every report figure rendered as a 1-inch PNG that carries only the figure's title.

    Drawing the report's 20 figures is ~90% of an `esnfed report` run on the tests' inputs (~17
    of 19 s on a busy 2-core machine), most of it the density grids' 100 shared-axes panels.
    Tests whose subject is the tables, the plots' CSVs, the index or a refusal call it (through
    the conftest fixture `title_only_figures`, or under a module fixture's MonkeyPatch): the
    density grids are not built, the other figures are built but not drawn. The figures
    themselves (names, titles, panels, byte-identical reruns) are checked on real renders in
    tests/test_report.py (`built` and the determinism test) and tests/test_report_figures.py.
    """
    from esnfed_stages.report import figures

    real = figures._png

    def title_png(title: str | None) -> bytes:
        small = figures._figure(figsize=(1, 1))
        if title:
            small.suptitle(title)
        return real(small)

    mp.setattr(figures, "_png", lambda fig: title_png(fig.get_suptitle()))
    mp.setattr(figures, "density_grid", lambda title, *args, **kwargs: title_png(title))
