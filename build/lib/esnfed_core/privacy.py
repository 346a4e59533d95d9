"""Differential privacy of what clients release: the Gaussian mechanism on IncFed's (A, B) and on
FedIP's (g, b) updates, with the noise scale calibrated by Google's ``dp_accounting`` (PLD).

Privacy model (docs/privacy-stage.md, "Differential privacy"). Neighbouring data sets differ in one *unit*: one
user's whole data = one client, as the papers' clients (``relation="user"``, the only relation;
window level is refused, :data:`WINDOW_REFUSED`). Each unit's contribution is bounded by clipping,
the server sums the clipped contributions and adds N(0, σ²) noise with σ = z·C (z the noise multiplier, C the clipping norm). The aggregator
is trusted (or is SecAgg+: the server then only sees the sum, to which the noise is added).

IncFed. A unit with steps t = 1..n contributes its per-step *means* Ā = (1/n) Σ y_t s_tᵀ and
B̄ = (1/n) Σ s_t s_tᵀ. Since states lie in [-1, 1]^N and y_t is one-hot,
‖y sᵀ‖_F = ‖s‖ ≤ √N and ‖s sᵀ‖_F = ‖s‖² ≤ N, so ‖(Ā, B̄)‖_F ≤ √(N + N²) (a mean of bounded
terms); it is then clipped to C = clip·√(N + N²) (``clip`` ∈ (0, 1]; 1 never clips). The
released vector is (Ā, upper triangle of B̄ with its diagonal), whose L2 norm is ≤ ‖(Ā, B̄)‖_F,
so adding or removing one unit moves the sum by at most C: the L2 sensitivity is C. With
``readout.bias`` the states are the augmented [s; 1] ∈ [-1, 1]^(N+1) (the constant 1 lies in the
same range), so the same argument gives ‖(Ā, B̄)‖_F ≤ √((N+1) + (N+1)²): N is then the
statistics' N+1 columns throughout (:func:`stats_bound` of ``RidgeStats.units``). The noise is
drawn on that vector and mirrored, so B stays symmetric; the noisy B is then projected onto the
positive semi-definite cone (post-processing: no privacy cost) before the ridge solve. Every unit
weighs the same in the sum (its window count is not released).

FedIP. In each round every client's update Δ_c = (g_c − g, b_c − b) is clipped to L2 norm
C_ip; the server adds N(0, (z·C_ip)²) to Σ Δ_c and divides by the (public, fixed) number of
clients K: sensitivity C_ip per round. R rounds and the final IncFed release are R + 1 Gaussian
mechanisms with the same z, composed by the accountant. With client sampling (a round sums its m
sampled clients and divides by the public m) the same accounting holds, no amplification claimed:
the sets are data-independent (docs/privacy.md, "Client sampling under DP"). Opt-in
(``amplification="sampling"``): :func:`sampled_noise_multiplier`, amplified, RDP, replace-one neighbours.

DP-FedAvg (McMahan et al. 2018, adapted to this project's one-round FedAvg of local ridge
readouts). Each client releases its local readout W_c (C × N, solved at the config's λ); it is
clipped to Frobenius norm C_avg = ``fedavg_clip`` and the server adds N(0, (z·C_avg)²) to every
entry of Σ clip(W_c), then divides by the (public, fixed) number of clients K: the fixed-denominator
estimator with uniform weights of McMahan et al. (window counts would be a private weight). One
user moves the sum by at most C_avg: one Gaussian mechanism, user-level only (a window's effect on
a ridge solution has no bound the clip could state).

Distributed noise (the SecAgg+ Flower apps, esnfed_flower). When no server may see the sum before
its noise, each client adds a share of it: client c releases clip(x_c) + N(0, σ²/K_min), and the
secure sum of any K' ≥ K_min clients carries N(0, σ²·K'/K_min), at least the central mechanism's
σ²: the same (ε, δ) for every survivor set SecAgg+ can complete with (K_min its reconstruction
threshold), bought with K/K_min times the needed variance when all K clients stay. The guarantee
assumes honest clients (each adds its share) and holds for zero-out neighbours (one client's data
replaced by none: the client still takes part and adds its share), as the distributed DP
literature states it (Kairouz, Liu & Steinke 2021).

Noise source. Every function that adds noise takes ``rng``: a seeded ``np.random.Generator`` (the
pipeline's trials pass esnfed_core.private_trial.noise_rng(seed): a simulation, reproducible, and
anyone who knows the seed can subtract the noise) or None, the default, :class:`SystemGaussian`:
draws from the operating system's CSPRNG (os.urandom), which nobody can replay. numpy's generators
are not cryptographic even when seeded from fresh entropy (PCG64's state follows from its outputs),
so a deployment must not use them.

ε = ∞ means no mechanism: the functions return their input unchanged (tests check the bits).
"""

