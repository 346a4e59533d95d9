"""The apps behind one Flower app project (esnfed_flower/app/pyproject.toml), so that `flwr run`
starts them: a ServerApp and a ClientApp that hand each run to the app its run config names
(``app``: incfed | fedip | fedavg | fedclip-naive | fedclip-replay | fedclip-joint; ``secagg``:
the SecAgg+ app), the same table esnfed_flower.run uses for the in-process simulation.

Flower accepts only run-config keys that the project's ``[tool.flwr.app.config]`` declares, so
the project declares every key the apps read; the optional ones (a sparse reservoir's
connectivity, ``readout-bias``, ``client-fraction``, ...) default to "", which means "unset":
esnfed_flower.common.run_config drops them, so an absent key keeps meaning what it means in
esnfed_flower.run's runs."""

from __future__ import annotations

import importlib
from types import ModuleType
from flwr.app import Context, Message
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp

from esnfed_flower.common import run_config
from esnfed_flower.run import APPS, app_key

def chosen(context: Context) -> ModuleType:
    """The app module the run config names; a ValueError naming the keys when there is none."""
    rc = run_config(context)
    key = app_key(rc) if "app" in rc else ("", False)
    if key not in APPS:
        apps = ", ".join(sorted({a for a, _ in APPS}))
        raise ValueError(f"run config app={key[0]!r} secagg={key[1]}: no such Flower app (app is one of {apps}; "
                         f"secagg: incfed, fedip, fedclip-naive, fedclip-replay)")
    return importlib.import_module(f"esnfed_flower.{APPS[key]}")


class _ServerByRunConfig(ServerApp):
    def __call__(self, grid: Grid, context: Context) -> None:
        chosen(context).server_app(grid, context)


class _ClientByRunConfig(ClientApp):
    def __call__(self, message: Message, context: Context) -> Message:
        return chosen(context).client_app(message, context)


server_app = _ServerByRunConfig()
client_app = _ClientByRunConfig()
