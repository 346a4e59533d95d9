"""The params of the select, retrain and assess stages, validated once into frozen objects:
the search budget and space, the fixed trial settings, the runner (backend, workers, BLAS threads,
device) and the command-line choices of dataset and shares; and the budget's name and digest that
best.json, the models and the assess files record and are checked against (BudgetSpec)."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from esnfed_core.continual_settings import CONTINUAL_BOUNDS, ContinualSettings
from esnfed_core.errors import ConfigError, DataError
from esnfed_core.metrics import BINS
from esnfed_core.ip_rule import IPSettings
from esnfed_core.method import Method
from esnfed_core.quote import quote
from esnfed_core.readout import LAMBDA, SOLVERS
from esnfed_core.reservoir import BATCH_SIZE
from esnfed_core.sampling import CLIENT_FRACTION, CONTEXT_POOL, FULL, KEY as SAMPLING_KEY, POOL_KEY, POOLS
from esnfed_core.search import RETRAINS, SEED, TRIALS, Dimension, parse_space
from esnfed_core.settings import RETRAIN_LAMBDA, Settings
from esnfed_core.validation import COUNT, Bound, ParameterError
from esnfed_core.vocabulary import BACKENDS, DATASETS, DEVICES, PCTS, REPLAY_POLICIES
from esnfed_stages.data._datasets import check_declared, declared
from esnfed_stages.params.hetero import HeteroParams, hetero_params
from esnfed_stages.params.processed import DataParams, data_params
from esnfed_stages.params.sections import check_keys as _check_keys, bounded, section


# The runner's ranges (the schema checks params.yaml against the same objects); n_jobs is also != 0.
RUNNER_BOUNDS = {"n_jobs": Bound(integer=True, low=-64), "blas_threads": COUNT}


@dataclass(frozen=True)
class RunnerConfig:
    """How trials are dispatched: joblib backend, worker count, BLAS threads per worker, and the
    device of the ESN methods' kernels (cpu = numpy; torch-cpu / cuda = batched torch)."""

    backend: str = "loky"
    n_jobs: int = 2
    blas_threads: int = 1
    device: str = "cpu"
    tf32: bool = False
    fused_ip_sums: bool = False

    def __post_init__(self) -> None:
        if self.backend not in BACKENDS:
            raise ConfigError(f"runner.backend: unknown backend {quote(self.backend)} (expected {', '.join(BACKENDS)})")
        bounded("runner.n_jobs", self.n_jobs, RUNNER_BOUNDS["n_jobs"])
        if self.n_jobs == 0:
            raise ConfigError("runner.n_jobs: must not be 0 (use a positive count, or -1 for all cores)")
        bounded("runner.blas_threads", self.blas_threads, RUNNER_BOUNDS["blas_threads"])
        if self.device not in DEVICES:
            raise ConfigError(f"runner.device: unknown device {quote(self.device)} (expected {', '.join(DEVICES)})")
        if not isinstance(self.tf32, bool):
            raise ConfigError(f"params.yaml: 'runner.tf32' must be true or false, got {quote(self.tf32)}")
        if not isinstance(self.fused_ip_sums, bool):
            raise ConfigError(f"params.yaml: 'runner.fused_ip_sums' must be true or false, got {quote(self.fused_ip_sums)}")

    def with_overrides(self, backend: str | None = None, n_jobs: int | None = None,
                       device: str | None = None) -> "RunnerConfig":
        """This config with command-line overrides (None keeps the params' value)."""
        changes = {k: v for k, v in (("backend", backend), ("n_jobs", n_jobs), ("device", device))
                   if v is not None}
        return replace(self, **changes) if changes else self


