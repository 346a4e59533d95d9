"""The trial settings of a heterogeneous method (docs/heterogeneous.md) on one dataset,
from the parsed ``heterogeneity`` section (:class:`HeteroParams`, in ``exp.heterogeneity``): mode
``space`` draws from that dataset's search space; the shares such a method runs; and the settings
its outputs record and are checked against (trial files, best.json, models, assess file)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from esnfed_core.errors import ConfigError
from esnfed_core.heterogeneity import Heterogeneity
from esnfed_core.method import Method
from esnfed_core.search import parse_space
from esnfed_stages import provenance
from esnfed_stages.params.experiment import ExperimentParams
from esnfed_stages.params.hetero import HeteroParams


def _hetero(exp: ExperimentParams) -> HeteroParams:
    if exp.heterogeneity is None:
        raise ConfigError("params.yaml: missing key 'heterogeneity' (the heterogeneous methods' settings)")
    return exp.heterogeneity


def for_dataset(exp: ExperimentParams, hp: HeteroParams, dataset: str) -> ExperimentParams:
    """``exp`` whose trial settings carry the heterogeneity spec of ``dataset`` (mode space: the
    varied hyperparameters' dimensions from budgets.<budget>.space.<dataset>)."""
    dims = [d for d in parse_space(exp.space.get(dataset), f"budgets.{exp.budget}.space.{dataset}")
            if d.name in hp.vary]
    spec = Heterogeneity(hp.mode, hp.seed, tuple(dims), hp.combine)
    return replace(exp, settings=replace(exp.settings, heterogeneity=spec))


def shares(exp: ExperimentParams, method: Method, pcts: list[str]) -> list[str]:
    """The shares of ``pcts`` a method runs: a heterogeneous one only those of heterogeneity.pcts
    for the params' budget (every share for a budget not listed there). Shares asked for that leave
    none (``--pct 50`` where the budget runs 25 and 100) are a ConfigError, not a silent no-op."""
    if not method.heterogeneous:
        return pcts
    allowed = _hetero(exp).shares(exp.budget)
    out = [p for p in pcts if p in allowed]
    if pcts and not out:
        raise ConfigError(f"--pct {', '.join(pcts)}: {method.id} runs only the shares of "
                          f"heterogeneity.pcts.{exp.budget} ({', '.join(allowed)}) in params.yaml")
    return out


def settings_for(exp: ExperimentParams, method: Method, dataset: str) -> ExperimentParams:
    """``exp`` as a trial of ``method`` on ``dataset`` needs it (unchanged for the other methods)."""
    return for_dataset(exp, _hetero(exp), dataset) if method.heterogeneous else exp


def record(exp: ExperimentParams, method: Method) -> dict[str, Any]:
    """The heterogeneity settings an output of ``method`` is computed with, by params.yaml key
    (:attr:`HeteroParams.record`: ``heterogeneity.seed``, ``mode`` and ``vary`` decide each client's
    draws, ``combine`` the ensemble's validation scores, from select on); {} for the other methods.
    A heterogeneous method's trial files, best.json, models and assess file record it
    (:func:`labels`); retrain refuses a best.json, and assess a model, whose values differ
    (``provenance.check``), as the report an assess file."""
    return _hetero(exp).record if method.heterogeneous else {}


def labels(exp: ExperimentParams, method: Method) -> dict[str, Any]:
    """What an output of ``method`` records: ``params`` = :func:`record` (nothing for the methods
    without heterogeneity settings)."""
    rec = record(exp, method)
    return {provenance.KEY: rec} if rec else {}
