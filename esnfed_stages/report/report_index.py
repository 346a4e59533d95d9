"""reports/README.md: the index of a report, so a reader who opens reports/ sees what each file
holds. Built from the report's own outputs: each table's title is its Markdown heading, each
figure's the title stored in its PNG (figures.png_title), in the order the report made them."""

from __future__ import annotations

import re
from typing import Mapping

from esnfed_core.method import CONTINUAL_METHODS
from esnfed_core.vocabulary import PCTS
from esnfed_stages.report.figures import png_title
from esnfed_stages.layout import ALPHA_CSV
from esnfed_stages.report.report_figures import SETTINGS
from esnfed_stages.layout import matrix_csv, shares_csv, stream_csv
from esnfed_stages.report.secagg_report import SECTION_TITLE as SECAGG_TITLE
from esnfed_stages.layout import SECAGG_CSV
from esnfed_stages.layout import REPORT_INDEX_NAME as INDEX_NAME


# A CSV whose Markdown is a section of other tables: the section's heading (the SecAgg+ overhead: in
# the communication table of each study dataset, communication.md and/or communication-<name>.md).
SECTIONS = {SECAGG_CSV: SECAGG_TITLE}

# The plot CSVs the repository's dvc-plots/dvc.yaml declares (tests/test_dvc_deps.py checks
# that they agree): `dvc plots show` draws these. DVC cannot expand a plot per params.yaml `datasets`,
# so the per-dataset plots (test accuracy per share; stream, one per setting and share; accuracy
# matrices, one per continual method) are declared for the papers' datasets and the shipped
# `example`; the CSVs of a dataset of your own are written all the same and `esnfed dvc-plots
# --dataset <name> --write` declares them (esnfed_stages/report/dvc_plots.py). The index says which CSVs the
# shipped declarations cover and points to the command for the others; it does not read that file:
# the report would then depend on it and rerun on every edit of it, and a `dvc-plots --write`
# run after the report (the order the index itself suggests) would leave it stale all the same.
PLOTTED_DATASETS = ("wesad", "hhar", "example")
DVC_PLOTS = frozenset(
    [shares_csv(ds) for ds in PLOTTED_DATASETS]
    + [stream_csv(ds, s, pct) for ds in PLOTTED_DATASETS for s in SETTINGS for pct in PCTS]
    + [matrix_csv(ds, m) for ds in PLOTTED_DATASETS for m in CONTINUAL_METHODS]
    + [f"activation-wesad-{m}.csv" for m in ("ip", "clip-naive", "clip-replay", "clip-joint", "fedip",
                                              "fedclip-naive", "fedclip-replay", "fedclip-joint")]
    + [ALPHA_CSV])  # its columns: DVC_ALPHA_COLUMNS

# The columns dvc-plots/dvc.yaml's `heterogeneous-alpha-<dataset>` plots draw: the papers' datasets at the
# default budget's shares. DVC templating can put a params.yaml list in a plot (${study_datasets}) but
# not build the product of study_datasets and heterogeneity.pcts.<budget> the CSV's columns are, so
# the plots list them (tests/test_dvc_deps.py checks that they agree); the columns of a study of your
# own data are written all the same, and `esnfed dvc-plots --dataset <name> --write` declares their
# plot (the index names them and the command).
DVC_ALPHA_COLUMNS = ("wesad_25", "wesad_100", "hhar_25", "hhar_100")