@dataclass(frozen=True)
class ExperimentParams:
    """The experiment sections of params.yaml, validated."""

    seed: int
    budget: str
    trials: int
    retrains: int
    space: Mapping[str, Any]
    settings: Settings
    runner: RunnerConfig
    activation_bins: int
    activation_datasets: tuple[str, ...]
    # params.yaml ``heterogeneity`` (esnfed_stages.experiment.heterogeneity); None without the section
    heterogeneity: HeteroParams | None = None
    # per declared dataset, the import or preprocess settings its manifest must record (a folder
    # written under others is refused where it is opened: esnfed_stages/params/processed.py)
    processed: Mapping[str, DataParams] = field(default_factory=dict)

    def method_space(self, dataset: str, method: Method) -> list[Dimension]:
        """The dimensions a stationary method searches: the dataset's reservoir space, plus the
        method's own space for IP methods (space.ip / space.fedip) and deep ones (space.deep)."""
        if method.baseline:
            return []
        where = f"budgets.{self.budget}.space"
        dims = parse_space(self.space.get(dataset), f"{where}.{dataset}")
        if not dims:
            raise ConfigError(f"{where}.{dataset}: missing or empty search space")
        # Shared names draw the same values at the same trial index (esnfed_core.search): deep and
        # shallow trials share ρ, leak, scaling; select then fixes a deep method's units to its
        # shallow counterpart's selected units (select.pin_units).
        for name in space_names(dataset, method)[1:]:
            extra = parse_space(self.space.get(name), f"{where}.{name}")
            clash = {d.name for d in dims} & {d.name for d in extra}
            if clash:
                raise ConfigError(f"{where}.{name}: redefines {', '.join(sorted(clash))} of {where}.{dataset}")
            dims = sorted(dims + extra, key=lambda d: d.name)
        missing = set(method.config_keys) - {d.name for d in dims}
        if missing:
            raise ConfigError(f"{where}: {method.id} needs {', '.join(sorted(missing))} in its search space")
        return dims

    def on_device(self, device: str) -> "ExperimentParams":
        """These params with the trials' kernels on ``device`` (--device overrides runner.device)."""
        runner = replace(self.runner, device=device)
        return replace(self, runner=runner, settings=replace(self.settings, device=runner.device))

    def n_trials(self, method: Method) -> int:
        # The random baseline has nothing to search: one trial records its validation score.
        return 1 if method.baseline else self.trials

    @property
    def budget_spec(self) -> "BudgetSpec":
        """params.yaml's budget with what its artefacts' digest covers (:class:`BudgetSpec`)."""
        return BudgetSpec(self.budget, self.seed, self.trials, self.retrains, self.space)


def space_names(dataset: str, method: Method) -> list[str]:
    """The entries of ``budgets.<budget>.space`` a stationary ``method`` searches on ``dataset``:
    the dataset's reservoir space, then the method's own (:attr:`Method.spaces`: space.ip /
    space.fedip for IP methods, space.deep (layers) for deep ones; deep-fedip both)."""
    return [dataset, *method.spaces]


@dataclass(frozen=True)
class BudgetSpec:
    """params.yaml's ``budget``: its name and what of ``budgets.<name>`` (and ``seed``) an artefact
    made under it depends on, so that a best.json, model or assess file made before the entry was
    edited by hand is told from one made under the entry as it is now, outside ``dvc repro`` too.

    Artefacts record the name and :meth:`digest` (:meth:`labels`); :meth:`check` refuses another
    name, or the same name with another digest. ``space`` None: the entry is unknown (ttest and
    report read params.yaml unvalidated, :func:`budget_spec`), the name alone is compared.
    """

    name: Any
    seed: Any = None
    trials: Any = None
    retrains: Any = None
    space: Mapping[str, Any] | None = None

    def digest(self, dataset: str, method: Method, *, assessed: bool = False) -> str | None:
        """16 hex digits of the sha256 of the canonical JSON of what selecting ``method`` on
        ``dataset`` drew from; None when the entry is unknown.

        That is ``seed`` (every trial's config and seed are drawn from it), ``trials`` and the
        space entries the method searches (:func:`space_names`): a change to any of them may
        select another config. A continual method draws from none of them (its trials are its
        base's best config over the budget grid, seeded by ``seed``): its digest is its base's.
        ``random`` has one trial and no space: its seed alone. The rest of the entry is left out,
        so an edit that cannot change this selection does not invalidate it: another dataset's
        space, another method's (space.fedip for ridge), and ``retrains`` (retrain k is the same
        model whatever the count, so a model keeps the digest of its selection). ``assessed``: an
        assess file holds ``retrains`` scores per share, so its digest adds ``retrains``. Values
        are hashed as written: ``1`` and ``1.0`` differ (a needless rerun, never a missed one).
        """
        if self.space is None:
            return None
        content: dict[str, Any] = self._selection(dataset, method)
        if assessed:
            content["retrains"] = self.retrains
        text = json.dumps(content, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]

    def _selection(self, dataset: str, method: Method) -> dict[str, Any]:
        if method.continual:
            return self._selection(dataset, Method.parse(str(method.base)))
        if method.baseline:
            return {"seed": self.seed}
        space = self.space or {}
        return {"seed": self.seed, "trials": self.trials,
                "space": {name: space.get(name) for name in space_names(dataset, method)}}

    def labels(self, key: str, dataset: str, method: Method, *, assessed: bool = False) -> dict[str, Any]:
        """What an artefact records: ``key`` (the name) and ``<key>_digest``."""
        return {key: self.name, f"{key}_digest": self.digest(dataset, method, assessed=assessed)}

    def check(self, path: Path, record: Mapping[str, Any], key: str, verb: str, dataset: str, method: Method,
              rerun: str, *, assessed: bool = False) -> None:
        """One DataError naming ``path`` when ``record`` was ``verb`` (selected, retrained,
        assessed) under another budget than this one: another ``key`` (name), or the same name
        with another ``<key>_digest``; then what differs and ``rerun``, the command(s) to rerun.
        A record without them (written before they were recorded) is trusted."""
        name = record.get(key, self.name)
        if name != self.name:
            raise DataError(f"{path}: {verb} under budget {quote(name)} but params.yaml's budget is "
                            f"{quote(self.name)}: rerun {rerun}")
        mine = self.digest(dataset, method, assessed=assessed)
        if mine is not None and record.get(f"{key}_digest", mine) != mine:
            what = "search space, trials, retrains or seed" if assessed else "search space, trials or seed"
            raise DataError(f"{path}: {verb} under budget {quote(name)} with another {what} than "
                            f"params.yaml's now: rerun {rerun}")


