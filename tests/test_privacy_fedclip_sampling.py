"""Tests of FedCLIP's roster-sampled IP rounds (federated.sampling_pool: roster) and DP-FedCLIP with
client sampling (esnfed_core.continual, esnfed_core.private_trial): each round draws max(1, ⌊f·K⌋)
of ALL K training clients from (K, f, the IP seed, the round) only and the drawn clients with
windows at the context train; f = 1 is the context pool bit for bit; ε = ∞ DP-FedCLIP is the
non-private roster trial bit for bit; a private round divides by the public m (hand-built: a round
whose drawn client has no windows releases start + noise / m); the amplified accounting counts
T·budget sampled rounds and T readouts; the context pool is refused in one line naming the key;
default settings and records are unchanged."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from esnfed_core.continual import ContinualConfig, make_strategy, run_continual
from esnfed_core.errors import ConfigError
from esnfed_core.messages import CommLedger
from esnfed_core.method import Method
from esnfed_core.privacy import DPSpec, noise_multiplier, sampled_epsilon_of, sampled_noise_multiplier
from esnfed_core.private_trial import fit_private, noise_rng, releases, trial_spec
from esnfed_core.reservoir import DTYPE
from esnfed_core.sampling import sample_clients, sample_size
from esnfed_core.settings import Settings
from esnfed_core.trial import _ip_config, continual_contexts, fit, make_reservoir, sub_seeds
from dp_spies import spy_aggregate, spy_multipliers
from experiment_data import trial_data

CONFIG = {"units": 10, "spectral_radius": 0.9, "leak": 0.5, "input_scaling": 0.8, "sigma": 0.3,
          "budget": 2, "local_epochs": 1}
STRATEGIES = ["fedclip-naive", "fedclip-replay"]
GAPS = {"u0": (0, 1), "u2": (2,), "u3": (0, 2)}
SPEC = DPSpec(4.0, 1e-3, clip=0.05, ip_clip=0.01)


def _settings(fraction: float = 1.0, pool: str | None = None) -> Settings:
    return Settings(lambdas=(1e-4, 1e-2, 1.0), batch_size=5, ip={"batch_size": 4}, client_fraction=fraction,
                    **({} if pool is None else {"sampling_pool": pool}))


def _without(data, missing: dict[str, tuple[int, ...]]):
    """``data`` with each named training client's windows of the given contexts removed."""
    train = dict(data.train)
    for name, contexts in missing.items():
        u = train[name]
        train[name] = u.select(~np.isin(u.context, contexts))
    return dataclasses.replace(data, train=train)


def _gappy(seed: int = 0):
    """The toy federation (K = 4, 3 contexts) where u0 has no windows at contexts 0 and 1, u2 at 2,
    u3 at 0 and 2 (replay: u0 and u3 sit out context 0, u0 context 1; their buffers fill later)."""
    return _without(trial_data(seed, pct="100")[0], GAPS)


def _same_model(a, b) -> None:
    for key in ("context_gain", "context_bias", "context_readout"):
        assert getattr(a, key).tobytes() == getattr(b, key).tobytes(), key
    assert a.validation == b.validation


def _senders(method: str, data, settings: Settings, seed: int) -> list[set[str]]:
    """The clients that uploaded (g, b) in each IP round of a FedCLIP run whose IP seed is ``seed``
    (a trial of seed s: sub_seeds(s)["ip"]), from the ledger's records."""
    m = Method.parse(method)
    train, validation, _ = continual_contexts(m, data)
    ledger = CommLedger()
    cfg = ContinualConfig(True, _ip_config(CONFIG, settings), data.n_classes, seed=seed,
                          client_fraction=settings.client_fraction, sampling_pool=settings.sampling_pool)
    res = make_reservoir(CONFIG, data.n_inputs, 0)
    run_continual(res, train, make_strategy(m.strategy, budget=CONFIG["budget"]), cfg, ledger=ledger,
                  client_names=list(data.train))
    rounds = data.n_contexts * CONFIG["budget"]
    return [{e.client for e in ledger.entries if e.algorithm == "fedclip" and e.direction == "up" and e.round == r}
            for r in range(rounds)]


