"""One trial of one method as a pure function: build the reservoir from (config, seed), train it
with the method (ridge, IncFed, FedAvg, IP, FedIP, CLIP, FedCLIP or the random baseline), score.

No I/O: inputs are arrays (:class:`TrialData`), outputs a :class:`FittedModel`. The same inputs
give the same bits, so trials can run in any process, in any order, on any joblib backend.
Method ids and what they train: :mod:`esnfed_core.method`; the fixed settings of every trial:
:mod:`esnfed_core.settings`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from esnfed_core.data.processed import UserData
from esnfed_core.data.windows import concat
from esnfed_core.errors import ConfigError
from esnfed_core.federated import Client, fedavg, fedip, incfed
from esnfed_core.ip_rule import IPConfig
from esnfed_core.messages import CommLedger, ReadoutMessage, StatsMessage
from esnfed_core.method import CONNECTIVITY_KEYS, Method
from esnfed_core.readout import Counts, StatsAccumulator, solve
from esnfed_core.reservoir import CONNECTIVITY_BOUNDS, Reservoir, ReservoirConfig, build_reservoir
from esnfed_core.sampling import FULL
from esnfed_core.scoring import pooled_counts, random_accuracy
from esnfed_core.settings import Settings

__all__ = ["TrialData", "FittedModel", "fit", "sub_seeds", "make_reservoir", "communication", "SEED_NAMES"]

# Named sub-seeds of a trial seed, in SeedSequence order (adding a name at the end keeps the others).
SEED_NAMES = ("reservoir", "ip", "validation", "test", "train")


@dataclass(frozen=True, eq=False)
class TrialData:
    """The users a trial sees: training clients (in partition order) and validation users."""

    train: Mapping[str, UserData]
    validation: Mapping[str, UserData]
    n_classes: int
    n_contexts: int

    @property
    def n_inputs(self) -> int:
        return next(iter(self.train.values())).x.shape[2]


@dataclass(frozen=True, eq=False)
class FittedModel:
    """A trained model and what its training measured.

    ``readout`` is (C, N) float64 ((C, N+1), the last column the bias, with readout.bias); continual
    methods also keep the model after each context in ``context_gain``/``context_bias`` (T, N) and
    ``context_readout`` (T, C, N) ((T, C, N+1) with readout.bias). ``validation``
    holds the selection scores when the trial scored on validation users (``score`` is the one
    model selection maximises). ``communication`` totals every message of a federated method.
    """

    method: str
    seed: int
    config: dict[str, Any]
    n_classes: int
    seeds: dict[str, int]
    reservoir: Reservoir | None = None
    readout: np.ndarray | None = None
    lam: float | None = None
    context_gain: np.ndarray | None = None
    context_bias: np.ndarray | None = None
    context_readout: np.ndarray | None = None
    communication: dict[str, int] | None = None
    validation: dict[str, Any] | None = None
    ip_rounds: list[int] | None = None  # continual: IP rounds (epochs) behind each context's model
    joint_capped: list[bool] | None = None  # joint: per context, whether continual.joint.max_rounds ended it
    # Heterogeneous methods: each client's reservoir (align: aligned to ``reservoir``, the target,
    # with the shared ``readout``), local/ensemble: each client's readout (C, N_c), and each
    # client's drawn hyperparameters.
    clients: tuple[Reservoir, ...] | None = None
    client_readouts: tuple[np.ndarray, ...] | None = None
    client_configs: tuple[dict, ...] | None = None
    @property
    def score(self) -> float:
        if self.validation is None:
            raise ValueError("model was fitted without validation scores")
        return float(self.validation["score"])

    def context_reservoirs(self) -> list[Reservoir]:
        """The reservoir after each context (continual methods)."""
        if self.context_gain is None or self.reservoir is None:
            raise ValueError(f"{self.method}: not a continual model")
        return [self.reservoir.with_ip(g, b) for g, b in zip(self.context_gain, self.context_bias)]

    def predictor(self, context: int | None = None) -> tuple[Reservoir, np.ndarray]:
        """The (reservoir, readout) that classifies new windows: the trained one; a continual
        model's after ``context`` (default: after the last context, the model assess scores).
        ConfigError for a model without one reservoir and readout (the random baseline; the
        heterogeneous methods, whose clients each keep their own reservoir)."""
        if self.clients is not None or self.reservoir is None or self.readout is None:
            raise ConfigError(f"{self.method}: no single trained reservoir and readout to apply (the random "
                              "baseline has none; local, ensemble and align keep one per client)")
        if self.context_gain is None:
            if context is not None:
                raise ConfigError(f"{self.method}: not a continual model, it has no model per context")
            return self.reservoir, self.readout
        n = len(self.context_gain)
        t = n - 1 if context is None else context
        if not 0 <= t < n:
            raise ConfigError(f"context: expected 0..{n - 1} (the model after each of its {n} contexts), got {t}")
        return self.reservoir.with_ip(self.context_gain[t], self.context_bias[t]), self.context_readout[t]


def sub_seeds(seed: int) -> dict[str, int]:
    """Independent named seeds of one trial (reservoir weights, IP shuffling, random baselines)."""
    state = np.random.SeedSequence(int(seed)).generate_state(len(SEED_NAMES), np.uint32)
    return {name: int(s) for name, s in zip(SEED_NAMES, state)}


def check_config(method: Method, config: Mapping[str, Any], *, need_lambda: bool = False) -> None:
    keys = method.config_keys + (("lambda",) if need_lambda else ())
    missing = [k for k in keys if k not in config]
    if missing:
        raise ConfigError(f"config of {method.id}: missing hyperparameter(s) {', '.join(missing)}")


def make_reservoir(config: Mapping[str, Any], n_inputs: int, seed: int | np.random.Generator) -> Reservoir:
    """The trial's reservoir: shallow, or deep when ``config`` has ``layers`` (``units`` split over
    the layers, ρ, leak and input scaling shared; esnfed_core.deep.DeepConfig.shared); sparse when
    ``config`` has ``input_connectivity`` / ``recurrent_connectivity`` (every layer alike)."""
    sparse = {k: config[k] for k in CONNECTIVITY_KEYS if k in config}
    for key, value in sparse.items():  # a key present is a number (None would silently mean dense)
        CONNECTIVITY_BOUNDS[key].check(key, value)
    if "layers" in config:
        from esnfed_core.deep import DeepConfig, build_deep_reservoir  # noqa: PLC0415 (deep trials only)

        return build_deep_reservoir(DeepConfig.shared(
            n_inputs, int(config["units"]), int(config["layers"]), float(config["spectral_radius"]),
            float(config["leak"]), float(config["input_scaling"]), **sparse), seed)
    rc = ReservoirConfig(
        n_inputs=n_inputs, units=int(config["units"]), spectral_radius=float(config["spectral_radius"]),
        leak=float(config["leak"]), input_scaling=float(config["input_scaling"]), **sparse,
    )
    return build_reservoir(rc, seed)


def communication(ledger: CommLedger, n_clients: int, readout_bias: bool = False) -> dict[str, Any]:
    """Totals over every algorithm in the ledger (rounds add up: FedIP rounds + the IncFed round).

    The one-off reservoir broadcast is excluded (the ledger's default), as in PROTOCOL's counts.
    ``readout_bias`` (readout.bias: the readouts have N+1 columns) is recorded as
    ``"readout_bias": true`` for the analytic counts (esnfed_core/communication.py), absent when false.
    """
    out = {"up_floats": 0, "up_bytes": 0, "down_floats": 0, "down_bytes": 0, "rounds": 0}
    for algo in sorted({e.algorithm for e in ledger.entries}):
        for k, v in ledger.totals(algo).items():
            out[k] += v
    out["clients"] = int(n_clients)
    if readout_bias:  # absent when off: the documents of every default run stay as they were
        out["readout_bias"] = True
    return out


def fit(
    method: str | Method,
    config: Mapping[str, Any],
    seed: int,
    data: TrialData,
    settings: Settings,
    *,
    score: bool = True,
) -> FittedModel:
    """Train ``method`` with ``config`` from ``seed`` on ``data.train``.

    With ``score`` the model is scored on ``data.validation`` (and for stationary ESN methods λ is
    chosen there from ``settings.lambdas`` unless ``config`` fixes ``lambda``); without it, the
    stationary methods need ``config["lambda"]`` and nothing touches the validation users except
    joint continual training (whose early stopping is part of the method).

    This is the numpy path: settings that put a stationary method on the torch kernels
    (``settings.accelerated``) are refused; those trials run batched through
    :func:`esnfed_core.accel.trials.fit_batch`, which builds on this module.
    """
    m = method if isinstance(method, Method) else Method.parse(method)
    check_config(m, config, need_lambda=not score and m.selects_lambda)
    seeds = sub_seeds(seed)
    cfg = dict(config)
    if m.baseline:
        return fit_random(m, cfg, int(seed), seeds, data, score)
    if m.heterogeneous:  # the family picks the path (esnfed_core.methods.Family.fit)
        raise ConfigError(f"{m.id}: a heterogeneous method trains through esnfed_core.heterogeneous.fit "
                          "(one reservoir per client), not the shared-reservoir trial")
    if settings.accelerated(m):  # the family picks the path (esnfed_core.methods.Family.fit)
        raise ConfigError(f"runner.device: fit is the numpy path; {m.id} on {settings.device} runs "
                          "through esnfed_core.accel.trials.fit_batch")
    if m.continual:
        return fit_continual(m, cfg, int(seed), seeds, data, settings, score)
    return _fit_stationary(m, cfg, int(seed), seeds, data, settings, score)


def fit_random(m: Method, cfg: dict, seed: int, seeds: dict, data: TrialData, score: bool) -> FittedModel:
    """The random baseline's trial: no model; with ``score``, its accuracy on the validation users."""
    val = None
    if score:
        acc = random_accuracy(list(data.validation.values()), data.n_classes, seeds["validation"])
        val = {"score": acc, "accuracy": acc}
    return FittedModel(m.id, seed, cfg, data.n_classes, seeds, validation=val)


def clients_of(data: TrialData, settings: Settings, cls: type[Client] = Client) -> list[Client]:
    """The training users as federated clients streaming and solving with ``settings``."""
    return [cls(name, u.x, u.y, data.n_classes, settings.batch_size, settings.solver, settings.readout_bias)
            for name, u in data.train.items()]


class StatsOnceClient(Client):
    """A FedAvg client that computes its ridge statistics once per reservoir, so trying every λ
    of the grid costs one pass over its windows instead of one per λ (messages are unchanged)."""

    _cached: tuple[Reservoir, StatsMessage] | None = None

    def preset(self, res: Reservoir, msg: StatsMessage) -> None:
        """Use ``msg`` as this client's statistics for ``res`` (computed elsewhere, e.g. batched)."""
        self._cached = (res, msg)

    def fit_stats(self, res: Reservoir) -> StatsMessage:
        if self._cached is None or self._cached[0] is not res:
            self._cached = (res, super().fit_stats(res))
        return self._cached[1]

    def fit_readout(self, res: Reservoir, lam: float) -> ReadoutMessage:
        return ReadoutMessage(solve(self.fit_stats(res).stats, lam, self.solver),
                              num_examples=self.num_examples)


def _pooled_stats(res: Reservoir, users: Sequence[UserData], n_classes: int, batch_size: int,
                  bias: bool = False):
    """Centralised ridge: one accumulator over every training window (the pooled data set)."""
    acc = StatsAccumulator(res.units, n_classes, bias)
    for u in users:
        acc.add_windows(res, u.x, u.y, batch_size)
    return acc.result()


def _ip_config(cfg: Mapping[str, Any], settings: Settings) -> IPConfig:
    return settings.ip.config(float(cfg["sigma"]))


def _fit_stationary(m: Method, cfg: dict, seed: int, seeds: dict, data: TrialData,
                    settings: Settings, score: bool) -> FittedModel:
    res = make_reservoir(cfg, data.n_inputs, seeds["reservoir"])
    ledger = CommLedger() if m.federated else None
    users = list(data.train.values())
    if m.uses_ip and not m.federated:  # IP epochs on the pooled windows
        from esnfed_core.plasticity import train_ip  # noqa: PLC0415

        pooled = concat([u.x for u in users])  # lazy when the users' windows are on disk
        res = train_ip(res, pooled, _ip_config(cfg, settings), epochs=int(cfg["rounds"]), seed=seeds["ip"])
        del pooled
    elif m.uses_ip:  # FedIP rounds (deep-fedip too, on the deep reservoir)
        res = fedip(res, [u.x for u in users], _ip_config(cfg, settings), rounds=int(cfg["rounds"]),
                        local_epochs=int(cfg["local_epochs"]), seed=seeds["ip"], ledger=ledger,
                        client_names=list(data.train), client_fraction=settings.fraction_for(m))
    fixed = "lambda" in cfg
    lambdas = [float(cfg["lambda"])] if fixed else [float(x) for x in settings.lambdas]

    fed_ledgers: list[CommLedger] = []
    aggregation = m.family.aggregation
    if aggregation == "pooled":
        readouts = solve(_pooled_stats(res, users, data.n_classes, settings.batch_size,
                                       settings.readout_bias), lambdas, settings.solver)
    elif aggregation == "incfed":
        readouts = incfed(res, clients_of(data, settings), lambdas, ledger=ledger,
                          solver=settings.solver).readouts
    else:  # fedavg: one FedAvg round per λ of the grid, each with its own message ledger
        clients = clients_of(data, settings, StatsOnceClient)
        fed_ledgers = [CommLedger() for _ in lambdas]
        readouts = np.stack([fedavg(res, clients, lam, ledger=lg) for lam, lg in zip(lambdas, fed_ledgers)])

    counts = pooled_counts(res, list(data.validation.values()), readouts, settings.batch_size) if score else None
    return stationary_model(m, cfg, seed, seeds, data, res, readouts, lambdas, ledger, fed_ledgers, counts,
                            client_fraction=settings.fraction_for(m))


def stationary_model(m: Method, cfg: dict, seed: int, seeds: dict, data: TrialData, res: Reservoir,
                     readouts: np.ndarray, lambdas: list[float], ledger: CommLedger | None,
                     fed_ledgers: list[CommLedger], counts: Counts | None,
                     client_fraction: float = FULL) -> FittedModel:
    """The FittedModel of a stationary trial from its readouts (L, C, N) for ``lambdas`` and, when
    it was scored, the validation ``counts``: λ is the first best (the given one when fixed).
    ``client_fraction`` < 1 (FedIP's sampled rounds) is recorded with the message counts.
    Shared by the numpy path and the batched accelerator path (esnfed_core.accel.trials)."""
    best, val = select_lambda(counts, lambdas)
    if fed_ledgers:
        ledger = fed_ledgers[best]
    lam = lambdas[best]
    cfg = {**cfg, "lambda": lam}
    comm = communication(ledger, len(data.train), readout_bias=readouts.shape[-1] == res.units + 1) \
        if ledger is not None else None
    if comm is not None and client_fraction != FULL:  # absent at 1: default records stay as they were
        comm["client_fraction"] = client_fraction
    return FittedModel(m.id, seed, cfg, data.n_classes, seeds, reservoir=res,
                       readout=np.asarray(readouts[best], np.float64), lam=lam,
                       communication=comm, validation=val)


def select_lambda(counts: Counts | None, lambdas: list[float]) -> tuple[int, dict[str, Any] | None]:
    """The index of the first best λ on the validation ``counts`` (0 when not scored) and the
    validation record (score, accuracy, lambda, per_lambda), or None when not scored."""
    if counts is None:
        return 0, None
    per_lambda = counts.accuracy
    best = int(np.argmax(per_lambda))  # first maximum: the smallest λ among ties
    return best, {"score": float(per_lambda[best]), "accuracy": float(per_lambda[best]),
                  "lambda": lambdas[best], "per_lambda": [float(a) for a in per_lambda]}


def _contexts(users: Sequence[UserData], n_contexts: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """Per context: the pooled (x, y) of ``users`` (x stays lazy when it is on disk)."""
    out = []
    for t in range(n_contexts):
        p = UserData.concat([u.of_context(t) for u in users])
        out.append((p.x, p.y))
    return out


def continual_contexts(m: Method, data: TrialData) -> tuple[list, list, list]:
    """(train [client][context] splits, validation [user][context] splits, validation [context]
    splits pooled over the users) of a continual trial: FedCLIP has one client per training user,
    CLIP one client holding the pooled windows. Joint's early stopping counts the validation users
    one by one and sums the counts (as a federated server sums its evaluation nodes' counts,
    esnfed_flower/fedclip_joint.py, so both compute the same products); the trial's score
    (the validation stream accuracy) is taken on the pooled contexts."""
    users = list(data.train.values())
    federated = m.federated
    train = [_contexts([u], data.n_contexts) for u in users] if federated else [_contexts(users, data.n_contexts)]
    validation = list(data.validation.values())
    return (train, [_contexts([u], data.n_contexts) for u in validation],
            _contexts(validation, data.n_contexts))


def ip_senders(ledger: CommLedger, context_rounds: Sequence[int]) -> list[int]:
    """The client-rounds that uploaded FedCLIP (g, b) at each context (the rounds are numbered
    across the run, ``context_rounds[t]`` of them at context t), from the ledger."""
    from esnfed_core.continual import ALGORITHM  # noqa: PLC0415

    ups = [e.round for e in ledger.entries if e.algorithm == ALGORITHM and e.direction == "up"]
    ends = np.cumsum(context_rounds)
    return [sum(1 for r in ups if end - n <= r < end) for n, end in zip(context_rounds, ends)]


def fit_continual(m: Method, cfg: dict, seed: int, seeds: dict, data: TrialData, settings: Settings,
                  score: bool, *, engine=None, contexts: tuple[list, list] | None = None,
                  server: dict[str, Any] | None = None) -> FittedModel:
    """A continual trial through run_continual; ``engine`` (default: numpy) runs its heavy work,
    ``contexts`` are :func:`continual_contexts` when the caller shares them between trials;
    ``server``: the federated server's hooks (ContinualConfig ``aggregate``, ``readout``: DP-FedCLIP)."""
    from esnfed_core.continual import NUMPY_ENGINE, ContinualConfig, make_strategy, run_continual  # noqa: PLC0415

    cs = settings.continual
    res = make_reservoir(cfg, data.n_inputs, seeds["reservoir"])
    federated = m.federated
    train, validation, pooled = contexts if contexts is not None else continual_contexts(m, data)
    ledger = CommLedger() if federated else None
    strategy = make_strategy(
        m.strategy, budget=int(cfg.get("budget", 0)), replay_fraction=cs.replay_fraction,
        replay_batch=cs.replay_batch, replay_shuffle=cs.replay_shuffle,
        replay_policy=cs.replay_policy,
        patience=cs.joint_patience, max_joint_rounds=cs.joint_max_rounds,
    )
    config = ContinualConfig(federated, _ip_config(cfg, settings), data.n_classes,
                             local_epochs=int(cfg.get("local_epochs", 1)), lam=cs.lam,
                             seed=seeds["ip"], solver=settings.solver, bias=settings.readout_bias,
                             client_fraction=settings.fraction_for(m),
                             **({"sampling_pool": settings.sampling_pool} if settings.roster_for(m) else {}),
                             **(server or {}))
    result = run_continual(res, train, strategy, config, validation=validation,
                           evaluate={"validation": pooled} if score else None, ledger=ledger,
                           client_names=list(data.train) if federated else None,
                           engine=NUMPY_ENGINE if engine is None else engine)
    val = None
    if score:
        stream = np.asarray(result.stream_accuracy("validation"), np.float64)
        # PROTOCOL §6: centralised = mean stream accuracy over contexts, federated = after the last.
        sel = float(stream[-1]) if federated else float(stream.mean())
        val = {"score": sel, "accuracy": float(stream[-1]), "stream_accuracy": [float(s) for s in stream],
               "ip_rounds": [int(r) for r in result.ip_rounds]}
        if result.joint_trace:  # joint: the validation stream accuracy of every round, per context
            val["joint_trace"] = [[float(a) for a in tr] for tr in result.joint_trace]
            val["joint_capped"] = [bool(c) for c in result.joint_capped]
    last = result.reservoirs[-1]
    return FittedModel(
        m.id, seed, {**cfg, "lambda": cs.lam}, data.n_classes, seeds,
        reservoir=last, readout=np.asarray(result.readouts[-1], np.float64), lam=cs.lam,
        context_gain=np.stack([r.gain for r in result.reservoirs]),
        context_bias=np.stack([r.bias for r in result.reservoirs]),
        context_readout=np.stack([np.asarray(w, np.float64) for w in result.readouts]),
        communication=None if ledger is None else {
            **communication(ledger, len(data.train), readout_bias=config.bias),
            # who sent at each context, and how many IP rounds: the analytic message counts (a client
            # without windows at a context sends nothing there; esnfed_core/communication.py analytic_floats)
            "participants": [int(p) for p in result.participants],
            "context_rounds": [int(r) for r in result.context_rounds],
            # federated.client_fraction < 1: each IP round's clients were sampled (absent at 1)
            **({"client_fraction": settings.client_fraction} if settings.samples(m) else {}),
            # federated.sampling_pool roster: each round drew over all clients (absent at context) and
            # how many of the drawn had windows varies: the client-rounds that sent (g, b) per context
            **({"sampling_pool": settings.sampling_pool, "ip_senders": ip_senders(ledger, result.context_rounds)}
               if settings.roster_for(m) else {})},
        validation=val, ip_rounds=[int(r) for r in result.ip_rounds],
        joint_capped=[bool(c) for c in result.joint_capped] if m.stops_early else None,
    )
