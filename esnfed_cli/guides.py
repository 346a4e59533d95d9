"""The user-guide page (docs/, the mkdocs site) that explains each command: `esnfed CMD --help`
ends with it (esnfed_cli.main sets each command's epilog from this table). tests/test_cli_guides.py
checks every registered command has a page here and that the page exists."""

from __future__ import annotations

GUIDE = {
    "synthesize": "docs/embedded-data.md",
    "preprocess": "docs/getting-started.md",
    "partition": "docs/getting-started.md",
    "download": "docs/getting-started.md",
    "select": "docs/experiments.md",
    "retrain": "docs/experiments.md",
    "assess": "docs/experiments.md",
    "ttest": "docs/reports.md",
    "report": "docs/reports.md",
    "dvc-plots": "docs/reports.md",
    "privacy": "docs/privacy-stage.md",
    "flower": "docs/flower-apps.md",
    "flower-table": "docs/flower-apps.md",
    "flower-export": "docs/flower-deploy.md",
    "flower-env": "docs/flower-apps.md",
    "check-data": "docs/own-data.md",
    "import": "docs/own-data.md",
    "predict": "docs/experiments.md",
    "check-params": "docs/reference.md",
    "init": "docs/sharing.md",
}


def epilog(command: str) -> str:
    """The line `esnfed COMMAND --help` closes with."""
    return f"Guide: {GUIDE[command]}"
