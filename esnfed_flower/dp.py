"""Differential privacy in the Flower apps: the run config's ``dp-*`` keys as esnfed_core.privacy's
DPSpec, the trusted server's generator (central noise, the plain apps) and the SecAgg+ clients'
noise shares and quantization range (distributed noise). The mechanism is esnfed_core.privacy's
(DP-FedAvg's clipping norm: ``dp-fedavg-clip``, absent from the IncFed and FedIP runs; ``dp-amplification``:
privacy.amplification, present only as ``sampling`` on a sampled central FedIP run: distributed noise
refuses it, :func:`flower_dp`).

Distributed noise with client sampling (``client-fraction`` < 1, SecAgg+ FedIP): every IP round
sends to the public m = max(1, ⌊f·K⌋) of the K clients (DP: each must hold windows), through a
SecAgg+ round sized to them (esnfed_flower.secagg.size_round: threshold max(2, m − 1)), so an IP
round's share is sized for that threshold, K_min(m) (``ip_min_clients``), which each client derives
from the run config, not from the server; the statistics round goes to all K (``min_clients``)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from logging import WARNING
from typing import Any, Mapping

import numpy as np

from esnfed_core.privacy import (
    DPSpec, NoiseSource, SystemGaussian, client_stats_share, client_update_share, ip_sigma, share_std, stats_bound,
    stats_sigma,
)
from esnfed_core.private_trial import noise_rng
from esnfed_core.readout import RidgeStats
from esnfed_core.sampling import FULL, sample_size
from esnfed_core.validation import ParameterError
from esnfed_flower.common import client_fraction, secagg_threshold

NOISE = ("central", "distributed")  # the plain apps: central; the SecAgg+ apps: distributed
# How far a noise share may reach in SecAgg+'s quantization range, in share stds: beyond it the
# client fails rather than let Flower's quantizer clip the noise (probability ~1e-23 per entry).
RANGE_STDS = 10.0


@dataclass(frozen=True)
class FlowerDP:
    """A run's mechanism: the spec (user-level: one client per user), central or distributed
    noise, the releases z is shared by (FedIP's rounds + the IncFed release), the central
    generator's seed (None, a deployment's: the OS CSPRNG; set: a simulation) and, distributed, K_min: SecAgg+'s reconstruction
    threshold (esnfed_flower.common.secagg_threshold), the fewest vectors a completed sum holds:
    ``min_clients`` of the statistics round (all K clients), ``ip_min_clients`` of an IP round (K_min
    of its m sampled clients; K's at fraction 1)."""

    spec: DPSpec
    noise: str
    releases: int
    noise_seed: int | None = None
    min_clients: int = 1
    ip_min_clients: int = 1

    def server_rng(self) -> NoiseSource:
        """The trusted server's noise source: without ``dp-noise-seed`` (the default, a deployment)
        the OS CSPRNG (esnfed_core.privacy.SystemGaussian), which no run config can replay; with it
        the pipeline's generator of that seed (esnfed_core.private_trial.noise_rng), so the release
        equals the in-process trial's: a simulation, since anyone who knows the seed can subtract
        the noise (logged as such)."""
        if self.noise_seed is None:
            return SystemGaussian()
        from flwr.common.logger import log  # noqa: PLC0415 (this module's checks run without flwr too)

        log(WARNING, "dp-noise-seed %d: the central DP noise is seeded, reproducible and subtractable by anyone "
            "who knows the seed: a simulation, not a private release (unset it to draw from the OS CSPRNG)",
            self.noise_seed)
        return noise_rng(self.noise_seed)

    def stats_share(self, stats: RidgeStats, rng: NoiseSource | None = None) -> list[np.ndarray]:
        """A SecAgg+ client's IncFed upload: its clipped (Ā, B̄) plus its noise share (``rng``
        None, as the apps call it: the OS CSPRNG; the server must not be able to replay it)."""
        return list(client_stats_share(stats, self.spec, self.min_clients, rng, self.releases))

    def update_share(self, delta: list[np.ndarray], rng: NoiseSource | None = None) -> list[np.ndarray]:
        """A SecAgg+ client's FedIP upload: its clipped (Δg, Δb) plus its noise share (``rng`` as
        :meth:`stats_share`'s)."""
        n = len(delta[0])
        out = client_update_share(np.concatenate(delta), self.spec, self.ip_min_clients, rng, self.releases)
        return [out[:n], out[n:]]

    def clipping_range(self, units: int) -> float:
        """SecAgg+'s quantization range for the shares: every entry of a clipped contribution is at
        most its clipping norm, plus RANGE_STDS share stds (of the statistics and, FedIP, the updates,
        whose shares are sized for an IP round's threshold)."""
        stats = self.spec.clip * stats_bound(units) + RANGE_STDS * share_std(
            stats_sigma(self.spec, units, self.releases), self.min_clients)
        ip = self.spec.ip_clip + RANGE_STDS * share_std(ip_sigma(self.spec, self.releases), self.ip_min_clients)
        return max(stats, ip)


def flower_dp(rc: Mapping[str, Any], noise: str | None = None) -> FlowerDP | None:
    """The run config's mechanism; None without ``dp-epsilon`` or at ε = ∞ (no mechanism: the app
    runs as without DP, bit for bit). A bad value is a ParameterError naming its key; ``noise``:
    the only kind the calling app adds (a plain app central, a SecAgg+ app distributed). Distributed
    noise refuses ``dp-amplification: sampling``: amplification needs the sampled set secret from
    the adversary, and under SecAgg+ that adversary is the server, which picks the set."""
    if "dp-epsilon" not in rc:
        return None
    spec = DPSpec(float(rc["dp-epsilon"]), float(rc["dp-delta"]), "user", float(rc["dp-clip"]),
                  float(rc["dp-ip-clip"]), float(rc.get("dp-fedavg-clip", DPSpec.fedavg_clip)),
                  str(rc.get("dp-amplification", "none")))
    if not spec.private:
        return None
    if spec.amplification != "none" and client_fraction(rc) != FULL and "rounds" in rc:
        # as esnfed_core.private_trial.trial_spec: R rounds each sampling m of the K clients
        k = int(rc["num-clients"])
        spec = replace(spec, sampled=(int(rc["rounds"]), sample_size(k, client_fraction(rc)), k))
    want, noise = noise, str(rc.get("dp-noise", "central"))
    if noise not in NOISE:
        raise ParameterError(f"dp-noise: expected one of {', '.join(NOISE)}, got {noise!r}")
    if want is not None and noise != want:
        raise ParameterError(f"dp-noise: {noise} noise does not run on this app (it adds {want} noise: "
                             "central on the plain apps, distributed on the SecAgg+ apps)")
    if noise == "distributed" and spec.amplification != "none":
        raise ParameterError(f"dp-amplification: {spec.amplification} is not available with distributed noise "
                             "(SecAgg+): the server picks each round's clients, so the sample is not secret "
                             "from it and amplification does not hold; use none")
    seed = rc.get("dp-noise-seed")
    # Distributed: K_min = SecAgg+'s threshold, the fewest vectors a completed sum holds (run_secagg's);
    # an IP round's of its public m sampled clients (size_round's), as the client derives it itself.
    k = int(rc["num-clients"])
    min_clients = secagg_threshold(k) if noise == "distributed" else 1
    ip_min_clients = min_clients
    if noise == "distributed" and client_fraction(rc) != FULL:
        ip_min_clients = secagg_threshold(sample_size(k, client_fraction(rc)))
    return FlowerDP(spec, noise, int(rc.get("dp-releases", 1)), None if seed is None else int(seed), min_clients,
                    ip_min_clients)