from __future__ import annotations

import functools
import math
import os
from dataclasses import dataclass
from typing import Protocol, Sequence

import numpy as np

from esnfed_core.quote import quote
from esnfed_core.readout import RidgeStats
from esnfed_core.validation import POSITIVE, Bound, ParameterError

RELATIONS = ("user",)
# Why privacy.relation: window is refused (one line): a window-level guarantee would need
# normalisation constants independent of the protected windows and FedIP rounds noised for the
# replace-one sensitivity of a client's clipped update; neither holds.
WINDOW_REFUSED = ("window level is not implemented: every dataset is z-scored per user over all of the user's "
                  "windows, so one window changes every window of its user, and a client that stays moves its "
                  "clipped FedIP update by up to 2·ip_clip, not ip_clip; use user")
# privacy.amplification: none = sampled FedIP rounds accounted as if every client took part (PLD,
# add/remove); sampling = amplification by sampling without replacement (RDP, replace-one).
AMPLIFICATIONS = ("none", "sampling")
# DPSpec's ranges (params.yaml privacy.* is checked against them). ε may also be +inf: no mechanism.
PRIVACY_BOUNDS = {"epsilon": POSITIVE, "delta": Bound(low=0.0, high=1.0, low_open=True, high_open=True),
                  "clip": Bound(low=0.0, high=1.0, low_open=True), "ip_clip": POSITIVE,
                  "fedavg_clip": POSITIVE}
_PLD_GRID = 1e-2  # the PLD accountant's value_discretization_interval
# privacy.delta: auto's cap: δ ≪ 1/n needs δ well below 1/n, and 1e-5 is the usual ceiling
AUTO_DELTA_CAP = 1e-5


def auto_delta(n_units: int) -> float:
    """δ of ``privacy.delta: auto``: min(1e-5, 1/(10·n)), n the protected units (the training users):
    a δ near 1/n would allow a mechanism that publishes one unit's data outright with probability
    about δ·n, so δ is kept an order of magnitude below 1/n and never above 1e-5."""
    if int(n_units) < 1:
        raise ParameterError(f"n_units: expected >= 1, got {n_units}")
    return min(AUTO_DELTA_CAP, 1.0 / (10 * int(n_units)))


_UNIFORM_BITS = 53  # a float64's mantissa: uniforms on the grid k·2^-53


class NoiseSource(Protocol):
    """What the mechanisms draw from: ``normal(loc, scale, size)`` as numpy's Generator has it."""

    def normal(self, loc: float = 0.0, scale: float = 1.0, size=None): ...


class SystemGaussian:
    """N(loc, scale²) from the operating system's CSPRNG: Box–Muller on pairs of 53-bit uniforms
    read from os.urandom, u₁ ∈ (0, 1] (so log u₁ is finite) and u₂ ∈ [0, 1). Unseeded by design:
    no seed reproduces it. The 53-bit grid bounds |x − loc| by scale·√(2·53·ln 2) ≈ 8.57·scale
    (a tail of mass ~1e-17 per draw never drawn); floating-point Gaussians are not the exact
    distribution (docs/privacy.md, "Noise sources")."""

    def normal(self, loc: float = 0.0, scale: float = 1.0, size=None):
        shape = () if size is None else tuple(np.atleast_1d(np.asarray(size, dtype=np.int64)).tolist())
        n = math.prod(shape)
        pairs = (n + 1) // 2
        words = np.frombuffer(os.urandom(16 * pairs), dtype="<u8").reshape(2, pairs) >> np.uint64(64 - _UNIFORM_BITS)
        u1 = (words[0] + 1.0) * 2.0 ** -_UNIFORM_BITS
        u2 = words[1] * 2.0 ** -_UNIFORM_BITS
        r = np.sqrt(-2.0 * np.log(u1))
        z = np.concatenate([r * np.cos(2.0 * np.pi * u2), r * np.sin(2.0 * np.pi * u2)])[:n]
        out = loc + scale * z.reshape(shape)
        return float(out) if size is None else out


