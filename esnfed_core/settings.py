"""The fixed (not searched) settings of every trial, from params.yaml (:class:`Settings`), and
which of them a trial of a given method reads, so that they identify its result."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from esnfed_core.continual_settings import ContinualSettings
from esnfed_core.errors import ConfigError
from esnfed_core.ip_rule import IPSettings
from esnfed_core.method import Method
from esnfed_core.quote import quote
from esnfed_core.readout import check_solver
from esnfed_core.sampling import CLIENT_FRACTION, CONTEXT_POOL, FULL, KEY as SAMPLING_KEY, ROSTER_POOL, check_pool

RETRAIN_LAMBDA = ("select", "frozen")


@dataclass(frozen=True)
class Settings:
    """Fixed (not searched) parameters of every trial, from params.yaml."""

    lambdas: tuple[float, ...] = (1e-5, 1e-4, 1e-3, 1e-2, 0.1, 0.5, 1.0)
    batch_size: int = 256
    ip: IPSettings = field(default_factory=IPSettings)  # params.yaml plasticity (a mapping of it is converted)
    continual: ContinualSettings = field(default_factory=ContinualSettings)  # params.yaml continual
    # cpu: the numpy path; torch-cpu / cuda: the batched torch kernels (esnfed_core.accel) for the
    # ESN methods, stationary and continual (the random baseline, deep and heterogeneous reservoirs
    # always run the numpy path).
    device: str = "cpu"
    tf32: bool = False  # cuda only: TF32 tensor-core products (10-bit mantissa inputs), opt-in
    # runner.fused_ip_sums: the torch kernels' IP sums as one compiled kernel per chunk
    # (torch_plasticity.fused_chunk_sums; torch-cpu and cuda), opt-in
    fused_ip_sums: bool = False
    solver: str = "cholesky"  # readout.solve: cholesky (float64) | pinv32 (the authors' numerics)
    # readout.bias: the papers' eq. 1 readout y = W_out h + b_out (an unpenalised bias; readouts
    # (C, N+1)); off by default, as the authors' code (PROTOCOL §2). Every method and device,
    # DP and the Flower apps too.
    readout_bias: bool = False
    retrain_lambda: str = "select"  # select: each retrain picks λ on validation | frozen: best.json's
    # How the clients' reservoirs differ (heterogeneous methods): an
    # esnfed_core.heterogeneity.Heterogeneity, None = its default (mode seed).
    heterogeneity: Any = None
    # federated.client_fraction: the share of the clients each FedIP / FedCLIP IP round samples
    # (esnfed_core.sampling); 1 = every client in every round, the papers' and authors' runs.
    client_fraction: float = FULL
    # federated.sampling_pool: whom a sampled FedCLIP IP round draws from (esnfed_core.sampling.POOLS):
    # the context's participants (context, the default) or all training clients (roster)
    sampling_pool: str = CONTEXT_POOL

    def __post_init__(self) -> None:
        from esnfed_core.accel import check_device  # noqa: PLC0415 (no torch import)

        for name, cls in (("ip", IPSettings), ("continual", ContinualSettings)):
            value = getattr(self, name)
            if isinstance(value, Mapping):  # the section as a mapping of the type's fields
                try:
                    object.__setattr__(self, name, cls(**value))
                except TypeError as exc:
                    raise ConfigError(f"{'plasticity' if name == 'ip' else name}: {exc}") from None

        try:
            check_device(self.device)
        except ValueError as exc:
            raise ConfigError(f"runner.{exc}") from None
        check_solver(self.solver)
        if not isinstance(self.fused_ip_sums, bool):
            raise ConfigError(f"runner.fused_ip_sums: expected true or false, got {quote(self.fused_ip_sums)}")
        if not isinstance(self.readout_bias, bool):
            raise ConfigError(f"readout.bias: expected true or false, got {quote(self.readout_bias)}")
        try:
            CLIENT_FRACTION.check(SAMPLING_KEY, self.client_fraction)
            check_pool(self.sampling_pool)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
        if self.retrain_lambda not in RETRAIN_LAMBDA:
            raise ConfigError(f"retrain.lambda: expected one of {', '.join(RETRAIN_LAMBDA)}, "
                              f"got {quote(self.retrain_lambda)}")

    def samples(self, method: "Method") -> bool:
        """Whether a trial of ``method`` samples its rounds' clients: the methods with FedIP rounds
        (FedIP, deep FedIP, FedCLIP) when ``client_fraction`` < 1."""
        return self.client_fraction != FULL and method.family.fedip_rounds

    def fraction_for(self, method: "Method") -> float:
        """The client fraction a trial of ``method`` runs its rounds with (1 unless it samples)."""
        return self.client_fraction if self.samples(method) else FULL

    def roster_for(self, method: "Method") -> bool:
        """Whether a trial of ``method`` draws its sampled IP rounds over the whole roster: FedCLIP
        (federated, sampling) with ``sampling_pool`` roster (FedIP's rounds have no contexts: they draw
        among the clients with windows, all of them under DP)."""
        return self.sampling_pool == ROSTER_POOL and method.continual and self.samples(method)

    def accelerated(self, method: "Method") -> bool:
        """Whether trials of ``method`` run on the torch kernels with these settings."""
        # Deep reservoirs and heterogeneous methods run the numpy path on every device (the torch
        # kernels take one shallow reservoir shared by all clients).
        return self.device != "cpu" and method.family.torch_kernels

    def retrain_scores(self, method: "Method") -> bool:
        """Whether a retrain of ``method`` scores on the validation users: stationary ESN methods
        choose λ again for each retrained reservoir when ``retrain_lambda`` is "select"."""
        return self.retrain_lambda == "select" and method.selects_lambda

    def used_by(self, method: "Method", score: bool) -> dict[str, Any]:
        """The settings a trial of ``method`` reads (selection when ``score``, else retraining):
        a result depends on these and nothing else, so they identify it."""
        if method.baseline:
            return {}
        # run_continual batches on its own: batch_size only reaches the stationary methods.
        out: dict[str, Any] = {} if method.continual else {"batch_size": self.batch_size}
        if self.accelerated(method):  # float32 rounding differs from the numpy path's
            out["device"] = self.device
            if self.tf32 and self.device == "cuda":
                out["tf32"] = True
            if self.fused_ip_sums and method.uses_ip:  # float32 sums in another order
                out["fused_ip_sums"] = True
        out["solver"] = self.solver
        if self.readout_bias:  # absent when off: the keys of every default trial stay as they were
            out["readout_bias"] = True
        if self.samples(method):  # absent at 1: the keys of every default trial stay as they were
            out["client_fraction"] = self.client_fraction
        if self.roster_for(method):  # absent at context: the keys of every default trial stay as they were
            out["sampling_pool"] = self.sampling_pool
        if score and not method.continual:
            out["lambdas"] = list(self.lambdas)
        if method.uses_ip:
            out["ip"] = self.ip.as_dict()
        if method.continual:
            c = self.continual
            out["continual_lambda"] = c.lam
            if method.replays:
                out.update(replay_fraction=c.replay_fraction, replay_batch=c.replay_batch,
                           replay_shuffle=c.replay_shuffle)
                if c.replay_policy != "uniform":  # absent at the default: default trials' keys unchanged
                    out["replay_policy"] = c.replay_policy
            elif method.stops_early:  # joint: its early stopping's patience and cap
                out.update(joint_patience=c.joint_patience, joint_max_rounds=c.joint_max_rounds)
        if method.heterogeneous:  # None: the default spec (esnfed_core.heterogeneity.heterogeneity_of)
            out["heterogeneity"] = None if self.heterogeneity is None else self.heterogeneity.as_dict()
        return out