@pytest.mark.parametrize("method", STRATEGIES)
def test_the_roster_draw_does_not_depend_on_the_data(method):
    """Round r's senders are the drawn clients sample_clients(K, f, seed, r), a function of neither
    the windows nor who has windows, that take part at r's context (windows there; replay: or in its
    buffer); with other data (another
    seed, other gaps) the drawn sets are the same. The context pool draws among the participants:
    its sets change with the gaps (so the test would catch a draw over the participants)."""
    k, f, seed = 4, 0.5, 7
    names = ["u0", "u1", "u2", "u3"]
    drawn = [{names[i] for i in sample_clients(k, f, seed, r)} for r in range(3 * CONFIG["budget"])]
    gaps = [{}, {"u1": (1,), "u2": (2,), "u3": (2,)}, GAPS]
    for data_seed, gap in zip((0, 1, 2), gaps):
        data = _without(trial_data(data_seed, pct="100")[0], gap)
        got = _senders(method, data, _settings(f, "roster"), seed)
        for r, sent in enumerate(got):
            t = r // CONFIG["budget"]
            # replay: a client without windows at t still trains on its buffer of earlier contexts
            participants = {n for n in names if any(s not in gap.get(n, ())
                                                    for s in (range(t + 1) if "replay" in method else (t,)))}
            assert sent == drawn[r] & participants, (data_seed, r)
    full = _senders(method, trial_data(0, pct="100")[0], _settings(f, "roster"), seed)
    assert full == drawn  # every client has every context: the draw itself
    context = _senders(method, _gappy(), _settings(f), seed)
    assert context != _senders(method, _gappy(), _settings(f, "roster"), seed)


@pytest.mark.parametrize("method", STRATEGIES)
def test_at_fraction_one_the_roster_is_the_context_pool_bit_for_bit(method):
    """f = 1: nothing is drawn, every participant trains in every round, whichever pool; private
    too (the same noise, divided by K); and the records do not name the pool."""
    data = _gappy()
    ctx, roster = _settings(1.0, "context"), _settings(1.0, "roster")
    a, b = fit(method, CONFIG, 7, data, ctx, score=True), fit(method, CONFIG, 7, data, roster, score=True)
    _same_model(a, b)
    assert a.communication == b.communication and "sampling_pool" not in b.communication
    _same_model(fit_private(method, CONFIG, 7, data, ctx, SPEC), fit_private(method, CONFIG, 7, data, roster, SPEC))
    assert roster.used_by(Method.parse(method), True) == ctx.used_by(Method.parse(method), True)


@pytest.mark.parametrize("method", STRATEGIES)
def test_infinite_epsilon_is_the_nonprivate_roster_trial_bit_for_bit(method):
    """The DP aggregate hook at ε = ∞ (norms recorded) is the window-weighted mean over the drawn
    participants, as the non-private roster round's: the same bits; one norm per upload; and the
    roster run differs from the context pool's on this gappy federation."""
    data, settings = _gappy(), _settings(0.5, "roster")
    norms: list[float] = []
    got = fit_private(method, CONFIG, 7, data, settings, DPSpec(math.inf, 1e-3), ip_norms=norms)
    want = fit(method, CONFIG, 7, data, settings, score=True)
    _same_model(got, want)
    assert len(norms) == sum(len(s) for s in _senders(method, data, settings, sub_seeds(7)["ip"]))
    assert want.communication["sampling_pool"] == "roster" and want.communication["client_fraction"] == 0.5
    assert not np.array_equal(want.context_gain, fit(method, CONFIG, 7, data, _settings(0.5), score=True).context_gain)