def noise_source(rng: NoiseSource | None) -> NoiseSource:
    """``rng`` when the caller passes one (a seeded generator: a simulation), else the CSPRNG."""
    return SystemGaussian() if rng is None else rng


@dataclass(frozen=True)
class DPSpec:
    """A privacy target: (ε, δ), the neighbouring relation, the clipping fractions/norms."""

    epsilon: float
    delta: float
    relation: str = "user"
    clip: float = 1.0  # IncFed: fraction of the bound √(N + N²) of a unit's mean statistics
    ip_clip: float = 0.03  # FedIP: L2 norm bound of one client's (Δg, Δb) per round (params.yaml's default)
    fedavg_clip: float = 1.0  # DP-FedAvg: Frobenius norm bound of one client's local readout W_c
    amplification: str = "none"  # privacy.amplification (AMPLIFICATIONS)
    # (R, m, K) of a trial whose R FedIP rounds each sample m of K clients, accounted with
    # amplification (set by esnfed_core.private_trial.trial_spec; None: every release unsampled);
    # (R, m, K, F): F unsampled releases beside them (DP-FedCLIP: T readouts; 1 when absent)
    sampled: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        for name, bound in PRIVACY_BOUNDS.items():
            value = getattr(self, name)
            if not (name == "epsilon" and value == math.inf):
                bound.check(name, value)
        if self.relation == "window":
            raise ParameterError(f"relation: {WINDOW_REFUSED}")
        if self.relation not in RELATIONS:
            raise ParameterError(f"relation: expected one of {', '.join(RELATIONS)}, got {quote(self.relation)}")
        if self.amplification not in AMPLIFICATIONS:
            raise ParameterError(f"amplification: expected one of {', '.join(AMPLIFICATIONS)}, "
                                 f"got {quote(self.amplification)}")

    @property
    def private(self) -> bool:
        return math.isfinite(self.epsilon)

    def multiplier(self, releases: int = 1) -> float:
        """z of this spec's ``releases`` mechanisms: :func:`noise_multiplier` (PLD), or with
        ``sampled`` = (R, m, K[, F]) :func:`sampled_noise_multiplier` (``releases`` must be R + F,
        F = 1 when absent)."""
        if self.sampled is None or not self.private:
            return noise_multiplier(self.epsilon, self.delta, releases)
        rounds, m, k, *full = self.sampled
        full = int(full[0]) if full else 1
        if releases != rounds + full:
            raise ParameterError(f"releases: {releases}, but the sampled trial has {rounds} rounds + {full} "
                                 f"release{'s' if full > 1 else ''}")
        return sampled_noise_multiplier(self.epsilon, self.delta, rounds, m, k, full)


@functools.lru_cache(maxsize=256)
def noise_multiplier(epsilon: float, delta: float, releases: int = 1) -> float:
    """z such that ``releases`` Gaussian mechanisms of noise z·sensitivity compose to (ε, δ)-DP,
    from dp_accounting's PLD accountant (tight for the Gaussian); 0 when ε is infinite."""
    if releases < 1:
        raise ParameterError(f"releases: expected >= 1, got {releases}")
    if math.isinf(epsilon):
        return 0.0
    import dp_accounting  # noqa: PLC0415 (only private runs need it)
    from dp_accounting.pld import pld_privacy_accountant  # noqa: PLC0415

    def event(z: float):
        return dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(z), releases)

    # A coarse grid (1e-2) keeps a calibration to ~0.1 s; PLD's pessimistic discretisation still
    # over-estimates ε, so the guarantee holds (z differs from a 1e-4 grid's by ~1e-6 relative).
    return float(dp_accounting.calibrate_dp_mechanism(
        functools.partial(pld_privacy_accountant.PLDAccountant, value_discretization_interval=_PLD_GRID),
        event, float(epsilon), float(delta),
        bracket_interval=dp_accounting.ExplicitBracketInterval(0.1, 1e3), tol=1e-5))


