"""docs/own-data.md "Your data alone": its params.yaml recipe applied to the repository's params.yaml, as
its text says (the entries of `partition` and `budgets` added to theirs, every other key
replaced, every other budget given mystudy's space as its comment asks), for the tests of the
schema and of the stages DVC expands from it."""

from __future__ import annotations

from pathlib import Path

import yaml

from esnfed_stages.params.load import load_params

ROOT = Path(__file__).resolve().parents[1]
MERGED = ("partition", "budgets")  # the recipe's sections that take an entry more


def recipe() -> dict:
    """The user guide's yaml block under **Your data alone.** (docs/own-data.md)."""
    readme = (ROOT / "docs" / "own-data.md").read_text(encoding="utf-8")
    block = readme.split("**Your data alone.**", 1)[1].split("```yaml\n", 1)[1].split("```", 1)[0]
    return yaml.safe_load(block)


def user_only_params() -> dict:
    """The repository's params.yaml with the recipe applied."""
    p = load_params(ROOT / "params.yaml")  # each budget's space its own dict (the file shares them by anchors)
    r = recipe()
    for key, value in r.items():
        p[key] = {**p[key], **value} if key in MERGED else value
    space = r["budgets"][r["budget"]]["space"]["mystudy"]
    for budget in p["budgets"].values():
        budget["space"].setdefault("mystudy", space)
    return p