def test_a_round_without_drawn_participants_leaves_the_model_and_releases_noise_over_m():
    """One context, budget 1, K = 4, f = 0.25 (m = 1): the drawn client has no windows. Non-private:
    no upload, (g, b) stays (1, 0). Private: the release is start + N(0, (z·C_ip)²) / m by hand, the
    noise the trial's first draw (z for its 2 releases); float64 then cast to the reservoir's
    float32, the same operations: equal bits. The readout still sums the 3 other clients."""
    data, _ = trial_data(0, pct="100", n_contexts=1)
    cfg = {**CONFIG, "budget": 1}
    seed = 7
    k, m = 4, sample_size(4, 0.25)
    (drawn,) = sample_clients(k, 0.25, sub_seeds(seed)["ip"], 0)
    data = _without(data, {list(data.train)[drawn]: (0,)})
    settings = _settings(0.25, "roster")
    plain = fit("fedclip-naive", cfg, seed, data, settings, score=True)
    assert np.array_equal(plain.context_gain[0], np.ones(10, DTYPE)) and not plain.context_bias[0].any()
    assert plain.communication["participants"] == [3] and np.any(plain.context_readout[0])
    assert plain.communication["ip_senders"] == [0]
    # ε = ∞ through the DP hook (norms recorded: none, nobody uploaded): the same bits
    norms: list[float] = []
    _same_model(fit_private("fedclip-naive", cfg, seed, data, settings, DPSpec(math.inf, 1e-3), ip_norms=norms), plain)
    assert norms == []
    spec = DPSpec(2.0, 1e-3, ip_clip=0.02)
    private = fit_private("fedclip-naive", cfg, seed, data, settings, spec)
    n_rel = releases(Method.parse("fedclip-naive"), cfg, 1)
    assert n_rel == 2
    noise = noise_rng(seed).normal(0.0, noise_multiplier(2.0, 1e-3, n_rel) * 0.02, 20)
    start = np.concatenate([np.ones(10), np.zeros(10)])
    want = (start + (np.zeros(20) + noise) / m).astype(DTYPE)
    assert np.concatenate([private.context_gain[0], private.context_bias[0]]).tobytes() == want.tobytes()
    # dividing by the 3 participants (or by K) would give another release
    assert not np.allclose(want, (start + noise / 3).astype(DTYPE))


@pytest.mark.parametrize("fraction", [0.25, 0.5, 0.75])
def test_private_rounds_divide_by_the_public_m_and_sum_the_drawn_participants(fraction, monkeypatch):
    """The aggregate is built with clients = m = max(1, ⌊f·K⌋) (not K, not the uploads) and each
    round receives exactly the drawn participants' uploads (possibly none); the count of releases
    and z are the unsampled ones."""
    data, settings = _gappy(), _settings(fraction, "roster")
    seen = spy_aggregate(monkeypatch)
    model = fit_private("fedclip-replay", CONFIG, 7, data, settings, SPEC)
    assert seen["clients"] == sample_size(4, fraction) < 4
    assert seen["uploads"] == [len(s) for s in _senders("fedclip-replay", data, settings, sub_seeds(7)["ip"])]
    assert seen["releases"] == data.n_contexts * (CONFIG["budget"] + 1)
    assert np.all(np.isfinite(model.context_readout))


@pytest.mark.parametrize("method", STRATEGIES)
def test_the_context_pool_is_refused_under_dp_in_one_line_naming_the_key(method):
    data = _gappy()
    with pytest.raises(ConfigError) as err:
        fit_private(method, CONFIG, 0, data, _settings(0.5), SPEC)
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"federated.client_fraction: DP-{method} needs "
                                              "federated.sampling_pool: roster ")
    # the roster runs; f = 1 needs no pool
    fit_private(method, CONFIG, 0, data, _settings(0.5, "roster"), SPEC)
    fit_private(method, CONFIG, 0, data, _settings(1.0), SPEC)


def test_amplified_accounting_counts_t_budget_sampled_rounds_and_t_readouts(monkeypatch):
    """privacy.amplification: sampling: the spec carries (T·budget, m, K, T); its z is the RDP
    calibration of T·budget sampled rounds and T unsampled readouts, meets ε (recomputed) and is
    tight (2 % less misses it), exceeds the z of one unsampled release (FedIP's shape: more
    releases, more noise), and both mechanisms of the trial are built with it. Without
    amplification: the PLD z of T·(budget + 1), as without sampling."""
    data, settings = _gappy(), _settings(0.5, "roster")
    m = Method.parse("fedclip-naive")
    t, budget, k = data.n_contexts, CONFIG["budget"], 4
    amp = DPSpec(4.0, 1e-3, clip=0.05, ip_clip=0.01, amplification="sampling")
    spec = trial_spec(m, CONFIG, data, settings, amp)
    assert spec.sampled == (t * budget, 2, k, t)
    n_rel = releases(m, CONFIG, t)
    z = spec.multiplier(n_rel)
    assert z == sampled_noise_multiplier(4.0, 1e-3, t * budget, 2, k, t)
    assert sampled_epsilon_of(z, 1e-3, t * budget, 2, k, t) <= 4.0 < sampled_epsilon_of(0.98 * z, 1e-3, t * budget, 2, k, t)
    assert z > sampled_noise_multiplier(4.0, 1e-3, t * budget, 2, k)  # T readouts cost more than 1
    with pytest.raises(ValueError, match=r"releases: 7, but the sampled trial has 6 rounds \+ 3 releases"):
        spec.multiplier(n_rel - 2)
    assert trial_spec(m, CONFIG, data, _settings(1.0, "roster"), amp).sampled is None  # f = 1: unamplified
    assert trial_spec(m, CONFIG, data, settings, SPEC) is SPEC  # amplification none
    zs = spy_multipliers(monkeypatch)
    fit_private("fedclip-naive", CONFIG, 7, data, settings, amp)
    assert zs == [("rounds", z)] + [("readout", z)] * t
    zs.clear()
    fit_private("fedclip-naive", CONFIG, 7, data, settings, SPEC)
    assert zs == [("rounds", noise_multiplier(4.0, 1e-3, n_rel))] + [("readout", noise_multiplier(4.0, 1e-3, n_rel))] * t