def _sampled_event(z_replace: float, rounds: int, sample_size: int, clients: int, full: int = 1):
    """R rounds, each the Gaussian mechanism on m of K clients sampled without replacement, and
    ``full`` unsampled releases on all K (FedIP: the IncFed release; DP-FedCLIP: a readout per
    context); ``z_replace`` = σ / (the replace-one sensitivity 2·C)."""
    import dp_accounting  # noqa: PLC0415

    gauss = dp_accounting.GaussianDpEvent(z_replace)
    unsampled = gauss if int(full) == 1 else dp_accounting.SelfComposedDpEvent(gauss, int(full))
    return dp_accounting.ComposedDpEvent([dp_accounting.SelfComposedDpEvent(
        dp_accounting.SampledWithoutReplacementDpEvent(int(clients), int(sample_size), gauss), int(rounds)),
        unsampled])


def _replace_one_rdp():
    from dp_accounting import NeighboringRelation  # noqa: PLC0415
    from dp_accounting.rdp import rdp_privacy_accountant  # noqa: PLC0415

    return rdp_privacy_accountant.RdpAccountant(neighboring_relation=NeighboringRelation.REPLACE_ONE)


@functools.lru_cache(maxsize=256)
def sampled_noise_multiplier(epsilon: float, delta: float, rounds: int, sample_size: int, clients: int,
                             full: int = 1) -> float:
    """z (σ = z·C, C the clipping norm, as :func:`noise_multiplier`'s) such that R FedIP rounds, each
    on m = ``sample_size`` of K = ``clients`` clients sampled uniformly without replacement, and
    ``full`` unsampled releases on all K (FedIP: its one IncFed release; DP-FedCLIP: its T readouts)
    are (ε, δ)-DP under *replace-one* neighbours (K public), with
    amplification by sampling: dp_accounting's RDP accountant (SampledWithoutReplacementDpEvent,
    Wang, Balle & Kasiviswanathan 2019, Thm. 27; supported for REPLACE_ONE only). Its noise
    multiplier is σ over the replace-one L2 sensitivity, which is 2·C for a sum of terms each
    clipped to C (one term replaced by another), so z = 2·z_accountant. 0 when ε is infinite."""
    if math.isinf(epsilon):
        return 0.0
    if not 1 <= int(sample_size) <= int(clients) or int(rounds) < 0 or int(full) < 1:
        raise ParameterError(f"sampled rounds: expected 0 <= rounds, 1 <= m <= K and 1 <= unsampled releases, "
                             f"got rounds {rounds}, m {sample_size}, K {clients}, unsampled {full}")
    import dp_accounting  # noqa: PLC0415

    z_replace = dp_accounting.calibrate_dp_mechanism(
        _replace_one_rdp, functools.partial(_sampled_event, rounds=rounds, sample_size=sample_size, clients=clients,
                                            full=full),
        float(epsilon), float(delta), bracket_interval=dp_accounting.ExplicitBracketInterval(0.05, 1e3), tol=1e-5)
    return 2.0 * float(z_replace)


def sampled_epsilon_of(z: float, delta: float, rounds: int, sample_size: int, clients: int, full: int = 1) -> float:
    """ε at δ of :func:`sampled_noise_multiplier`'s mechanisms at multiplier z (σ = z·C), replace-one, RDP."""
    acc = _replace_one_rdp()
    acc.compose(_sampled_event(z / 2.0, rounds, sample_size, clients, full))
    return float(acc.get_epsilon(delta))


def epsilon_of(z: float, delta: float, releases: int = 1) -> float:
    """ε spent by ``releases`` Gaussian mechanisms of noise multiplier z at δ (PLD accountant)."""
    import dp_accounting  # noqa: PLC0415
    from dp_accounting.pld import pld_privacy_accountant  # noqa: PLC0415

    acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=_PLD_GRID)
    acc.compose(dp_accounting.GaussianDpEvent(z), releases)
    return float(acc.get_epsilon(delta))