def budget_spec(params: Mapping[str, Any]) -> BudgetSpec | None:
    """params.yaml's budget as ttest and report compare it, unvalidated (they run no search): None
    without a ``budget``; the name alone when ``budgets.<name>`` is not a mapping with a space."""
    name = params.get("budget")
    if name is None:
        return None
    budgets = params.get("budgets")
    entry = budgets.get(name) if isinstance(budgets, Mapping) and isinstance(name, str) else None
    if not isinstance(entry, Mapping) or not isinstance(entry.get("space"), Mapping):
        return BudgetSpec(name)
    return BudgetSpec(name, params.get("seed"), entry.get("trials"), entry.get("retrains"), entry["space"])


def _choice(key: str, value: Any, allowed: Sequence[str]) -> str:
    if not isinstance(value, str) or value not in allowed:
        raise ConfigError(f"params.yaml: '{key}' must be one of {', '.join(allowed)}, got {quote(value)}")
    return value


def _get(params: Mapping[str, Any], key: str, allowed: Sequence[str]) -> Mapping[str, Any]:
    return _check_keys(key, section(params, key), allowed)


def _plasticity(params: Mapping[str, Any]) -> IPSettings:
    """The ``plasticity`` section as the core's IPSettings (its bounds: IP_BOUNDS, checked there)."""
    fields = ("mu", "eta", "batch_size", "normalize_step")
    _get(params, "plasticity", fields)
    try:  # every field explicit: the params file documents the run
        return IPSettings(**{k: section(params, f"plasticity.{k}") for k in fields})
    except ParameterError as exc:
        raise ConfigError(f"params.yaml: plasticity.{exc}") from None


def _continual(params: Mapping[str, Any]) -> ContinualSettings:
    """The ``continual`` section as the core's ContinualSettings (its bounds: CONTINUAL_BOUNDS)."""
    _get(params, "continual", ("lambda", "naive", "replay", "joint"))
    _get(params, "continual.naive", ())
    replay = _get(params, "continual.replay", ("fraction", "batch", "shuffle", "policy"))
    _get(params, "continual.joint", ("patience", "max_rounds"))
    cb = CONTINUAL_BOUNDS

    def value(key: str, bound: str, kind: type) -> Any:
        v = section(params, f"continual.{key}")
        if v is None and key in ("joint.patience", "joint.max_rounds"):  # None: the protocol's patience, no cap
            return None
        return kind(bounded(f"continual.{key}", v, cb[bound]))

    shuffle = section(params, "continual.replay.shuffle")
    if not isinstance(shuffle, bool):
        raise ConfigError(f"params.yaml: continual.replay.shuffle: expected true or false, got {quote(shuffle)}")
    # optional: absent = uniform, the authors' buffer (PROTOCOL §5)
    policy = _choice("continual.replay.policy", replay.get("policy", "uniform"), REPLAY_POLICIES)
    return ContinualSettings(
        lam=value("lambda", "lambda", float), replay_fraction=value("replay.fraction", "replay_fraction", float),
        replay_batch=value("replay.batch", "replay_batch", int), replay_shuffle=shuffle, replay_policy=policy,
        joint_patience=value("joint.patience", "patience", int),
        joint_max_rounds=value("joint.max_rounds", "max_joint_rounds", int))


def _client_fraction(params: Mapping[str, Any]) -> float:
    """``federated.client_fraction`` (optional section and key: absent = 1, every client in every
    round, the papers' runs), checked against the core's CLIENT_FRACTION."""
    if "federated" not in params:
        return FULL
    fed = _get(params, "federated", ("client_fraction", "sampling_pool"))
    return float(bounded(SAMPLING_KEY, fed.get("client_fraction", FULL), CLIENT_FRACTION))


