"""The `esnfed` command: the app (esnfed_cli.app) with every stage command registered on it."""

from __future__ import annotations

import inspect

from typer.core import TyperCommand

from esnfed_cli._common import flowed
from esnfed_cli.app import _Command, app
from esnfed_cli.guides import epilog

# Stage commands register themselves on `app` when their module is imported.
from esnfed_cli import commands  # noqa: F401

# Docstrings are wrapped for the source, help text for the terminal (esnfed_cli._common.flowed);
# each command's help ends with the guide page that explains it.
for _info in app.registered_commands:
    _info.epilog = epilog(_info.name or _info.callback.__name__)
    _info.help = flowed(_info.help or inspect.getdoc(_info.callback) or "")
    _info.cls = _Command if _info.cls in (None, TyperCommand) else _info.cls
