"""docs/api.md's example runs as written: its python code blocks, executed in order in one
namespace, with the asserts they hold (IncFed equals centralised ridge, FedIP, save and load)."""

from __future__ import annotations

import re
from pathlib import Path

import esnfed_core

PAGE = Path(__file__).resolve().parents[1] / "docs" / "api.md"


def _blocks() -> list[str]:
    return re.findall(r"^```python\n(.*?)^```$", PAGE.read_text(encoding="utf-8"), re.MULTILINE | re.DOTALL)


def test_the_api_page_example_runs_and_its_asserts_hold():
    blocks = _blocks()
    assert blocks, f"{PAGE}: no python code block"
    namespace: dict = {"__name__": "api_example"}
    for block in blocks:
        exec(compile(block, str(PAGE), "exec"), namespace)  # noqa: S102 (our own page)
    assert "W_fed" in namespace and "loaded" in namespace  # the example reached its end


def test_the_core_exports_what_its_all_lists():
    for name in esnfed_core.__all__:
        assert getattr(esnfed_core, name) is not None, name