def _sampling_pool(params: Mapping[str, Any]) -> str:
    """``federated.sampling_pool`` (optional: absent = context, FedCLIP's rounds draw among a
    context's participants; roster: among all training clients, esnfed_core.sampling)."""
    if "federated" not in params:
        return CONTEXT_POOL
    fed = _get(params, "federated", ("client_fraction", "sampling_pool"))
    return _choice(POOL_KEY, fed.get("sampling_pool", CONTEXT_POOL), POOLS)


def experiment_params(params: Mapping[str, Any]) -> ExperimentParams:
    """Validate and read the experiment sections; every error names the offending key."""
    seed = bounded("seed", section(params, "seed"), SEED)
    budget = section(params, "budget")
    budgets = section(params, "budgets")
    if not isinstance(budgets, Mapping) or not budgets:
        raise ConfigError("params.yaml: 'budgets' must be a non-empty mapping of budget name -> settings")
    if not isinstance(budget, str) or budget not in budgets:
        raise ConfigError(f"params.yaml: 'budget' is {quote(budget)}, expected one of {', '.join(map(str, budgets))}")
    b = _get(params, f"budgets.{budget}", ("trials", "retrains", "space"))
    trials = bounded(f"budgets.{budget}.trials", section(b, "trials"), TRIALS)
    retrains = bounded(f"budgets.{budget}.retrains", section(b, "retrains"), RETRAINS)
    space = _check_keys(f"budgets.{budget}.space", section(b, "space"),
                        tuple(dict.fromkeys(DATASETS + declared(params) + tuple(params.get("imports") or ())))
                        + ("ip", "fedip", "deep"))  # a user dataset's space may stay while it is not in datasets

    ro = _get(params, "readout", ("lambdas", "batch_size", "solver", "bias"))
    lambdas = section(ro, "lambdas")
    if not isinstance(lambdas, list) or not lambdas:
        raise ConfigError("params.yaml: 'readout.lambdas' must be a non-empty list")
    lambdas = tuple(float(bounded("readout.lambdas", v, LAMBDA)) for v in lambdas)
    batch = int(bounded("readout.batch_size", section(ro, "batch_size"), BATCH_SIZE))
    solver = _choice("readout.solver", section(ro, "solver"), SOLVERS)
    readout_bias = ro.get("bias", False)  # optional: absent = false, the authors' code (PROTOCOL §2)
    if not isinstance(readout_bias, bool):
        raise ConfigError(f"params.yaml: 'readout.bias' must be true or false, got {quote(readout_bias)}")
    retrain_lambda = _choice("retrain.lambda", section(_get(params, "retrain", ("lambda",)), "lambda"),
                             RETRAIN_LAMBDA)

    ip, continual = _plasticity(params), _continual(params)
    rn = _get(params, "runner", ("backend", "n_jobs", "blas_threads", "device", "tf32", "fused_ip_sums"))
    runner = RunnerConfig(str(section(rn, "backend")), section(rn, "n_jobs"), section(rn, "blas_threads"),
                          str(rn.get("device", "cpu")), rn.get("tf32", False),  # optional keys
                          rn.get("fused_ip_sums", False))
    settings = Settings(lambdas=lambdas, batch_size=batch, ip=ip, continual=continual,
                        device=runner.device, tf32=runner.tf32, fused_ip_sums=runner.fused_ip_sums, solver=solver, retrain_lambda=retrain_lambda,
                        readout_bias=readout_bias, client_fraction=_client_fraction(params),
                        sampling_pool=_sampling_pool(params))

    asx = _get(params, "assess", ("activation_bins", "activation_datasets"))
    bins = int(bounded("assess.activation_bins", section(asx, "activation_bins"), BINS))
    act_ds = section(asx, "activation_datasets")
    if not isinstance(act_ds, list) or any(d not in DATASETS for d in act_ds):
        raise ConfigError(f"params.yaml: 'assess.activation_datasets' must be a list of {', '.join(DATASETS)}")
    het = hetero_params(params) if "heterogeneity" in params else None
    processed = {ds: d for ds in declared(params) if (d := data_params(params, ds)) is not None}
    return ExperimentParams(seed, budget, trials, retrains, space, settings, runner, bins, tuple(act_ds), het,
                            processed)


def parse_pcts(pct: str) -> list[str]:
    """``--pct``: one share or "all"."""
    if pct == "all":
        return list(PCTS)
    if pct not in PCTS:
        raise ConfigError(f"--pct: expected one of {', '.join(PCTS)} or all, got {quote(pct)}")
    return [pct]


def parse_dataset(dataset: str, params: Mapping[str, Any] | None = None) -> str:
    """``--dataset``: one of the datasets params.yaml declares (without params, the papers')."""
    if params is not None:
        return check_declared(params, dataset)
    if dataset not in DATASETS:
        raise ConfigError(f"--dataset: expected one of {', '.join(DATASETS)}, got {quote(dataset)}")
    return dataset