def stats_bound(units: int, n_classes: int = 1) -> float:
    """√(N + N²): the Frobenius bound of one unit's mean statistics (Ā, B̄) (one-hot labels), N =
    ``units`` the statistics' columns: N + 1 with readout.bias (states [s; 1] ∈ [-1, 1]^(N+1))."""
    del n_classes  # ‖y sᵀ‖_F = ‖s‖ for one-hot y, whatever the number of classes
    return math.sqrt(units + units * units)


def stats_sigma(spec: DPSpec, units: int, releases: int = 1) -> float:
    """σ = z·C of the IncFed release, C = clip·√(N + N²), N = ``units`` the statistics' columns
    (N + 1 with readout.bias) (0 when ε is infinite)."""
    return spec.multiplier(releases) * (spec.clip * stats_bound(units))  # z·C, as before


def ip_sigma(spec: DPSpec, releases: int = 1) -> float:
    """σ = z·C_ip of one FedIP round's sum of clipped updates (0 when ε is infinite)."""
    return spec.multiplier(releases) * spec.ip_clip


def clip_norm(x: np.ndarray, bound: float) -> np.ndarray:
    """x scaled by min(1, bound / ‖x‖₂) (float64)."""
    x = np.asarray(x, np.float64)
    norm = float(np.linalg.norm(x))
    return x if norm <= bound else x * (bound / norm)


def mean_stats(stats: RidgeStats) -> tuple[np.ndarray, np.ndarray]:
    """A unit's per-step means (Ā, B̄) = (A, B) / n_steps."""
    if stats.n_steps <= 0:
        raise ParameterError("mean_stats: a unit without time steps has no mean")
    return stats.a / stats.n_steps, stats.b / stats.n_steps


def clipped_mean_stats(stats: RidgeStats, bound: float) -> tuple[np.ndarray, np.ndarray]:
    """(Ā, B̄) jointly clipped to Frobenius norm ``bound`` (one scale for both: a re-weighting)."""
    a, b = mean_stats(stats)
    norm = math.sqrt(float(np.sum(a * a)) + float(np.sum(b * b)))
    scale = 1.0 if norm <= bound else bound / norm
    return a * scale, b * scale


def private_stats(units_stats: Sequence[RidgeStats], spec: DPSpec, rng: NoiseSource | None = None,
                  releases: int = 1) -> RidgeStats:
    """The Gaussian mechanism on Σ clipped (Ā, B̄) over the neighbouring units (the clients);
    ``releases``: mechanisms the budget is shared by; ``rng``: the noise's source (None: the
    CSPRNG, :func:`noise_source`).

    ε = ∞: the plain sum Σ (A, B) of the units, bit for bit what IncFed sums.
    """
    if not units_stats:
        raise ParameterError("private_stats: no units")
    if not spec.private:
        total = units_stats[0]
        for s in units_stats[1:]:
            total = total + s
        return total
    return noised_stats(units_stats, spec.clip, stats_sigma(spec, units_stats[0].units, releases), rng)


def noised_stats(units_stats: Sequence[RidgeStats], clip: float, sigma: float,
                 rng: NoiseSource | None = None) -> RidgeStats:
    """Σ over the units of their (Ā, B̄) clipped to clip·√(N + N²), with N(0, σ²) added (B's upper
    triangle, mirrored) and B projected onto the PSD cone: :func:`private_stats` at a given σ."""
    a_sum, b_sum = clipped_stats_sum(units_stats, clip * stats_bound(units_stats[0].units))
    return released_stats(*add_noise(a_sum, b_sum, sigma, rng), units_stats[0].bias)


def clipped_stats_sum(units_stats: Sequence[RidgeStats], bound: float) -> tuple[np.ndarray, np.ndarray]:
    """Σ over the units of their (Ā, B̄) clipped to Frobenius norm ``bound``: what
    :func:`private_stats` noises (its deterministic part, whose sensitivity the noise is for)."""
    n, c = units_stats[0].units, units_stats[0].n_classes
    a_sum, b_sum = np.zeros((c, n)), np.zeros((n, n))
    for s in units_stats:
        a, b = clipped_mean_stats(s, bound)
        a_sum += a
        b_sum += b
    return a_sum, b_sum


