"""reports/README.md: the index of a report, so a reader who opens reports/ sees what each file
holds. Built from the report's own outputs: each table's title is its Markdown heading, each
figure's the title stored in its PNG (figures.png_title), in the order the report made them."""

from __future__ import annotations

import re
from typing import Mapping

from esnfed_stages.figures import png_title
from esnfed_stages.secagg_report import CSV_NAME as SECAGG_CSV, SECTION_TITLE as SECAGG_TITLE

INDEX_NAME = "README.md"

# A CSV whose Markdown is a section of another table: the section's file and heading.
SECTIONS = {SECAGG_CSV: ("communication.md", SECAGG_TITLE)}


def _table_title(markdown: bytes, name: str) -> str:
    """The heading ``# <id>: <title>`` of a table (the file name when it has none)."""
    first = markdown.decode("utf-8").split("\n", 1)[0]
    if not first.startswith("# "):
        return name
    head = first[2:]
    stem = name.rsplit(".", 1)[0]
    return head[len(stem) + 2:] if head.startswith(stem + ": ") else head


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def anchor(heading: str) -> str:
    """The link fragment GitHub-style renderers give a Markdown heading: lower case, punctuation
    other than '-' and '_' dropped, spaces as '-'."""
    return re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")


def render(tables: Mapping[str, bytes], figures: Mapping[str, bytes], plots: Mapping[str, bytes],
           metrics: Mapping[str, bytes], date: str, versions: str, *, notice: str = "") -> str:
    """The index's Markdown: what the run was against the papers' protocol (``notice``,
    comparability.py), a row per table (Markdown and CSV together; a CSV of a section, with the
    section), per figure, and where the plot data and metrics are."""
    lines = ["# Report", "",
             f"Written by `esnfed report` on {date} ({versions}). Each table's header says its data "
             "source, budget, seeds, significance test and missing inputs.", "",
             *([notice, ""] if notice else []),
             "## Tables", "", "| table | what it shows | CSV |", "|---|---|---|"]
    for name, text in tables.items():
        if not name.endswith(".md"):
            continue
        csv = name[:-3] + ".csv"
        csv_link = f"[{csv}](tables/{csv})" if csv in tables else ""
        lines.append(f"| [{name}](tables/{name}) | {_cell(_table_title(text, name))} | {csv_link} |")
    others = [n for n in tables if not n.endswith(".md") and n[:-4] + ".md" not in tables]
    for name in others:  # a CSV without a Markdown table of its own (the SecAgg+ overhead rows)
        columns = tables[name].decode("utf-8").split("\n", 1)[0].replace(",", ", ")
        md, heading = SECTIONS.get(name, (None, None))
        if md in tables:
            short = heading.split(":", 1)[0]
            lines.append(f"| [{md}, section \"{short}\"](tables/{md}#{anchor(heading)}) | {_cell(heading)} "
                         f"| [{name}](tables/{name}): the section's rows; columns: {_cell(columns)} |")
        else:
            lines.append(f"| [{name}](tables/{name}) | CSV only; columns: {_cell(columns)} | |")
    lines += ["", "## Figures", "", "| figure | what it shows |", "|---|---|"]
    for name, png in figures.items():
        lines.append(f"| [{name}](figures/{name}) | {_cell(png_title(png) or name)} |")
    lines += ["", "## Data behind the figures and metrics", "",
              f"- `plots/`: {len(plots)} CSV files, the data of the stream-accuracy, activation and "
              "alignment figures (`dvc plots show` draws them).",
              f"- `metrics/`: {len(metrics)} JSON files, the mean test accuracy per share of each "
              "dataset and method (`dvc metrics show`; `dvc metrics diff` against another commit).", ""]
    return "\n".join(lines)
