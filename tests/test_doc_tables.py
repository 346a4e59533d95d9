"""The tables docs/deep.md and docs/heterogeneous.md copy from the report have the report's columns,
their prose says what the numbers show, and docs/privacy.md's non-private accuracies are the same
run's IncFed cells (before, docs quoted `incfed` for the report's `shallow-incfed`, "rises
with α in every row" over a row that dips, and flower.md's first seed as the non-private mean)."""

from __future__ import annotations

import re
from pathlib import Path

from esnfed_stages.report.table_specs import DEEP_TABLE, TABLES
from esnfed_core.vocabulary import DATASETS
from esnfed_stages.params.load import load_params
from esnfed_stages.report.ttest import hetero_table_methods

ROOT = Path(__file__).resolve().parents[1]
NAMES = {"wesad": "WESAD", "hhar": "HHAR"}


def _table(doc: str, first_cell: str) -> list[list[str]]:
    """The rows (header first, the |---| line left out) of the table whose header starts so."""
    text = (ROOT / "docs" / doc).read_text(encoding="utf-8")
    start = text.index(f"| {first_cell} |")
    lines = text[start:].split("\n\n", 1)[0].splitlines()
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines if not line.startswith("|---")]


def test_the_deep_table_in_the_docs_has_the_report_s_columns():
    spec = next(s for s in TABLES if s.id == DEEP_TABLE)
    header = _table("deep.md", "train users")[0]
    assert header == ["train users"] + [f"{NAMES[ds]} {label}" for ds in DATASETS for _, label in spec.methods]


def test_the_heterogeneous_table_in_the_docs_has_the_report_s_columns_and_the_claim_fits_it():
    rows = _table("heterogeneous.md", "dataset")
    methods = list(hetero_table_methods(load_params(ROOT / "params.yaml")))
    assert rows[0] == ["dataset", "train users", *methods]
    aligns = [i for i, m in enumerate(rows[0]) if m.startswith("align-")]
    rising = [all(float(r[a].split()[0]) <= float(r[b].split()[0]) for a, b in zip(aligns, aligns[1:]))
              for r in rows[1:]]
    text = (ROOT / "docs" / "heterogeneous.md").read_text(encoding="utf-8")
    claim = re.search(r"Accuracy rises with α in (every row|one row|[a-z]+ rows)", " ".join(text.split()))
    assert claim is not None
    if claim.group(1) == "every row":
        assert all(rising), "the table has a row where accuracy falls with α"
    else:
        assert claim.group(1) == {0: "no rows", 1: "one row", 2: "two rows", 3: "three rows"}[sum(rising)]


def test_privacy_md_quotes_the_non_private_incfed_of_the_run_the_deep_table_shows():
    """The deep table's shallow-incfed 100 % cells are IncFed's assess files, which are the privacy
    table's ε = inf cells of the same run."""
    rows = _table("deep.md", "train users")
    full = next(r for r in rows if r[0] == "100%")
    incfed = {ds: full[rows[0].index(f"{NAMES[ds]} shallow-incfed")].strip("*").split()[0] for ds in DATASETS}
    text = " ".join((ROOT / "docs" / "privacy.md").read_text(encoding="utf-8").split())
    assert f"(Non-private, the same configs reach {incfed['wesad']} % (WESAD) and {incfed['hhar']} % (HHAR)" in text