# What each kind of plot CSV holds, by name prefix: its figures' kind, and ({pct}: report.activation_pct,
# {matrix_pct}: report.matrix_pct) its columns.
PLOT_KINDS = (
    ("stream-", "stream-accuracy",
     "`stream-<dataset>-<federated|centralized>-<share>.csv`: stream accuracy (%) after each "
     "context at one training-user share, a panel of the figure (a row per context: `context` from "
     "0, `context_name`), a column per strategy (`naive`, `replay`, `joint`: the mean over the "
     "retrains, the plots draw these) and its population std (`naive_std`, …: the figure's band)"),
    ("test-accuracy-", "test-accuracy",
     "`test-accuracy-<dataset>.csv`: the stationary methods' test accuracy (%) against the share of "
     "training users (a row per share: `share`), mean and population std over the retrains of each "
     "(`random_mean`, `random_std`, … `ip_std`; the plots draw the means)"),
    ("accuracy-matrix-", "accuracy-matrix",
     "`accuracy-matrix-<dataset>-<method>.csv`: a continual method's accuracy matrix at "
     "{matrix_pct}% of the training users (params.yaml `report.matrix_pct`), mean over the retrains: "
     "a row per context trained (`context` from 0, `context_name`), a column per context's test "
     "data (`on_context0` …), accuracy (%), then the population std over the retrains of each "
     "(`on_context0_std` …; the plots draw the means)"),
    ("activation-", "activation",
     "`activation-wesad-<method>.csv`: activation density of the reservoir trained on "
     "{pct}% of the training users only (params.yaml `report.activation_pct`; the other "
     "shares are in the figures), pooled over the WESAD test users and averaged over the "
     "retrains: a row per bin centre (`value`), a column per context (`context0` …), then the "
     "population std over the retrains of each (`context0_std` …; the plots draw the means)"),
    ("heterogeneous-alpha", "alignment",
     "`heterogeneous-alpha.csv`: align's mean test accuracy (%) against α (a row "
     "per α), a column per dataset and training-user share"),
)


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
           metrics: Mapping[str, bytes], date: str, versions: str, *, notice: str = "",
           activation_pct: str = "100", matrix_pct: str = "100") -> str:
    """The index's Markdown: what the run was against the papers' protocols (``notice``,
    comparability.index_notice), a row per table (Markdown and CSV together; a CSV of a section, with the
    section), per figure, and what the plot data and metrics hold: only what was written (no
    figures: no figure section)."""
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
        heading = SECTIONS.get(name)
        mds = [md for md, text in tables.items() if heading and md.endswith(".md") and
               f"\n## {heading}\n".encode() in text]
        if mds:
            short = heading.split(":", 1)[0]
            where = ", ".join(f"[{md}, section \"{short}\"](tables/{md}#{anchor(heading)})" for md in mds)
            lines.append(f"| {where} | {_cell(heading)} "
                         f"| [{name}](tables/{name}): the section's rows; columns: {_cell(columns)} |")
        else:
            lines.append(f"| [{name}](tables/{name}) | CSV only; columns: {_cell(columns)} | |")
    if figures:  # none: e.g. a dataset of your own without contexts, alone
        lines += ["", "## Figures", "", "| figure | what it shows |", "|---|---|"]
    for name, png in figures.items():
        lines.append(f"| [{name}](figures/{name}) | {_cell(png_title(png) or name)} |")
    lines += ["", "## Data behind the figures and metrics" if plots else "## Metrics", ""]
    lines += [_plots_line(plots)] if plots else []
    lines += [f"  - {text.format(pct=activation_pct, matrix_pct=matrix_pct)}" for prefix, _, text in PLOT_KINDS
              if any(n.startswith(prefix) for n in plots)]
    lines += [f"- `metrics/`: {len(metrics)} JSON files, the mean test accuracy per share of each "
              "dataset and method as a fraction (0–1), where the tables show percent (×100) "
              "(`dvc metrics show`; `dvc metrics diff` against another commit).", ""]
    return "\n".join(lines)


def _plots_line(plots: Mapping[str, bytes]) -> str:
    """What `dvc plots show` draws of plots/: the CSVs the repository's dvc-plots/dvc.yaml declares; the
    others (a dataset of your own's) once `esnfed dvc-plots --write` has declared them (not read from
    that file: see DVC_PLOTS)."""
    shipped = [n for n in plots if _shipped(n, plots[n])]
    rest = [n for n in plots if n not in shipped]
    kinds = [kind for prefix, kind, _ in PLOT_KINDS if any(n.startswith(prefix) for n in plots)]
    figures = ", ".join(kinds[:-1]) + " and " + kinds[-1] if len(kinds) > 1 else "".join(kinds) or "other"
    line = f"- `plots/`: {len(plots)} CSV files, the data of the {figures} figures; "
    if shipped:
        line += f"`dvc plots show` draws the {len(shipped)} that the repository's dvc-plots/dvc.yaml declares"
    if rest:
        line += (("; it draws the others" if shipped else "`dvc plots show` draws them") + ", a dataset of your own's, "
                 "once `esnfed dvc-plots --dataset <name> --write` has declared its plots in dvc-plots/dvc.yaml (until then: "
                 "`dvc plots show reports/plots/<file> -x context`): " + ", ".join(rest))
    if any(n.startswith("test-accuracy-") for n in rest):
        line += " (test-accuracy-<dataset>.csv: -x share)"
    own = [c for c in _header(plots[ALPHA_CSV])[1:] if c not in DVC_ALPHA_COLUMNS] if ALPHA_CSV in plots else []
    if own:
        line += (f" ({ALPHA_CSV}'s columns {', '.join(own)}: drawn once `esnfed dvc-plots --dataset <name> --write` "
                 "has declared the dataset's heterogeneous-alpha-<name> plot, or -x alpha)")
    return line + ":"


def _header(data: bytes) -> list[str]:
    return data.decode("utf-8").split("\n", 1)[0].split(",")


def _shipped(name: str, data: bytes) -> bool:
    """Whether the repository's dvc-plots/dvc.yaml declares a plot of plots/``name``: one of DVC_PLOTS and, for
    the alignment CSV, holding columns its plots list (DVC_ALPHA_COLUMNS)."""
    if name != ALPHA_CSV:
        return name in DVC_PLOTS
    return bool(set(DVC_ALPHA_COLUMNS) & set(_header(data)))