def released_vector(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The numbers a statistics release draws noise for: A's entries, then B's upper triangle with
    its diagonal (:func:`add_noise`); the L2 distance of two of them is what the sensitivity bounds."""
    return np.concatenate([np.ravel(a), b[np.triu_indices(b.shape[0])]])


def released_stats(a_noisy: np.ndarray, b_noisy: np.ndarray, bias: bool = False) -> RidgeStats:
    """The ridge statistics of a noisy sum (Ā, B̄): B projected onto the PSD cone
    (post-processing); the counts are not released. ``bias``: statistics of the augmented states
    (readout.bias), whose last entry the solve leaves unpenalised."""
    return RidgeStats(a_noisy, psd_projection(b_noisy), 0, 0, bias)


def add_noise(a: np.ndarray, b: np.ndarray, sigma: float, rng: NoiseSource | None = None
              ) -> tuple[np.ndarray, np.ndarray]:
    """A + N(0, σ²) per entry; B + N(0, σ²) per entry of its upper triangle (diagonal included),
    mirrored below so B stays symmetric: one draw per released number (``rng`` None: the CSPRNG)."""
    rng = noise_source(rng)
    upper = rng.normal(0.0, sigma, b.shape)
    sym = np.triu(upper) + np.triu(upper, 1).T
    return a + rng.normal(0.0, sigma, a.shape), b + sym


def psd_projection(b: np.ndarray) -> np.ndarray:
    """The nearest positive semi-definite matrix (Frobenius): negative eigenvalues set to 0."""
    w, v = np.linalg.eigh(0.5 * (b + b.T))
    out = (v * np.maximum(w, 0.0)) @ v.T
    return 0.5 * (out + out.T)


def private_average(start: np.ndarray, locals_: Sequence[np.ndarray], weights: Sequence[int],
                    spec: DPSpec, rng: NoiseSource | None = None, releases: int = 1,
                    norms: list[float] | None = None, bound: float | None = None,
                    clients: int | None = None) -> np.ndarray:
    """The server's private mean of the clients' uploads x_c around ``start``:
    start + (Σ clip(x_c − start) + N(0, (z·C)²)) / K, C = ``bound`` (FedIP's round: C_ip =
    ``spec.ip_clip``, the default; DP-FedAvg: start 0 and C = ``spec.fedavg_clip``), K = ``clients``
    (public: the federation's size; default the uploads' number, DP-FedCLIP fixes it because who
    uploads at a context depends on the users' data; a roster-sampled DP-FedCLIP round divides by
    its public m, even when none of the drawn clients uploads: start + noise / m).

    ε = ∞: the window-count weighted average of :func:`esnfed_core.federated.weighted_average`.
    ``norms``: each client's update norm ‖x_c − start‖₂ before clipping is appended, in order (ε = ∞
    too: the natural scale C is set against; benchmarks/privacy_clip_sweep.py --sweep ip_clip);
    the result is unchanged.
    """
    from esnfed_core.federated import weighted_average  # noqa: PLC0415

    bound = spec.ip_clip if bound is None else bound
    start = np.asarray(start, np.float64)
    updates = [np.asarray(x, np.float64) - start for x in locals_] if norms is not None or spec.private else []
    if norms is not None:
        norms.extend(float(np.linalg.norm(u)) for u in updates)
    if not spec.private:  # no uploads (a roster-sampled FedCLIP round without drawn participants): no update
        return weighted_average(locals_, weights) if len(locals_) else start
    total = clipped_update_sum(start, updates, bound)
    sigma = spec.multiplier(releases) * bound
    return start + (total + noise_source(rng).normal(0.0, sigma, total.shape)) / (clients or len(locals_))


def clipped_update_sum(start: np.ndarray, updates: Sequence[np.ndarray], bound: float) -> np.ndarray:
    """Σ_c clip(u_c) of the clients' updates u_c = x_c − start, each clipped to L2 norm ``bound``:
    what :func:`private_average` noises (its deterministic part, whose sensitivity the noise is for)."""
    total = np.zeros_like(np.asarray(start, np.float64))
    for update in updates:
        total += clip_norm(update, bound)
    return total


def fedip_aggregate(spec: DPSpec, rng: NoiseSource | None = None, releases: int = 1,
                    norms: list[float] | None = None, clients: int | None = None):
    """A :data:`esnfed_core.plasticity.Aggregate` applying :func:`private_average` to the
    concatenated (g, b) of every client: one clipped update per client and round (``norms``: each
    update's norm before clipping is appended, round by round; ``clients``: the fixed K; ``rng``
    None: one CSPRNG source for every round)."""
    rng = noise_source(rng)

    def aggregate(start, gains, biases, weights):
        n = len(start.gain)
        x0 = np.concatenate([start.gain, start.bias]).astype(np.float64)
        out = private_average(x0, [np.concatenate([g, b]) for g, b in zip(gains, biases)], weights,
                              spec, rng, releases, norms, clients=clients)
        return out[:n], out[n:]

    return aggregate


def fedavg_sigma(spec: DPSpec, releases: int = 1) -> float:
    """σ = z·C_avg of DP-FedAvg's sum of clipped local readouts (0 when ε is infinite)."""
    return spec.multiplier(releases) * spec.fedavg_clip


