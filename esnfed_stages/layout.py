"""Where the stages write: every output folder and file name, defined once, so that no stage
imports another only to find its outputs. The runs folder:

  <runs>/select/<dataset>/<method>/<pct>/trial-<i>.json, best.json   (select)
  <runs>/models/<dataset>/<method>/<pct>/seed-<k>.npz, .json         (retrain)
  <runs>/assess/<dataset>/<method>.json                              (assess; read by ttest, report)
  <runs>/privacy/<dataset>.json, extra/, sampling/                   (privacy; read by report)
  <runs>/flower/<dataset>/<dataset>-<app>...-<pct>.json              (flower; read by report)
and the report's plot data under reports/plots/.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import tempfile
from pathlib import Path
from typing import Iterator

# Default folders and files of the stages, relative to the project folder (dvc.yaml names the same
# paths). Kept here, free of heavy imports, so that the command line can show them as option
# defaults without importing the stages (`esnfed --help` stays fast).
PARAMS_FILE = Path("params.yaml")
# The plot declarations of reports/plots/ (`dvc plots show`): a dvc.yaml of plots alone, which DVC
# collects beside the pipeline's; `esnfed dvc-plots --write` keeps it.
DVC_PLOTS_FILE = Path("dvc-plots/dvc.yaml")
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
# The folder esnfed's packages are imported from (the checkout, or site-packages for an installed
# package), and the Flower apps' own environment (flwr's pins clash with this one's), which
# `esnfed flower-env` builds in the project folder as FLOWER_ENV.
SOURCE_ROOT = Path(__file__).resolve().parents[1]
CODE_PACKAGES = ("esnfed_cli", "esnfed_stages", "esnfed_core", "esnfed_flower")
FLOWER_ENV = Path(".venv-flower")
FLOWER_PYTHON = SOURCE_ROOT / FLOWER_ENV / "bin" / "python"  # the checkout's (`make flower-env`)


def flower_python() -> Path:
    """The Flower environment's interpreter: the project folder's (the current one: an `esnfed init`
    project, or the checkout) where it has one, else the checkout's."""
    here = Path.cwd() / FLOWER_ENV / "bin" / "python"  # not resolved: a venv's python is a link out of it
    return here if here.is_file() else FLOWER_PYTHON


@contextlib.contextmanager
def code_path() -> Iterator[Path]:
    """A folder holding esnfed's packages and nothing else, for the Flower environment's interpreter
    to import them from (its PYTHONPATH): the checkout itself, or, for an installed package, whose
    folder is this environment's site-packages (its numpy, typer, protobuf... would shadow the Flower
    environment's own pins), a temporary folder of links to the package folders."""
    if (SOURCE_ROOT / "pyproject.toml").is_file():
        yield SOURCE_ROOT
        return
    with tempfile.TemporaryDirectory(prefix="esnfed-code-") as tmp:
        for name in CODE_PACKAGES:
            os.symlink(SOURCE_ROOT / name, Path(tmp) / name, target_is_directory=True)
        yield Path(tmp)


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


TRIAL_FILE = re.compile(r"^trial-(\d+)\.json$")  # the name trial_path gives


def trial_path(directory: Path, index: int) -> Path:
    """One select trial's file in a share's folder (:func:`select_dir`)."""
    return Path(directory) / f"trial-{index:04d}.json"


# The privacy stage's documents under its folder (PRIVACY_DIR).
def privacy_path(out_dir: str | Path, dataset: str) -> Path:
    """Where the privacy stage writes a dataset's document."""
    return Path(out_dir) / f"{dataset}.json"


def extra_path(out_dir: str | Path, dataset: str, method: str) -> Path:
    """Where the privacy stage's ``run(..., extra=method)`` writes an opt-in method's document (``privacy.extra_methods``)."""
    return Path(out_dir) / "extra" / dataset / f"{method}.json"


def eps_key(eps: float) -> str:
    """An epsilon as output names and document keys spell it (inf, 0.5, 8)."""
    return "inf" if math.isinf(eps) else f"{eps:g}"


def fraction_name(fraction: float | int) -> str:
    """A study fraction's name (its document's file name, ``--sampling``'s value): as params.yaml
    gives it, the way dvc.yaml's ``${item.fraction}`` writes it (0.5, 1)."""
    return str(fraction)


def sampling_path(out_dir: str | Path, dataset: str, fraction: str) -> Path:
    """Where the privacy stage's ``run_sampling`` writes a dataset's document at the fraction named ``fraction``."""
    return Path(out_dir) / "sampling" / dataset / f"{fraction}.json"


# The flower stage's result files under FLOWER_DIR/<dataset>/.
def out_name(dataset: str, app: str, secagg: bool, pct: str, epsilon: float | None = None,
             fraction: float | None = None) -> str:
    """<dataset>-<app>[-secagg][-f<fraction>][-eps<ε>]-<pct>.json; ``fraction``: the client fraction
    a result records (``client_fraction``: its IP rounds sampled, below 1), spelled exactly (the
    shortest repr of the float: 0.5 -> f0.5), so runs at two fractions do not share a name; None
    (every client in every round): no suffix, the names as before."""
    dp = "" if epsilon is None else f"-eps{eps_key(epsilon)}"
    sampled = "" if fraction is None else f"-f{float(fraction)!r}"
    return f"{dataset}-{app}{'-secagg' if secagg else ''}{sampled}{dp}-{pct}.json"


# The plot CSVs of one dataset, under reports/plots/ (dvc-plots/dvc.yaml and `esnfed dvc-plots` name them).
def stream_csv(ds: str, setting: str, pct: str) -> str:
    """Stream accuracy after each context, one setting and training share: a column per strategy."""
    return f"stream-{ds}-{setting}-{pct}.csv"


def shares_csv(ds: str) -> str:
    """The stationary methods' test accuracy against the share: ``<method>_mean`` / ``_std`` columns."""
    return f"test-accuracy-{ds}.csv"


def matrix_csv(ds: str, method: str) -> str:
    """A continual method's accuracy matrix: a column ``matrix_column(j)`` per context's test data."""
    return f"accuracy-matrix-{ds}-{method}.csv"


ALPHA_CSV = "heterogeneous-alpha.csv"  # the plot data of the α figure (reports/plots/)


def alpha_column(dataset: str, pct: str) -> str:
    """The column of ``dataset`` at share ``pct`` in ALPHA_CSV (dvc.yaml's alpha plots draw these)."""
    return f"{dataset}_{pct}"


SECAGG_CSV = "secagg-overhead.csv"  # the SecAgg+ overhead table's CSV under reports/tables/
