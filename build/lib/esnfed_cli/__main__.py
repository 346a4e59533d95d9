"""`python -m esnfed_cli`: the `esnfed` command, for an environment whose scripts are not on PATH."""

from esnfed_cli.main import app

app(prog_name="esnfed")
