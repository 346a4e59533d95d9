"""params.yaml's ``report`` section and what the report checks its inputs against, parsed
once (ReportParams): the shares its figures show, the datasets, the budget and the params each
input must have been computed with."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from esnfed_core.errors import ConfigError
from esnfed_core.quote import quote
from esnfed_stages.report.table_specs import TableSpec
from esnfed_core.vocabulary import DATASETS, PCTS
from esnfed_stages.report import protocol_tables
from esnfed_stages.params.hetero import hetero_params
from esnfed_stages.data._datasets import continual_declared, declared, n_classes, study_declared, variant_base
from esnfed_stages.params.experiment import BudgetSpec, budget_spec
from esnfed_stages.params.sections import section
from esnfed_stages.params.privacy import privacy_params
from esnfed_stages.report.ttest import hetero_table_methods, ttest_params


def _share(params: Mapping[str, Any], key: str, default: str | None = None) -> str:
    report = params.get("report") if isinstance(params, Mapping) else None
    if default is not None and isinstance(report, Mapping) and key.split(".")[1] not in report:
        return default
    value = str(section(params, key))
    if value not in PCTS:
        raise ConfigError(f"params.yaml: {key} must be one of {', '.join(PCTS)}, got {quote(value)}")
    return value


@dataclass(frozen=True)
class ReportParams:
    """params.yaml ``report``, checked: the shares the activation, per-context and accuracy-matrix
    figures show."""

    activation_pct: str
    contexts_pct: str = "25"
    matrix_pct: str = "100"  # all the training users, the tables' last row
    # the heterogeneous table's methods, align's α and the settings line; () without a
    # ``heterogeneity`` section
    hetero_methods: tuple[str, ...] = ()
    alphas: tuple[float, ...] = ()
    hetero_settings: str = ""
    datasets: tuple[str, ...] = DATASETS  # params.yaml datasets / continual_datasets
    continual: tuple[str, ...] = DATASETS
    user_classes: Mapping[str, int] = field(default_factory=dict)  # imports.<name>.classes counts
    budget: BudgetSpec | None = None  # params.yaml budget: every assess file read must be of it
    # What each input must have been computed with, by params.yaml key (esnfed_stages/provenance.py;
    # empty without the section): reports/ttest.json, a heterogeneous method's assess file and
    # runs/privacy/<dataset>.json (the flower results: ``budget``).
    ttest_record: Mapping[str, Any] = field(default_factory=dict)
    hetero_record: Mapping[str, Any] = field(default_factory=dict)
    privacy_record: Mapping[str, Any] = field(default_factory=dict)
    # params.yaml study_datasets: the deep and heterogeneous tables' datasets and the flower results read
    studies: tuple[str, ...] = DATASETS
    # the selected-hyperparameters table (selected.md): plasticity.mu and .eta (fixed, not searched) and
    # retrain.lambda (how each retrain's λ was chosen); None where params.yaml has no such key
    mu: float | None = None
    eta: float | None = None
    retrain_lambda: str | None = None
    privacy_extra: tuple[str, ...] = ()  # params.yaml privacy.extra_methods: their documents join the table
    privacy_fractions: tuple[float, ...] = ()  # params.yaml privacy.sampling_study.fractions: privacy-sampling.md
    # the λ values a stationary retrain tries on the validation users (ValidationSizes.lambda_grid)
    lambda_grid: int | None = None
    # opt-in report.<table>_protocol: paper tables under their paper's protocol (protocol_tables.py)
    protocols: tuple[TableSpec, ...] = ()


def report_params(params: Mapping[str, Any]) -> ReportParams:
    """The ``report`` section of the loaded params (and the heterogeneous table's from
    ``heterogeneity``), with what its inputs must have been computed with (``ttest``,
    ``heterogeneity``, ``privacy``, ``budget``)."""
    methods = hetero_table_methods(params)
    alphas, settings, hetero = (), "", {}
    if methods:
        hp = hetero_params(params)
        alphas, hetero = hp.alphas, hp.record
        settings = (f"Heterogeneity: mode {hp.mode}" + (f" (per client: {', '.join(hp.vary)})" if hp.vary else "")
                    + f", seed {hp.seed}, ensemble combination {hp.combine}, α {', '.join(f'{a:g}' for a in alphas)}")
    return ReportParams(_share(params, "report.activation_pct"),
                        _share(params, "report.contexts_pct", default="25"),
                        _share(params, "report.matrix_pct", default="100"), methods, alphas, settings,
                        declared(params), continual_declared(params),
                        {**{name: len(v["classes"]) for name, v in (params.get("imports") or {}).items()
                            if isinstance(v, Mapping) and v.get("classes")},
                         **{name: n_classes(base) for name in declared(params)  # a variant: its base's classes
                            if (base := variant_base(params, name)) is not None}}, budget_spec(params),
                        ttest_params(params).record if "ttest" in params else {}, hetero,
                        privacy_params(params).record(params.get("budget"), extra=True, study=True)
                        if "privacy" in params else {},
                        study_declared(params), *_selection_settings(params),
                        privacy_extra=privacy_params(params).extra_methods if "privacy" in params else (),
                        privacy_fractions=privacy_params(params).study_fractions if "privacy" in params else (),
                        lambda_grid=_lambda_grid(params),
                        protocols=protocol_tables.specs(params))


def _selection_settings(params: Mapping[str, Any]) -> tuple[float | None, float | None, str | None]:
    """plasticity.mu, plasticity.eta and retrain.lambda as the selected table prints them (None
    where params.yaml has no such key; the experiment stages checked them where it has)."""
    plasticity, retrain = params.get("plasticity"), params.get("retrain")
    plasticity = plasticity if isinstance(plasticity, Mapping) else {}
    retrain = retrain if isinstance(retrain, Mapping) else {}
    return plasticity.get("mu"), plasticity.get("eta"), retrain.get("lambda")


def _lambda_values(params: Mapping[str, Any]) -> int | None:
    """|readout.lambdas|, None where params.yaml does not list them."""
    readout = params.get("readout")
    lambdas = readout.get("lambdas") if isinstance(readout, Mapping) else None
    return len(lambdas) if isinstance(lambdas, list) else None


def _lambda_grid(params: Mapping[str, Any]) -> int | None:
    """|readout.lambdas| when retrain.lambda is select (each retrain scores every λ on the
    validation users), 0 when frozen, None where params.yaml does not say."""
    rule = _selection_settings(params)[2]
    if rule == "frozen":
        return 0
    return _lambda_values(params) if rule == "select" else None
