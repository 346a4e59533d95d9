"""Where the experiment stages write: the layout of the runs folder, defined once.

  <runs>/select/<dataset>/<method>/<pct>/trial-<i>.json, best.json   (select)
  <runs>/models/<dataset>/<method>/<pct>/seed-<k>.npz, .json         (retrain)
  <runs>/assess/<dataset>/<method>.json                              (assess; read by ttest, report)
"""

from __future__ import annotations

from pathlib import Path

# Default folders and files of the stages, relative to the project folder (dvc.yaml names the same
# paths). Kept here, free of heavy imports, so that the command line can show them as option
# defaults without importing the stages (`esnfed --help` stays fast).
PARAMS_FILE = Path("params.yaml")
DATA_DIR = Path("data")  # processed/ and partitions/: the report reads each partition's context names
PROCESSED_DIR = DATA_DIR / "processed"  # preprocess and import: <processed>/<dataset>/<user>.npz
PARTITIONS_DIR = DATA_DIR / "partitions"  # partition: <partitions>/<dataset>.json
SELECT_DIR = Path("runs/select")  # the select stage's outputs (report --select-dir)
ASSESS_DIR = Path("runs/assess")  # the assess stage's outputs, which ttest and report read
PRIVACY_DIR = Path("runs/privacy")
FLOWER_DIR = Path("runs/flower")  # the flower stage's: runs/flower/<dataset>/ (dvc.yaml), a report dependency
# `esnfed flower`'s own default: outside runs/flower, so a run by hand neither makes the report stale
# (dvc status) nor mixes into the stage's results that the report reads
FLOWER_MANUAL_DIR = Path("runs/flower-manual")
REPORTS_DIR = Path("reports")
TTEST_PATH = REPORTS_DIR / "ttest.json"
REPORT_INDEX_NAME = "README.md"  # the report's index page inside the reports folder

# The Flower apps the flower stage runs, by the name each one's outputs carry.
FLOWER_APPS = ("incfed", "fedip", "fedavg")
FEDCLIP_APPS = ("fedclip-naive", "fedclip-replay", "fedclip-joint")  # esnfed_stages/studies/flower_fedclip.py
SECAGG_APPS = ("incfed", "fedip", "fedclip-naive", "fedclip-replay")  # also through SecAgg+ (joint: plain only)
# The source tree (the Flower apps' processes import it) and the apps' own environment beside it
# (requirements/flower.txt).
SOURCE_ROOT = Path(__file__).resolve().parents[1]
FLOWER_PYTHON = SOURCE_ROOT / ".venv-flower" / "bin" / "python"


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
