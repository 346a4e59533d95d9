"""Where the experiment stages write: the layout of the runs folder, defined once.

  <runs>/select/<dataset>/<method>/<pct>/trial-<i>.json, best.json   (select)
  <runs>/models/<dataset>/<method>/<pct>/seed-<k>.npz, .json         (retrain)
  <runs>/assess/<dataset>/<method>.json                              (assess; read by ttest, report)
"""

from __future__ import annotations

from pathlib import Path


def select_dir(runs: str | Path, dataset: str, method: str, pct: str) -> Path:
    return Path(runs) / "select" / dataset / method / pct


def best_path(runs: str | Path, dataset: str, method: str, pct: str) -> Path:
    return best_under(Path(runs) / "select", dataset, method, pct)


def best_under(select_root: str | Path, dataset: str, method: str, pct: str) -> Path:
    """best.json of one share under the select stage's folder ``select_root`` (the report's --select-dir)."""
    return Path(select_root) / dataset / method / pct / "best.json"


def model_dir(runs: str | Path, dataset: str, method: str, pct: str) -> Path:
    return Path(runs) / "models" / dataset / method / pct


def assess_dir(runs: str | Path) -> Path:
    """The assess stage's folder, which ttest and report read (params: ttest/report --assess-dir)."""
    return Path(runs) / "assess"


def assess_path(assess_root: str | Path, dataset: str, method: str) -> Path:
    """One method's assess file under the assess folder ``assess_root`` (see :func:`assess_dir`)."""
    return Path(assess_root) / dataset / f"{method}.json"