def fedavg_aggregate(spec: DPSpec, rng: NoiseSource | None = None, releases: int = 1,
                     norms: list[float] | None = None):
    """DP-FedAvg's server aggregation for :func:`esnfed_core.federated.fedavg`'s ``aggregate``:
    (readouts, window counts) -> (Σ clip(W_c) + N(0, (z·C_avg)²)) / K, each W_c clipped to
    Frobenius norm ``spec.fedavg_clip`` (:func:`private_average` from 0). ε = ∞: FedAvg's
    window-weighted mean, bit for bit. ``norms``: each readout's norm before clipping is appended."""

    def aggregate(readouts: Sequence[np.ndarray], weights: Sequence[int]) -> np.ndarray:
        return private_average(np.zeros(np.shape(readouts[0])), readouts, weights, spec, rng, releases, norms,
                               bound=spec.fedavg_clip)

    return aggregate


def share_std(sigma: float, min_clients: int) -> float:
    """The std σ/√K_min of one client's noise share: any K' ≥ K_min shares sum to std ≥ σ."""
    if int(min_clients) < 1:
        raise ParameterError(f"min_clients: expected >= 1, got {min_clients}")
    return sigma / math.sqrt(int(min_clients))


def sum_std(sigma: float, clients: int, min_clients: int) -> float:
    """The std σ·√(K'/K_min) of the noise in the sum of ``clients`` = K' shares (:func:`share_std`)."""
    return share_std(sigma, min_clients) * math.sqrt(int(clients))


def client_stats_share(stats: RidgeStats, spec: DPSpec, min_clients: int, rng: NoiseSource | None = None,
                       releases: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Distributed noise, IncFed: one client's (Ā, B̄) clipped as :func:`private_stats` clips it, plus
    its share N(0, σ²/K_min) of the release's noise (B̄'s upper triangle, mirrored: :func:`add_noise`).

    ε = ∞: the per-step means (Ā, B̄) unchanged (:func:`mean_stats`).
    """
    if not spec.private:
        return mean_stats(stats)
    a, b = clipped_mean_stats(stats, spec.clip * stats_bound(stats.units))
    return add_noise(a, b, share_std(stats_sigma(spec, stats.units, releases), min_clients), rng)


def client_update_share(update: np.ndarray, spec: DPSpec, min_clients: int, rng: NoiseSource | None = None,
                        releases: int = 1) -> np.ndarray:
    """Distributed noise, FedIP: one client's round update (Δg, Δb) clipped to C_ip, as
    :func:`private_average` clips it, plus its share N(0, σ_ip²/K_min) per entry.

    ε = ∞: the update unchanged (float64).
    """
    update = np.asarray(update, np.float64)
    if not spec.private:
        return update
    std = share_std(ip_sigma(spec, releases), min_clients)
    return clip_norm(update, spec.ip_clip) + noise_source(rng).normal(0.0, std, update.shape)