def test_defaults_are_unchanged_and_fedip_ignores_the_pool():
    """The default pool is context: a default trial's keys and records name no pool, an explicit
    context pool is the default bit for bit, and the roster does not touch FedIP (its rounds
    have no contexts) or a sampled FedCLIP's trial keys at f = 1."""
    data = _gappy()
    assert Settings().sampling_pool == "context"
    for method in ("fedclip-naive", "fedip"):
        assert "sampling_pool" not in Settings().used_by(Method.parse(method), True)
    assert _settings(0.5, "roster").used_by(Method.parse("fedclip-naive"), True)["sampling_pool"] == "roster"
    assert "sampling_pool" not in _settings(0.5, "roster").used_by(Method.parse("fedip"), True)
    _same_model(fit("fedclip-replay", CONFIG, 7, data, _settings(0.5), score=True),
                fit("fedclip-replay", CONFIG, 7, data, _settings(0.5, "context"), score=True))
    cfg = {k: v for k, v in CONFIG.items() if k != "budget"} | {"rounds": 2}
    full = trial_data(0, pct="100")[0]
    a = fit("fedip", cfg, 3, full, _settings(0.5, "roster"))
    b = fit("fedip", cfg, 3, full, _settings(0.5))
    assert a.reservoir.gain.tobytes() == b.reservoir.gain.tobytes() and a.communication == b.communication


@pytest.mark.parametrize("pool", ["Roster", "all", 1])
def test_a_bad_pool_is_refused_in_one_line(pool):
    from esnfed_stages.params.experiment import experiment_params  # noqa: PLC0415
    from experiment_data import small_params  # noqa: PLC0415

    with pytest.raises(ConfigError) as err:
        _settings(0.5, pool)
    assert str(err.value).startswith("federated.sampling_pool: expected one of context, roster, got ")
    params = small_params()
    params["federated"] = {"client_fraction": 0.5, "sampling_pool": pool}
    with pytest.raises(ConfigError) as err:
        experiment_params(params)
    assert "\n" not in str(err.value)
    assert str(err.value).startswith("params.yaml: 'federated.sampling_pool' must be one of context, roster, got ")
    from esnfed_stages.params.schema import validate  # noqa: PLC0415 (esnfed check-params)

    with pytest.raises(ConfigError) as err:
        validate(params)
    assert "\n" not in str(err.value) and str(err.value).startswith("params.yaml: federated.sampling_pool: ")


def test_the_flower_fedclip_apps_refuse_the_roster_in_one_line():
    """Their server (esnfed_flower.common.Sampling) draws among a context's participants: a roster
    pool is refused before any run config is built, naming the key; FedIP's apps are unaffected."""
    from esnfed_stages.studies.flower import sampling_run_config  # noqa: PLC0415

    settings = _settings(0.5, "roster")
    for app in STRATEGIES + ["fedclip-joint"]:
        with pytest.raises(ConfigError) as err:
            sampling_run_config(settings, app, False, 4)
        assert "\n" not in str(err.value) and str(err.value).startswith("federated.sampling_pool: roster is not ")
        assert sampling_run_config(_settings(0.5), app, False, 4) == {"client-fraction": 0.5}
    assert sampling_run_config(settings, "fedip", False, 4) == {"client-fraction": 0.5}


