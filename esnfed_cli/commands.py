"""Imports every command module so that each registers its command(s) on the app."""

import importlib

_MODULES = [
    # one entry per command module in esnfed_cli/; each does `@app.command()` on import
    "data_cmds",
    "download_cmd",
    "experiment_cmds",
    "report_cmds",
    "privacy_cmd",
    # issue 14 (Flower apps): `esnfed flower`
    "flower_cmd",
    # issue 16 (your own data): check-data, import
    "owndata_cmds",
]

for _name in _MODULES:
    importlib.import_module(f"esnfed_cli.{_name}")
