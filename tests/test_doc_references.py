"""Every document the code and docs cite is in the repository: "PROTOCOL §n" names a section of
docs/protocol.md, "DATA-FACTS X" one of docs/data-facts.md, "<file>.md §n" one of that file,
'README, "Section"' / 'BENCHMARKS.md, "Section"' / '<file>.md "Section"' a heading of that file
(its title, or the start of it up to a non-word character, after any "n. " number), and every
Markdown file named exists (the report's generated tables excepted)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from esnfed_stages.report.table_specs import TABLES
from esnfed_stages.report import (claims_report, continual_report, ipfit_report, privacy_sampling_report,
                                  protocol_tables, selected_report)

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
SKIP_DIRS = {".git", ".venv", ".venv-flower", ".dvc", "data", "runs", "reports", "__pycache__", ".pytest_cache"}
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml"}
# Markdown files the report stage writes (reports/tables/<id>.md): named in code, not documents.
GENERATED_MD = {f"{spec.id}.md" for spec in TABLES} | {"communication.md", "privacy.md", "heterogeneous.md"}
GENERATED_MD |= {"flower-table.md"}  # `esnfed flower-table` writes runs/flower-table.md
GENERATED_MD |= {f"{claims_report.NAME}.md", f"{selected_report.NAME}.md"}  # the claims, the selected hyperparameters
GENERATED_MD |= {f"{m.TABLE}.md" for m in (continual_report, ipfit_report)}  # the gap audit's tables
GENERATED_MD |= {f"{table_id}.md" for p in protocol_tables.PROTOCOLS.values() for _, table_id in p.tables}  # opt-in
GENERATED_MD |= {f"{privacy_sampling_report.NAME}.md"}  # opt-in: privacy.sampling_study's table
# the generic tables of a user's dataset <name> (esnfed_stages.report.table_specs.generic_tables)
GENERATED_USER_MD = re.compile(
    r"(communication-[a-z][a-z0-9_]*|[a-z][a-z0-9_]*-(stationary-(incfed|fedip|ip)|continual|continual-metrics|selected))\.md")
GENERATED_PATHS = {"reports/README.md"}  # the report's index (esnfed_stages/report/report_index.py)


def _generated(name: str) -> bool:
    base = Path(name).name
    return base in GENERATED_MD or name in GENERATED_PATHS or bool(GENERATED_USER_MD.fullmatch(base))

_PROTOCOL = re.compile(r"\bPROTOCOL\b((?:\s*(?:,|and|-|–)?\s*§\s*\d+(?:\s*[-–]\s*\d+)?)+)")
_DATA_FACTS = re.compile(r"\bDATA-FACTS\s+([A-Z])\b")
_MD_FILE = re.compile(r"(?<![\w/.-])((?:\.\./|[\w-]+/)*[\w.-]+\.md)\b(?:\s+§\s*(\d+))?")
_HEADING = re.compile(r"^#+\s+(\d+|[A-Z])\.\s", re.MULTILINE)
# 'README, "Flower apps"', 'BENCHMARKS.md ("Reduced budget")', 'docs/flower.md "FedCLIP"': a file,
# optional comma, optional parenthesis, then a quoted title starting with a capital and without
# "§" (so code such as `"fedclip.md", "figures/x.png"` and the citation form `docs/protocol.md
# ("PROTOCOL §n" ...)` are not read as references); the quote may open a new line.
_NAMED = re.compile(r"(?<![\w/.\"-])((?:[\w-]+/)*(?:README|BENCHMARKS|[\w-]+)\.md|README|BENCHMARKS)"
                    r",?\s*(?:#\s*)?\(?\"([A-Z][^\"\n§]{0,80})\"")
_FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def _sections(doc: Path) -> set[str]:
    return set(_HEADING.findall(doc.read_text(encoding="utf-8")))


def _titles(doc: Path) -> list[str]:
    """The headings of a Markdown file outside code blocks, without '#' and any 'n. ' number."""
    text = _FENCE.sub("", doc.read_text(encoding="utf-8"))
    return [re.sub(r"^(\d+|[A-Z])\.\s+", "", t.strip()) for t in re.findall(r"^#+\s+(.+)$", text, re.MULTILINE)]


def _names_heading(title: str, doc: Path) -> bool:
    """Whether ``title`` is a heading of ``doc`` or the start of one up to a non-word character
    ("Paper scale" names "Paper scale: memory and time")."""
    return any(t == title or (t.startswith(title) and not t[len(title)].isalnum()) for t in _titles(doc))


def _numbers(chunk: str) -> list[str]:
    """'§2-3' -> 2, 3; '§3, §5' -> 3, 5."""
    out: list[str] = []
    for lo, hi in re.findall(r"(\d+)(?:\s*[-–]\s*(\d+))?", chunk):
        out += [str(n) for n in range(int(lo), int(hi or lo) + 1)]
    return out


def _resolve(name: str, source: Path) -> Path | None:
    """The cited file inside the repository: one beside it (../shared, say) does not count, since
    a clone need not have it."""
    for base in (source.parent, ROOT, DOCS):
        path = (base / name).resolve()
        if path.is_file() and path.is_relative_to(ROOT):
            return path
    return None


def dangling(text: str, source: Path) -> list[str]:
    """The references in ``text`` (of file ``source``) to a missing document or section."""
    problems: list[str] = []
    protocol = _sections(DOCS / "protocol.md")
    for m in _PROTOCOL.finditer(text):
        problems += [f"PROTOCOL §{n}" for n in _numbers(m.group(1)) if n not in protocol]
    facts = _sections(DOCS / "data-facts.md")
    problems += [f"DATA-FACTS {x}" for x in _DATA_FACTS.findall(text) if x not in facts]
    for m in _MD_FILE.finditer(text):
        name, section = m.group(1), m.group(2)
        if _generated(name):
            continue
        doc = _resolve(name, source)
        if doc is None:
            problems.append(name)
        elif section is not None and section not in _sections(doc):
            problems.append(f"{name} §{section}")
    for m in _NAMED.finditer(text):
        name, title = m.group(1), m.group(2)
        if _generated(name):
            continue
        doc = _resolve(name if name.endswith(".md") else f"{name}.md", source)
        if doc is not None and not _names_heading(title, doc):
            problems.append(f'{name} "{title}"')
    return problems


def _repo_files() -> list[Path]:
    files = [p for p in ROOT.rglob("*") if p.is_file() and p.suffix in SUFFIXES
             and not SKIP_DIRS & set(p.relative_to(ROOT).parts) and ".egg-info" not in str(p)
             and p != Path(__file__).resolve()]  # this file cites missing sections on purpose
    return sorted(files + [ROOT / "Makefile"])


def test_docs_define_every_section_the_code_cites():
    assert _sections(DOCS / "protocol.md") == {str(n) for n in range(1, 8)}
    assert _sections(DOCS / "data-facts.md") == {"A", "B", "D"}


def test_no_reference_in_the_repository_dangles():
    files = _repo_files()
    assert len(files) > 50 and ROOT / "esnfed_core" / "reservoir.py" in files
    problems = {str(p.relative_to(ROOT)): bad for p in files
                if (bad := dangling(p.read_text(encoding="utf-8"), p))}
    assert not problems, problems


@pytest.mark.parametrize("text, expected", [
    ("facts in ../shared/DATA-FACTS.md", ["../shared/DATA-FACTS.md"]),  # outside the repository
    ("x (PROTOCOL §9) y", ["PROTOCOL §9"]),
    ("PROTOCOL §3, §8 formulas", ["PROTOCOL §8"]),
    ("PROTOCOL §6-8: budgets", ["PROTOCOL §8"]),
    ("PROTOCOL §3 and §5 formulas; PROTOCOLS = (0, 2)", []),
    ("rates (DATA-FACTS C)", ["DATA-FACTS C"]),
    ("see notes/assess-contract.md", ["notes/assess-contract.md"]),
    ("see docs/assess-contract.md and docs/protocol.md §7", []),
    ("see docs/protocol.md §12", ["docs/protocol.md §12"]),
    ("writes reports/tables/fedclip.md", []),
    ('(docs/flower-apps.md, "Flower apps")', []),  # the start of "Flower apps (esnfed_flower/)"
    ('(docs/privacy-stage.md, "Privacy")', ['docs/privacy-stage.md "Privacy"']),  # "Differential privacy ..."
    ('(README, "Flower apps")', ['README "Flower apps"']),  # the section moved to docs/flower-apps.md
    ('cost in BENCHMARKS.md\n  ("Reduced budget")', []),  # "Reduced budget, projected"
    ('BENCHMARKS.md, "Reduced"', []),  # up to a non-word character: "Reduced budget" starts so
    ('BENCHMARKS.md, "Reduce"', ['BENCHMARKS.md "Reduce"']),  # not a word prefix
    ('docs/data-contract.md, "Importing your own data"', []),  # after "5. "
    ('docs/flower.md "FedCLIP"', []),
    ('docs/flower.md "SecAgg+ everywhere"', ['docs/flower.md "SecAgg+ everywhere"']),
    ('README "Quick start", "Layout"', []),
    ('(BENCHMARKS.md, "Accelerator paths")', ['BENCHMARKS.md "Accelerator paths"']),
    ('{"fedclip.md", "Table"}; privacy.md", "Privacy"', []),  # code: generated names, strings
    ('docs/protocol.md ("PROTOCOL §n" in comments)', []),  # a citation form, not a title
])
def test_the_scanner_flags_missing_sections_and_files(text, expected):
    assert dangling(text, ROOT / "esnfed_core" / "x.py") == expected


_CODE_PATH = re.compile(r"`((?:[\w.-]+/)+[\w.-]+\.(?:py|sh|yaml|toml|txt))`")


def test_every_code_path_the_documents_quote_is_in_the_repository():
    """BENCHMARKS.md quoted `shared/bench/gpu_reservoir.py` as a path, a file of the
    team's shared folder outside the repository (a clone has no such file). A quoted path to a
    script, config or requirements file is the repository's; a file outside it is named as such
    in words, not as a path."""
    docs = [*ROOT.glob("*.md"), *DOCS.glob("*.md")]
    problems = [f"{doc.relative_to(ROOT)}: {m.group(1)}" for doc in docs
                for m in _CODE_PATH.finditer(doc.read_text(encoding="utf-8")) if not (ROOT / m.group(1)).exists()]
    assert not problems, problems
