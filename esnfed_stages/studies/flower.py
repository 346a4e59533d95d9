"""`esnfed flower`: Flower apps (esnfed_flower: incfed | fedip | fedavg, plain or SecAgg+) in
Flower's simulation engine on the processed data, beside the in-process pipeline's trial of the
same config and seed -> <out_dir>/<dataset>-<app>[-secagg][-f<f>]-<pct>.json (-f<f>: a run whose IP
rounds sampled a client fraction f < 1, :func:`out_name`; runs/flower-manual by
default; dvc.yaml's flower stage: runs/flower/<dataset>/, which the report reads). Several apps of one
dataset and share (`run_many`) share each app's trial fit, the clients' data files and one Flower
process with one Ray session (esnfed_flower/session.py).

The selected config of the share (runs/select/.../best.json) is trained from the retrain stage's
first seed: the pipeline's trial (fit, λ chosen on the validation users) gives λ, its test
accuracy and its ledger's bytes; the Flower app then runs with that λ and the same seeds on the
training users (one SuperNode each, data written to a temporary folder) through the Flower
environment's interpreter (.venv-flower: flwr's pins clash with this one's; docs/flower-apps.md "Flower apps"),
and its readout is scored on the test users here. Bytes: what measure_mod counted on the messages
Flower sent (esnfed_flower/run.py). FedCLIP's apps: esnfed_stages/studies/flower_fedclip.py, on this
module's helpers. Each result records the budget its config was selected under (``params``,
esnfed_stages/provenance.py); the report refuses a result of another budget than params.yaml's.

Differential privacy (`--epsilon`, :class:`DPRequest`): IncFed and FedIP under esnfed_core.privacy's
Gaussian mechanism, δ, clip and ip_clip from params.yaml ``privacy`` (as the privacy stage's),
user-level; central noise on the plain apps (the server draws the private trial's noise: its
readout is the in-process private trial's), distributed noise on the SecAgg+ apps (each client adds
σ/√K_min). The app solves every λ of readout.lambdas and λ is chosen here on the validation users,
as the private trial chooses it; the pipeline side is that trial (esnfed_core.private_trial).
DP-FedAvg (plain app, central noise only): the clients' readouts clipped to params.yaml
``privacy.fedavg_clip``, noised and averaged by the server; one release at the selected config's λ
(best.json's, as the privacy-extra stage's trial trains), so there is no λ to choose here.
federated.client_fraction < 1: the FedIP apps' DP rounds sample as the private trial's, divided by
the public m; central (plain app): z amplified under privacy.amplification: sampling
(``dp-amplification``); distributed (SecAgg+): each IP round's shares sized for its m clients'
threshold, and privacy.amplification: sampling refused (the server knows whom it sampled).
-> <dataset>-<app>[-secagg][-f<f>]-eps<ε>-<pct>.json with a ``dp`` record (mechanism, ε, δ, σ, clip, accountant).
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from esnfed_core import __version__
from esnfed_core.data.npz import read_npy, read_npz
from esnfed_core.errors import ConfigError, DataError
from esnfed_core.method import CONNECTIVITY_KEYS, Method
from esnfed_core.privacy import (
    DPSpec, epsilon_of, fedavg_sigma, ip_sigma, stats_bound, stats_sigma, sum_std,
)
from esnfed_core.private_trial import PRIVATE_ALGOS, fit_private, releases, trial_spec
from esnfed_core.quote import quote
from esnfed_core.sampling import (KEY as SAMPLING_KEY, POOL_KEY, SECAGG_MIN_CLIENTS, SIMULATION_MIN_SURVIVORS,
                                  SURVIVORS_KEY, sample_size)
from esnfed_core.scoring import pooled_counts
from esnfed_core.vocabulary import PCTS
from esnfed_core.trial import TrialData, fit, make_reservoir, select_lambda, sub_seeds
from esnfed_stages import provenance
from esnfed_stages._io import output_lock, read_json, write_json
from esnfed_stages.params.experiment import BudgetSpec, experiment_params
from esnfed_stages.params.privacy import ACCOUNTANT, SAMPLED_ACCOUNTANT, neighbouring_units, privacy_params
from esnfed_stages.experiment.best import retrain_seed, selected_config
from esnfed_stages.experiment.trial_data import open_dataset
from esnfed_stages.layout import (FEDCLIP_APPS, code_path, eps_key, out_name, FLOWER_APPS, flower_python, SECAGG_APPS,
                                  FLOWER_MANUAL_DIR as MANUAL_DIR)

ENV_HINT = "run `esnfed flower-env` (builds .venv-flower here from the pinned requirements) or pass --flower-python"


NOISE = ("central", "distributed")
# The apps --epsilon runs on: the private trial's methods, and DP-FedAvg on the plain app (central
# noise: there is no SecAgg+ FedAvg app, so --secagg stays refused for it by check_args).
DP_APPS = (*PRIVATE_ALGOS, "fedavg")


@dataclass(frozen=True)
class DPRequest:
    """`esnfed flower --epsilon [--noise]`: ε (inf: no mechanism) and the noise, None = central on
    the plain apps (the trusted server adds it), distributed on the SecAgg+ apps (the clients do)."""

    epsilon: float
    noise: str | None = None

    def noise_for(self, secagg: bool) -> str:
        return self.noise or ("distributed" if secagg else "central")


def check_dp(pairs: Sequence[tuple[str, bool]], dp: DPRequest) -> None:
    """One line naming the option when --epsilon or --noise does not fit the (app, --secagg) pairs."""
    if not (dp.epsilon > 0):  # NaN too
        raise ConfigError(f"esnfed flower: --epsilon must be > 0 (inf: no noise), got {quote(dp.epsilon)}")
    if dp.noise is not None and dp.noise not in NOISE:
        raise ConfigError(f"esnfed flower: --noise must be one of {', '.join(NOISE)}, got {quote(dp.noise)}")
    for app, secagg in pairs:
        if app not in DP_APPS:
            raise ConfigError(f"esnfed flower: --epsilon is for {', '.join(DP_APPS)}, not {app}")
        noise = dp.noise_for(secagg)
        if secagg and noise == "central":
            raise ConfigError("esnfed flower: --noise central runs on the plain apps; with --secagg the clients "
                              "add the noise (--noise distributed): the server sees only the sum")
        if not secagg and noise == "distributed":
            raise ConfigError("esnfed flower: --noise distributed needs --secagg: without SecAgg+ the server sees "
                              "each client's vector, whose noise share σ/√K_min alone gives no such guarantee")


def dp_spec(params: Mapping[str, Any], dataset: str, data: TrialData, epsilon: float) -> DPSpec:
    """The mechanism at ``epsilon`` from params.yaml ``privacy`` (δ, clip, ip_clip, fedavg_clip as
    the privacy stages'): user level, one client per user (privacy_params refuses the window relation)."""
    pp = privacy_params(params)
    return pp.spec(epsilon, pp.delta_for(neighbouring_units(data)), dataset)


def dp_run_config(spec: DPSpec, noise: str, n_releases: int, seed: int, settings: Any,
                  app: str = "incfed") -> dict[str, Any]:
    """The apps' ``dp-*`` keys (esnfed_flower.dp) and the λ grid they solve (λ is chosen here on the
    validation users); central: the seed of the private trial's noise generator (``dp-noise-seed``:
    this command is a simulation beside that trial; the dp record's ``noise_source`` says so). FedAvg: its
    clipping norm ``dp-fedavg-clip`` and no grid (one release at the run config's ``lambda``).
    ``spec`` with ``sampled`` (esnfed_core.private_trial.trial_spec: privacy.amplification sampling,
    sampled FedIP rounds): ``dp-amplification``, absent otherwise (the run config as before)."""
    rc = {"dp-epsilon": spec.epsilon, "dp-delta": spec.delta, "dp-clip": spec.clip, "dp-ip-clip": spec.ip_clip,
          "dp-noise": noise, "dp-releases": n_releases}
    if spec.sampled is not None:  # amplified sampled rounds: the app derives (R, m, K) from its run config
        rc["dp-amplification"] = spec.amplification
    if Method.parse(app).readout_per_lambda:
        rc["dp-fedavg-clip"] = spec.fedavg_clip
    else:
        rc["lambdas"] = [float(x) for x in settings.lambdas]
    if noise == "central":
        rc["dp-noise-seed"] = int(seed)
    return rc


# Where a DP result's noise came from: esnfed flower seeds the central apps' (dp_run_config) so the
# release equals the in-process trial's; the SecAgg+ clients draw theirs from the OS CSPRNG.
NOISE_SOURCES = {"central": "seeded (dp-noise-seed = the trial's seed): a simulation, anyone who knows the seed "
                            "can subtract the noise; a deployment leaves dp-noise-seed unset (OS CSPRNG)",
                 "distributed": "OS CSPRNG on every client (os.urandom): not reproducible, not seedable"}


def dp_record(spec: DPSpec, noise: str, n_releases: int, units: int, fedip: bool,
              secagg: Mapping[str, Any] | None, *, fedavg: bool = False) -> dict[str, Any]:
    """What a DP result records: the mechanism, ε, δ, z, σ, the clipping and the accountant;
    distributed: K_min, each client's σ/√K_min and what the sum of the K' clients it held carries
    (std σ·√(K'/K_min) and the ε that buys, ≤ ε); sampled (``secagg`` with ``ip_clients``): also
    each IP round's m, K_min(m), σ_ip/√K_min(m) per client and K' per round, and ``epsilon_spent``
    then bounds ε from the smallest of all the releases' √(K'/K_min) (each release at least that
    multiplier). ``fedavg``: DP-FedAvg's (central) record, whose
    clipping norm is ``fedavg_clip`` and σ = z·fedavg_clip (:func:`dp_fedavg_record`). ``spec`` with
    ``sampled`` (R, m, K): z is the amplified one, and the record says so (``amplification``,
    ``sampled_accountant``)."""
    z = spec.multiplier(n_releases)
    if fedavg:
        return dp_fedavg_record(spec, n_releases, z)
    rec = {"noise": noise, "epsilon": eps_key(spec.epsilon), "delta": spec.delta, "relation": "user",
           "releases": n_releases, "noise_multiplier": z, "clip": spec.clip,
           "clip_norm": spec.clip * stats_bound(units), "sigma": stats_sigma(spec, units, n_releases),
           "accountant": ACCOUNTANT, "noise_source": NOISE_SOURCES[noise],
           "mechanism": ("Gaussian (esnfed_core/privacy.py), central: the trusted server adds N(0, σ²) to the sum"
                         if noise == "central" else "Gaussian (esnfed_core/privacy.py), distributed: each client "
                         "adds N(0, σ²/K_min) to its clipped contribution, summed by SecAgg+")}
    if fedip:
        rec.update({"ip_clip": spec.ip_clip, "sigma_ip": ip_sigma(spec, n_releases)})
    if spec.sampled is not None:
        rec.update({"amplification": spec.amplification, "sampled_accountant": SAMPLED_ACCOUNTANT})
    if noise == "distributed" and secagg is not None and spec.private:
        k_min, k = int(secagg["min_clients"]), int(secagg["clients"])
        ratio = k / k_min
        if "ip_clients" in secagg:  # sampled IP rounds: K_min(m) of each round's m sampled clients
            ip_min = int(secagg["ip_min_clients"])
            ratio = min([ratio, *(int(c) / ip_min for c in secagg["ip_clients"])])
            rec.update({"ip_sampled": int(secagg["ip_sampled"]), "ip_min_clients": ip_min,
                        "ip_clients_in_sum": [int(c) for c in secagg["ip_clients"]],
                        "ip_client_sigma": rec["sigma_ip"] / ip_min ** 0.5})
        rec.update({"min_clients": k_min, "clients_in_sum": k, "client_sigma": rec["sigma"] / k_min ** 0.5,
                    "sum_sigma": sum_std(rec["sigma"], k, k_min),
                    "epsilon_spent": epsilon_of(z * ratio ** 0.5, spec.delta, n_releases)})
    return rec


def dp_fedavg_record(spec: DPSpec, n_releases: int, z: float) -> dict[str, Any]:
    """DP-FedAvg's ``dp`` record (central noise: no SecAgg+ FedAvg app): each local readout W_c
    clipped to Frobenius norm C_avg = ``fedavg_clip`` (also ``clip_norm``), σ = z·C_avg on the sum
    (esnfed_core.privacy.fedavg_sigma), divided by K."""
    return {"noise": "central", "epsilon": eps_key(spec.epsilon), "delta": spec.delta, "relation": "user",
            "releases": n_releases, "noise_multiplier": z, "fedavg_clip": spec.fedavg_clip,
            "clip_norm": spec.fedavg_clip, "sigma": fedavg_sigma(spec, n_releases), "accountant": ACCOUNTANT,
            "noise_source": NOISE_SOURCES["central"],
            "mechanism": "Gaussian (esnfed_core/privacy.py), central: the trusted server clips each local readout to "
                         "Frobenius norm fedavg_clip, adds N(0, σ²) to their sum and divides by K"}


def run_config(cfg: Mapping[str, Any], seeds: Mapping[str, int], data: TrialData, settings: Any,
               lam: float, app: str, secagg: bool) -> dict[str, Any]:
    """The apps' run config for a trial of ``cfg`` (paths added by the caller); ``readout-bias``
    only with readout.bias (the default run config, hence every message, as before)."""
    steps = max(u.x.shape[0] * u.x.shape[1] for u in data.train.values())
    rc = {k: cfg[k] for k in ("units", "spectral_radius", "leak", "input_scaling")}
    rc.update({k: cfg[k] for k in CONNECTIVITY_KEYS if k in cfg})  # a sparse reservoir's (optional)
    rc.update({"app": app, "secagg": secagg, "reservoir-seed": int(seeds["reservoir"]),
               "n-classes": data.n_classes, "n-inputs": data.n_inputs, "batch-size": settings.batch_size,
               "num-clients": len(data.train), "lambda": float(lam), "solver": settings.solver,
               "max-weight": float(steps), "clipping-range": 1.0})
    if settings.readout_bias:
        rc["readout-bias"] = True
    rc.update(sampling_run_config(settings, app, secagg, len(data.train)))
    if secagg:  # a simulation: no survivor bound beyond Flower's (masks_note labels the results)
        rc[SURVIVORS_KEY] = SIMULATION_MIN_SURVIVORS
    if ip_then_readout(app):
        rc.update({**ip_run_config(cfg, seeds, settings), "rounds": int(cfg["rounds"])})
    return rc


def ip_then_readout(app: str) -> bool:
    """Whether ``app`` runs its IP rounds and then one readout (FedIP): its run config has ``rounds``
    and its final (g, b) are compared with the pipeline's (FedCLIP's run per context: flower_fedclip)."""
    m = Method.parse(app)
    return m.uses_ip and not m.continual


# The run config's key of federated.client_fraction (esnfed_flower.common.FRACTION_KEY; this layer
# does not import flwr).
FRACTION_KEY = "client-fraction"


def sampling_run_config(settings: Any, app: str, secagg: bool, n_clients: int) -> dict[str, Any]:
    """The run config's ``client-fraction``: federated.client_fraction, present only below 1 and
    for the apps whose pipeline trial samples its IP rounds (FedIP, FedCLIP: their servers send
    each IP round to the pipeline's sampled clients). One-line ConfigError naming the key when a
    SecAgg+ round of the ``n_clients`` would go to fewer than SecAgg+'s minimum, or naming
    federated.sampling_pool when a FedCLIP app would have to draw over the roster."""
    if not settings.samples(Method.parse(app)):
        return {}
    if settings.roster_for(Method.parse(app)):  # the apps' Sampling draws among a context's participants
        raise ConfigError(f"{POOL_KEY}: roster is not available for the Flower FedCLIP apps (their server draws "
                          f"among a context's participants); set {POOL_KEY}: context or {SAMPLING_KEY}: 1")
    k = sample_size(n_clients, settings.client_fraction)
    if secagg and k < SECAGG_MIN_CLIENTS:
        raise ConfigError(f"{SAMPLING_KEY}: {settings.client_fraction:g} of {n_clients} clients samples {k} per "
                          f"round; SecAgg+ needs at least {SECAGG_MIN_CLIENTS}")
    return {FRACTION_KEY: settings.client_fraction}


def fraction_record(rc: Mapping[str, Any]) -> dict[str, Any]:
    """What a result records of the run config's client fraction: ``client_fraction`` when the
    app's IP rounds were sampled (below 1), nothing otherwise (every client in every round)."""
    return {"client_fraction": float(rc[FRACTION_KEY])} if FRACTION_KEY in rc else {}


def check_sampling(settings: Any, pairs: Sequence[tuple[str, bool]], dp: bool, n_clients: int,
                   amplification: str = "none") -> None:
    """Before any trial is fitted: one line naming federated.client_fraction when it is too small for
    SecAgg+ (:func:`sampling_run_config`), or privacy.amplification when it is ``sampling`` for a DP
    app that samples under SecAgg+ (distributed noise: amplification needs the sampled set secret
    from the adversary, and the adversary SecAgg+ guards against is the server, which picks it)."""
    for app, secagg in pairs:
        if dp and secagg and amplification != "none" and settings.samples(Method.parse(app)):
            raise ConfigError(f"params.yaml: privacy.amplification: {amplification} is not available under SecAgg+ "
                              "(distributed noise): the server picks each round's clients, so the sample is not "
                              "secret from it and amplification does not hold; set it to none")
        sampling_run_config(settings, app, secagg, n_clients)


def ip_run_config(cfg: Mapping[str, Any], seeds: Mapping[str, int], settings: Any) -> dict[str, Any]:
    """The IP keys of the apps' run config (FedIP, FedCLIP): params.yaml plasticity, the config's σ
    and local epochs, the trial's IP seed."""
    ip = settings.ip  # params.yaml plasticity, typed (esnfed_core.ip_rule.IPSettings)
    return {"sigma": float(cfg["sigma"]), "mu": float(ip.mu), "eta": float(ip.eta),
            "ip-batch-size": int(ip.batch_size), "ip-normalize-step": bool(ip.normalize_step),
            "ip-seed": int(seeds["ip"]), "local-epochs": int(cfg["local_epochs"])}


def simulate(python: Path, rcs: Sequence[dict[str, Any]], data: TrialData, work: Path,
             timeout_s: float) -> list[dict[str, Any]]:
    """Run the apps of ``rcs`` through one ``python -m esnfed_flower.run`` (one Ray session) in
    ``work``, on the clients' data written once: per app its readout, (g, b), bytes (FedCLIP: each
    context's (g, b) and readout)."""
    (work / "data").mkdir()
    for i, u in enumerate(data.train.values()):  # context: FedCLIP's stream (esnfed_flower.fedclip)
        np.savez(work / "data" / f"client-{i}.npz", x=np.asarray(u.x), y=np.asarray(u.y),
                 context=np.asarray(u.context))
    if any(rc.get("num-eval-clients") for rc in rcs):  # FedCLIP joint: the validation users' nodes next
        for j, u in enumerate(data.validation.values()):
            np.savez(work / "data" / f"client-{len(data.train) + j}.npz", x=np.asarray(u.x), y=np.asarray(u.y),
                     context=np.asarray(u.context))
    runs = []
    for i, rc in enumerate(rcs):
        run_dir = work / f"run-{i}"
        run_dir.mkdir()
        rc = {**rc, "data-dir": str(work / "data"), "out": str(run_dir / "readout.npy"),
              "bytes-dir": str(run_dir / "bytes")}
        (run_dir / "run.json").write_text(json.dumps(rc))
        runs.append(run_dir)
    try:
        with code_path() as code:
            proc = subprocess.run([str(python), "-m", "esnfed_flower.run", *(str(r / "run.json") for r in runs)],
                                  cwd=work, env={**os.environ, "PYTHONPATH": str(code)}, capture_output=True,
                                  text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise DataError(f"esnfed flower: the Flower simulation ran past {timeout_s:.0f} s") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise DataError(f"esnfed flower: the Flower simulation failed (exit {proc.returncode}): {last}")
    return [_simulation_outputs(r) for r in runs]


def _simulation_outputs(run_dir: Path) -> dict[str, Any]:
    """What the Flower process wrote, read back as any input (esnfed_core.data.npz, read_json)."""
    out = {"readout": read_npy(run_dir / "readout.npy"), "bytes": read_json(run_dir / "readout.npy.bytes.json")}
    if (run_dir / "readout.npy.ip.npz").is_file():
        ip = read_npz(run_dir / "readout.npy.ip.npz", ("gain", "bias"))
        if set(ip) != {"gain", "bias"}:
            raise DataError(f"{run_dir / 'readout.npy.ip.npz'}: missing gain or bias")
        out["gain"], out["bias"] = ip["gain"], ip["bias"]
    if (run_dir / "readout.npy.contexts.npz").is_file():  # FedCLIP: the model after each context
        out["contexts"] = read_npz(run_dir / "readout.npy.contexts.npz")  # joint also ip_rounds, rounds, trace
    if (run_dir / "readout.npy.json").is_file():
        out["secagg"] = read_json(run_dir / "readout.npy.json")
    return out


def share_inputs(dataset: str, pct: str, params: Mapping[str, Any], data_dir: Path,
                 pairs: Sequence[tuple[str, bool]] = (), dp: bool = False) -> tuple[Any, TrialData, list, int]:
    """What every app's pipeline trial of a share uses: the experiment params, the share's
    training and validation users, the test users and the retrain stage's first seed; the
    client fraction checked for the (app, SecAgg+) ``pairs`` (and ``dp``) (:func:`check_sampling`)."""
    exp = experiment_params(params)
    data = open_dataset(data_dir, dataset, exp.processed.get(dataset))
    trial_data = TrialData(data.load(data.train_users(pct)), data.load(data.validation_users), data.n_classes,
                           data.n_contexts)
    amplification = privacy_params(params).amplification if dp else "none"
    check_sampling(exp.settings, pairs, dp, len(trial_data.train), amplification)  # before any trial is fitted
    test = list(data.load(data.test_users).values())
    return exp, trial_data, test, retrain_seed(exp, dataset, pct, 0)


def app_config(runs_dir: Path, dataset: str, method: str, pct: str, budget: BudgetSpec) -> dict[str, Any]:
    """The selected config of ``method`` at the share (runs/select/.../best.json, selected under
    params.yaml's ``budget`` as it is now), λ left out."""
    return {k: v for k, v in selected_config(runs_dir, dataset, method, pct, budget).items() if k != "lambda"}


def private_config(runs_dir: Path, dataset: str, app: str, pct: str, budget: BudgetSpec,
                   cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The private trial's config of ``app``: ``cfg`` (λ left out: IncFed and FedIP choose it on the
    validation users after their one release); DP-FedAvg's keeps best.json's λ, at which it trains
    its one release, as the privacy-extra stage's trial does (esnfed_stages.studies.privacy)."""
    if not Method.parse(app).readout_per_lambda:
        return dict(cfg)
    return {**cfg, "lambda": selected_config(runs_dir, dataset, app, pct, budget)["lambda"]}


def trial_inputs(dataset: str, method: str, pct: str, params: Mapping[str, Any], data_dir: Path,
                 runs_dir: Path, secagg: bool = False) -> tuple[Any, TrialData, list, dict[str, Any], int]:
    """:func:`share_inputs` with the selected config of ``method`` (one app's trial, plain or SecAgg+)."""
    exp, trial_data, test, seed = share_inputs(dataset, pct, params, data_dir, [(method, secagg)])
    return exp, trial_data, test, app_config(runs_dir, dataset, method, pct, exp.budget_spec), seed


def check_args(pairs: Sequence[tuple[str, bool]], pct: str, python: Path) -> None:
    """One line naming the option when an (app, --secagg) pair, the share or the Flower environment
    is wrong (every app, FedCLIP's included); every pair is checked before the environment, so a
    bad --app is named as such wherever the environment is missing."""
    for app, secagg in pairs:
        if app not in FLOWER_APPS + FEDCLIP_APPS:
            raise ConfigError(f"esnfed flower: --app must be one of {', '.join(FLOWER_APPS + FEDCLIP_APPS)}, "
                              f"got {quote(app)}")
        if secagg and app not in SECAGG_APPS:
            raise ConfigError(f"esnfed flower: --secagg is for {', '.join(SECAGG_APPS)}, not {app}")
    if pct not in PCTS:
        raise ConfigError(f"esnfed flower: --pct must be one of {', '.join(PCTS)}, got {quote(pct)}")
    if not Path(python).is_file():
        raise ConfigError(f"{python}: the Flower environment is missing: {ENV_HINT}")


Progress = Callable[[int, int], None]  # (steps done, steps in all) of run_many / flower_fedclip.run


def progress_steps(pairs: Sequence[tuple[str, bool]]) -> int:
    """The steps `esnfed flower` reports for ``pairs``: run_many fits each stationary app's
    pipeline trial once, then runs one Flower simulation; flower_fedclip.run, per FedCLIP pair,
    one fit and one simulation."""
    stationary = {a for a, _ in pairs if a not in FEDCLIP_APPS}
    return (len(stationary) + 1 if stationary else 0) + 2 * sum(a in FEDCLIP_APPS for a, _ in pairs)


def run(dataset: str, app: str, secagg: bool, pct: str, params: Mapping[str, Any], *,
        data_dir: Path = Path("data"), runs_dir: Path = Path("runs"), out_dir: Path = MANUAL_DIR,
        python: Path | None = None, timeout_s: float = 1800.0) -> dict[str, Any]:
    """Compute and write <out_dir>/<dataset>-<app>[-secagg][-f<f>]-<pct>.json (:func:`out_name`);
    returns its document."""
    return run_many(dataset, [(app, secagg)], pct, params, data_dir=data_dir, runs_dir=runs_dir,
                    out_dir=out_dir, python=python, timeout_s=timeout_s)[0]


def run_many(dataset: str, apps: Sequence[tuple[str, bool]], pct: str, params: Mapping[str, Any], *,
             data_dir: Path = Path("data"), runs_dir: Path = Path("runs"), out_dir: Path = MANUAL_DIR,
             python: Path | None = None, timeout_s: float = 1800.0,
             progress: Progress | None = None, dp: DPRequest | None = None) -> list[dict[str, Any]]:
    """`run` for several (app, SecAgg+) pairs at once: each app's pipeline trial is fitted once
    (plain and SecAgg+ share it), the clients' data written once, and every Flower app runs in one
    Flower process and Ray session (``timeout_s`` per app). Writes one JSON per pair, in order;
    nothing is written when a pair is invalid or a simulation fails. ``progress(done, total)``:
    after each fit and after the simulation (:func:`progress_steps`). ``dp``: every pair under
    the mechanism (module docstring), beside the private trial of the same seed."""
    if not apps:
        raise ConfigError("esnfed flower: no --app given")
    python = flower_python() if python is None else python
    check_args(apps, pct, python)
    if dp is not None:
        check_dp(apps, dp)
    for app, _ in apps:
        if app in FEDCLIP_APPS:
            raise ConfigError(f"esnfed flower: {app} runs through esnfed_stages.studies.flower_fedclip.run")
    apps = list(dict.fromkeys(apps))
    exp, trial_data, test, seed = share_inputs(dataset, pct, params, data_dir, apps, dp is not None)
    spec = dp_spec(params, dataset, trial_data, dp.epsilon) if dp is not None else None
    seeds = sub_seeds(seed)
    bs = exp.settings.batch_size
    trials = {}  # app -> (config, the pipeline's model, its test accuracy): one fit per app
    private = {}  # app -> (the private trial's model, its test accuracy) under ``dp``
    total = progress_steps(apps)
    for app in dict.fromkeys(a for a, _ in apps):
        if progress:
            progress(len(trials), total)
        cfg = app_config(runs_dir, dataset, app, pct, exp.budget_spec)
        model = fit(Method.parse(app), cfg, seed, trial_data, exp.settings, score=True)
        trials[app] = cfg, model, float(pooled_counts(model.reservoir, test, model.readout, bs).accuracy[0])
        if spec is not None:
            pcfg = private_config(runs_dir, dataset, app, pct, exp.budget_spec, cfg)
            pm = fit_private(Method.parse(app), pcfg, seed, trial_data, exp.settings, spec)
            private[app] = pm, float(pooled_counts(pm.reservoir, test, pm.readout, bs).accuracy[0])
    if progress:
        progress(len(trials), total)
    lams = {app: float(trials[app][1].lam) for app, _ in apps}  # the trial's λ (DP: the apps solve the grid)
    for app in private:  # DP-FedAvg releases one readout, at the private trial's λ
        if Method.parse(app).readout_per_lambda:
            lams[app] = float(private[app][0].lam)
    rcs = [run_config(trials[app][0], seeds, trial_data, exp.settings, lams[app], app, secagg) for app, secagg in apps]
    # each app's spec as its private trial's (sampled FedIP under privacy.amplification: sampling: amplified z)
    specs = {app: trial_spec(Method.parse(app), trials[app][0], trial_data, exp.settings, spec)
             for app in trials} if spec is not None else {}
    if spec is not None:
        rcs = [{**rc, **dp_run_config(specs[app], dp.noise_for(secagg), releases(Method.parse(app), trials[app][0]),
                                      seed, exp.settings, app)} for rc, (app, secagg) in zip(rcs, apps)]
    with tempfile.TemporaryDirectory(prefix="esnfed-flower-") as tmp:
        gots = simulate(Path(python), rcs, trial_data, Path(tmp), timeout_s * len(apps))
    if progress:
        progress(total, total)
    docs = []
    for (app, secagg), got, rc in zip(apps, gots, rcs):
        m = Method.parse(app)
        cfg, model, pipeline_acc = trials[app]
        res = make_reservoir(cfg, trial_data.n_inputs, seeds["reservoir"])
        if "gain" in got:
            res = res.with_ip(got["gain"], got["bias"])
        readout, lam = got["readout"], lams[app]
        if spec is not None and m.readout_per_lambda:  # one release at the private trial's λ: nothing to choose
            model, pipeline_acc = private[app]
        elif spec is not None:  # one readout per λ: chosen on the validation users, as fit_private chooses
            lambdas = [float(x) for x in exp.settings.lambdas]
            best, _ = select_lambda(pooled_counts(res, list(trial_data.validation.values()), readout, bs), lambdas)
            readout, lam = readout[best], lambdas[best]
            model, pipeline_acc = private[app]
        flower_acc = float(pooled_counts(res, test, readout, bs).accuracy[0])
        diff = float(np.linalg.norm(readout - model.readout) / np.linalg.norm(model.readout))
        doc = {"dataset": dataset, "app": app, "secagg": secagg, "pct": pct, "seed": seed, "config": cfg,
               "lambda": lam, "n_clients": len(trial_data.train), "n_classes": trial_data.n_classes,
               **fraction_record(rc), "version": __version__, provenance.KEY: provenance.record({"budget": exp.budget}),
               **({"readout_bias": True} if exp.settings.readout_bias else {}),  # readout.bias: N+1 columns
               "flower": {"test_accuracy": flower_acc, "readout_relative_difference": diff,
                          "bytes": got["bytes"], **({"secagg": got["secagg"]} if "secagg" in got else {})},
               "pipeline": {"test_accuracy": pipeline_acc, "communication": trials[app][1].communication}}
        if "gain" in got:
            doc["flower"]["ip_max_abs_difference"] = float(max(np.max(np.abs(got["gain"] - model.reservoir.gain)),
                                                               np.max(np.abs(got["bias"] - model.reservoir.bias))))
        if spec is not None:
            n_rel = releases(m, cfg)
            doc["dp"] = dp_record(specs[app], dp.noise_for(secagg), n_rel,
                                  int(cfg["units"]) + exp.settings.readout_bias, m.uses_ip, got.get("secagg"),
                                  fedavg=m.readout_per_lambda)
            doc["pipeline"].update({"lambda": float(model.lam), "nonprivate_test_accuracy": trials[app][2]})
        docs.append(doc)
    for doc in docs:
        out = Path(out_dir) / out_name(dataset, doc["app"], doc["secagg"], pct, dp.epsilon if dp else None,
                                       doc.get("client_fraction"))
        with output_lock(out):
            write_json(out, doc)
    return docs