def test_the_privacy_stage_runs_roster_sampled_dp_fedclip_and_records_it(tmp_path):
    """`esnfed privacy --extra fedclip-naive` at f = 0.5 with the roster pool: the document records
    the fraction, the pool and the accounting (none: the PLD z of T·(budget + 1) releases)."""
    import json  # noqa: PLC0415

    from experiment_data import cli_ok, make_dataset, small_params, stage_options, write_params  # noqa: PLC0415

    make_dataset(tmp_path)
    params = small_params()
    params["federated"] = {"client_fraction": 0.5, "sampling_pool": "roster"}
    params["privacy"]["extra_methods"] = ["fedclip-naive"]
    params["privacy"]["config"] = "select"  # the opt-in methods retrain the select stage's configs
    params["privacy"]["epsilons"] = [4.0]
    write_params(tmp_path, params)
    common = stage_options(tmp_path)
    for algo in (["fedip"], ["fedclip", "--strategy", "naive"]):  # fedclip's grid starts from fedip's best
        cli_ok("select", "--algo", *algo, "--pct", str(params["privacy"]["pct"]), *common)
    cli_ok("privacy", *common, "--extra", "fedclip-naive", "--out-dir", str(tmp_path / "privacy"))
    doc = json.loads((tmp_path / "privacy" / "extra" / "wesad" / "fedclip-naive.json").read_text())
    assert doc["client_fraction"] == 0.5 and doc["sampling_pool"] == "roster" and doc["amplification"] == "none"
    row = doc["methods"]["fedclip-naive"]
    assert row["releases"] == 3 * (int(row["config"]["budget"]) + 1)  # make_dataset: 3 contexts
    assert row["epsilons"]["4"]["noise_multiplier"] == noise_multiplier(4.0, doc["delta"], row["releases"])
    assert all(0.0 <= a <= 1.0 for cell in row["epsilons"].values() for a in cell["test_accuracy"])


@pytest.mark.parametrize("method", STRATEGIES)
def test_the_communication_record_counts_the_roster_senders(method):
    """A roster trial records the client-rounds that sent (g, b) at each context (``ip_senders``:
    the drawn participants, which max(1, ⌊f·P_t⌋) would not give); the communication table's
    analytic totals from it match the counted messages, and its participations add the readouts'."""
    from esnfed_core.communication import Communication, check_communication, communication_rows  # noqa: PLC0415

    data, settings = _gappy(), _settings(0.5, "roster")
    comm = fit(method, CONFIG, 7, data, settings, score=True).communication
    sent = _senders(method, data, settings, sub_seeds(7)["ip"])
    b = CONFIG["budget"]
    assert comm["ip_senders"] == [sum(len(s) for s in sent[t * b:(t + 1) * b]) for t in range(data.n_contexts)]
    check_communication("communication", comm, True)
    item = Communication("mine", "100", method, comm["up_floats"], comm["down_floats"], comm["up_bytes"],
                         comm["down_bytes"], comm["rounds"], comm["clients"], units=CONFIG["units"],
                         classes=data.n_classes, participants=tuple(comm["participants"]),
                         context_rounds=tuple(comm["context_rounds"]), client_fraction=comm["client_fraction"],
                         ip_senders=tuple(comm["ip_senders"]))
    row = communication_rows([item])[0]
    assert row["match"] is True and (row["analytic_up_floats"], row["analytic_down_floats"]) == (
        comm["up_floats"], comm["down_floats"])
    assert row["participations"] == sum(comm["ip_senders"]) + sum(comm["participants"])
    # the context pool's rule would count other senders here (so the record is needed)
    assert comm["ip_senders"] != [sample_size(p, 0.5) * b for p in comm["participants"]]


def test_the_report_mechanism_line_says_which_fedclip_rounds_drew_over_the_roster():
    """The privacy table's mechanism line: K for the default; the datasets whose DP-FedCLIP document
    records the roster pool are named with their public m."""
    from esnfed_stages.report.privacy_report import _fedavg_mechanism  # noqa: PLC0415

    plain = {"methods": {"fedclip-naive": {}}}
    assert "(K: all training clients)" in _fedavg_mechanism({"wesad": plain})
    line = _fedavg_mechanism({"wesad": plain, "hhar": {**plain, "sampling_pool": "roster"}})
    assert "HHAR: each round m of them drawn over the roster, / m (federated.sampling_pool roster)" in line
    assert "WESAD" not in line
