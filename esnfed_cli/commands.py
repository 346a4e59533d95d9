"""Imports every command module so that each registers its command(s) on the app
(esnfed_cli.app), in the order `esnfed --help` lists them. Plain imports, not importlib by name:
tests/test_import_graph.py then sees these edges and would find an import cycle through them."""

from esnfed_cli import data_cmds  # noqa: F401  each command module does `@app.command()` on import
from esnfed_cli import download_cmd  # noqa: F401
from esnfed_cli import experiment_cmds  # noqa: F401
from esnfed_cli import report_cmds  # noqa: F401
from esnfed_cli import plots_cmd  # noqa: F401  dvc-plots: dvc.yaml's plots of a dataset (yours)
from esnfed_cli import privacy_cmd  # noqa: F401
from esnfed_cli import flower_cmd  # noqa: F401  Flower apps: `esnfed flower`
from esnfed_cli import owndata_cmds  # noqa: F401  your own data: check-data, import
from esnfed_cli import predict_cmd  # noqa: F401  predict: a saved model applied to a processed folder
from esnfed_cli import params_cmd  # noqa: F401  check-params (make repro runs it first)
from esnfed_cli import init_cmd  # noqa: F401  init: a new project from the installed package
