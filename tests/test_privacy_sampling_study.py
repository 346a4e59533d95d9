"""The opt-in sampling study of the privacy stage (params privacy.sampling_study, `esnfed privacy
--sampling F`, stage privacy-sampling) through the CLI on a tiny dataset: its documents hold z from
the accountant's own calibration for (R, m, K), σ = z·C, ε = ∞ the non-private sampled trial and
f = 1 the privacy stage's DP-FedIP numbers bit for bit; the default document keeps its bytes; the
report renders privacy-sampling.md and refuses a stale or missing document; bad params fail in one
line naming the key, with no output."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from esnfed_core.errors import ConfigError, DataError
from esnfed_core.privacy import stats_bound
from esnfed_core.sampling import sample_size
from esnfed_stages.report import privacy_report, privacy_sampling_report, report
from esnfed_stages.report.report_params import report_params
from esnfed_stages.params.schema import embedded_read, validate
from esnfed_stages.params.privacy import privacy_params
from esnfed_stages.layout import sampling_path
from experiment_data import cli_fails, cli_ok, make_dataset, read_params, small_params, stage_options, write_params

pytestmark = pytest.mark.pipeline
STUDY = {"fractions": [0.5, 1], "amplification": ["none", "sampling"]}
PRIVACY = {"epsilons": [4.0, float("inf")], "delta": "auto", "relation": "user", "clip": 0.05, "ip_clip": 0.1,
           "pct": "100", "methods": ["incfed", "fedip"], "sampling_study": STUDY}


def _base_params() -> dict:
    params = small_params()
    params["datasets"] = params["continual_datasets"] = params["study_datasets"] = ["wesad"]
    params["imported"] = {}  # the example not declared: nothing to import
    params["embedded"] = embedded_read(params)  # wesad's embedded data only
    params["privacy"] = dict(PRIVACY)
    return params


@pytest.fixture(scope="module")
def root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("privacy-sampling")
    make_dataset(root)
    write_params(root, _base_params())
    for algo in ("incfed", "fedip"):
        cli_ok("select", "--algo", algo, "--pct", "100", *stage_options(root))
    options = [*stage_options(root), "--out-dir", str(root / "runs" / "privacy")]
    cli_ok("privacy", *options)
    cli_ok("privacy", *options, "--sampling", "0.5", "--sampling", "1")
    return root


def _doc(root: Path, fraction: str) -> dict:
    return json.loads(sampling_path(root / "runs" / "privacy", "wesad", fraction).read_text())


def _main(root: Path) -> dict:
    return json.loads((root / "runs" / "privacy" / "wesad.json").read_text())


def test_the_document_records_what_it_ran(root):
    doc = _doc(root, "0.5")
    assert doc["client_fraction"] == 0.5 and doc["n_users"] == 4 and doc["sample_size"] == sample_size(4, 0.5) == 2
    assert doc["method"] == "fedip" and doc["releases"] == int(doc["config"]["rounds"]) + 1
    assert list(doc["accountings"]) == ["none", "sampling"]
    assert all(list(cells) == ["4", "inf"] for cells in doc["accountings"].values())
    assert "replace-one" in doc["accountants"]["sampling"] and "PLD" in doc["accountants"]["none"]
    assert doc["params"] == privacy_params(read_params(root)).record("default", extra=True, study=True)
    assert doc["params"]["privacy.sampling_study"] == STUDY
    assert doc["seeds"] == _main(root)["seeds"] and len(doc["seeds"]) == 2
    # f = 1 samples no round: the accountings coincide, so none alone
    assert list(_doc(root, "1")["accountings"]) == ["none"] and _doc(root, "1")["sample_size"] == 4


def test_z_and_sigma_are_the_accountants_calibration(root):
    """z of each accounting meets ε = 4 at the document's δ, and tightly (2 % less noise misses it),
    by dp_accounting's own API called here with the documented parameters, not through the
    project's calibration: unamplified, R + 1 Gaussian mechanisms of noise multiplier z under PLD
    (add/remove); amplified, R rounds sampling m of K without replacement plus the IncFed release,
    RDP under replace-one, whose noise multiplier is σ / (2·clip) = z / 2. σ of the round's sum is
    z·ip_clip and σ of the IncFed release z·clip·√(N + N²) (exact: the stage multiplies the same floats)."""
    import dp_accounting  # noqa: PLC0415
    from dp_accounting.pld import pld_privacy_accountant  # noqa: PLC0415
    from dp_accounting.rdp import rdp_privacy_accountant  # noqa: PLC0415

    doc = _doc(root, "0.5")
    rounds, k, m, delta = int(doc["config"]["rounds"]), doc["n_users"], doc["sample_size"], doc["delta"]
    none, amp = doc["accountings"]["none"]["4"], doc["accountings"]["sampling"]["4"]

    def pld_epsilon(z: float) -> float:
        acc = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-3)
        acc.compose(dp_accounting.GaussianDpEvent(z), rounds + 1)
        return acc.get_epsilon(delta)

    def rdp_epsilon(z: float) -> float:
        gauss = dp_accounting.GaussianDpEvent(z / 2)
        acc = rdp_privacy_accountant.RdpAccountant(neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_ONE)
        acc.compose(dp_accounting.ComposedDpEvent([dp_accounting.SelfComposedDpEvent(
            dp_accounting.SampledWithoutReplacementDpEvent(k, m, gauss), rounds), gauss]))
        return acc.get_epsilon(delta)

    for epsilon_of_z, z in ((pld_epsilon, none["noise_multiplier"]), (rdp_epsilon, amp["noise_multiplier"])):
        assert z > 0 and epsilon_of_z(z) <= 4.0 * (1 + 1e-3) and epsilon_of_z(0.98 * z) > 4.0
    assert amp["noise_multiplier"] != none["noise_multiplier"]
    n = int(doc["config"]["units"])
    for cell in (none, amp):
        assert cell["sigma_round"] == cell["noise_multiplier"] * 0.1
        assert cell["sigma_release"] == cell["noise_multiplier"] * (0.05 * stats_bound(n))
    assert doc["accountings"]["none"]["inf"] == doc["accountings"]["sampling"]["inf"]
    assert doc["accountings"]["none"]["inf"]["noise_multiplier"] == 0.0


def test_fraction_one_is_the_privacy_stages_dp_fedip_bit_for_bit(root):
    """The study at f = 1 retrains what the privacy stage retrains (the same seeds, noise and
    accountant): the same z and the same test accuracies, at every ε."""
    fedip = _main(root)["methods"]["fedip"]
    cells = _doc(root, "1")["accountings"]["none"]
    assert set(cells) == set(fedip["epsilons"])
    for eps, cell in cells.items():
        assert cell["noise_multiplier"] == fedip["epsilons"][eps]["noise_multiplier"]
        assert cell["test_accuracy"] == fedip["epsilons"][eps]["test_accuracy"]


def test_infinite_epsilon_is_the_nonprivate_sampled_trial(root):
    """ε = ∞ at f = 0.5 is the non-private FedIP trial with federated.client_fraction 0.5."""
    from dataclasses import replace

    from esnfed_core.scoring import accuracy
    from esnfed_core.trial import TrialData, fit
    from esnfed_stages.params.experiment import experiment_params
    from esnfed_stages.experiment.best import retrain_seed, selected_config
    from esnfed_stages.experiment.trial_data import open_dataset

    exp = experiment_params(read_params(root))
    settings = replace(exp.settings, client_fraction=0.5)
    data = open_dataset(root / "data", "wesad")
    trial = TrialData(data.load(data.train_users("100")), data.load(data.validation_users), data.n_classes,
                      data.n_contexts)
    test = list(data.load(data.test_users).values())
    cfg = {k: v for k, v in selected_config(root / "runs", "wesad", "fedip", "100", exp.budget_spec).items()
           if k != "lambda"}
    plain = []
    for k in range(exp.retrains):
        m = fit("fedip", cfg, retrain_seed(exp, "wesad", "100", k), trial, settings, score=True)
        plain.append(accuracy(m.reservoir, m.readout, test, settings.batch_size))
    assert _doc(root, "0.5")["accountings"]["none"]["inf"]["test_accuracy"] == plain


def test_the_default_document_keeps_its_bytes(root, tmp_path):
    """The privacy stage's own document records no sampling_study, and is byte for byte the one of
    params without the key (the default pipeline's outputs do not change)."""
    assert "privacy.sampling_study" not in _main(root)["params"]
    params = read_params(root)
    del params["privacy"]["sampling_study"]
    write_params(tmp_path, params)
    cli_ok("privacy", "--dataset", "wesad", "--params", str(tmp_path / "params.yaml"), "--data-dir",
           str(root / "data"), "--runs-dir", str(root / "runs"), "--out-dir", str(tmp_path / "out"))
    assert (tmp_path / "out" / "wesad.json").read_bytes() == (root / "runs" / "privacy" / "wesad.json").read_bytes()


def test_the_report_renders_the_table(root):
    options = report_params(read_params(root))
    assert options.privacy_fractions == (0.5, 1)
    rep = report.Report()
    report.add_privacy(rep, root / "runs" / "privacy", "2026-01-01", options)
    assert rep.missing == [] and "privacy.md" in rep.tables
    md = rep.tables["privacy-sampling.md"].decode()
    lines = [line for line in md.splitlines() if line.startswith("| WESAD |")]
    header = md.splitlines()
    assert "- Neighbouring relation: user-level (accounting `none`: add/remove one user = one client; `sampling`: " \
        "replace-one user)" in header
    assert f"- δ = WESAD {_doc(root, '0.5')['delta']:.4g}" in md and _doc(root, "0.5")["delta"] == 1e-5
    assert any(line.startswith("- ε: the rows'") and "Not accounted" in line for line in header)
    assert "- Noise: simulation, seeded noise" in md
    # per ε: the privacy stage's row, then f = 0.5 under none and sampling, then f = 1; ε = inf (no
    # mechanism, the same trial under either accounting) once per fraction
    assert [line.split(" | ")[1:6] for line in lines] == [
        ["4", "1", "4 / 4", "none", "privacy stage"], ["4", "0.5", "2 / 4", "none", "sampling study"],
        ["4", "0.5", "2 / 4", "sampling", "sampling study"], ["4", "1", "4 / 4", "none", "sampling study"],
        ["inf", "1", "4 / 4", "–", "privacy stage"], ["inf", "0.5", "2 / 4", "–", "sampling study"],
        ["inf", "1", "4 / 4", "–", "sampling study"]]
    main = _main(root)["methods"]["fedip"]["epsilons"]["4"]
    z = f"{main['noise_multiplier']:.3f}"
    assert lines[0].split(" | ")[6] == lines[3].split(" | ")[6] == z  # f = 1: the privacy stage's z
    assert lines[0].split(" | ")[8] == lines[3].split(" | ")[8]  # and its accuracy
    amp = _doc(root, "0.5")["accountings"]["sampling"]["4"]
    acc = [100 * a for a in amp["test_accuracy"]]
    mean = sum(acc) / len(acc)
    std = math.sqrt(sum((a - mean) ** 2 for a in acc) / len(acc))
    assert lines[2].split(" | ")[6:9] == [f"{amp['noise_multiplier']:.3f}", f"{amp['sigma_round']:.4g}",
                                         f"{mean:.2f} ± {std:.2f} |"]
    assert lines[4].split(" | ")[6:8] == ["–", "–"]  # ε = inf: no mechanism
    rows = rep.tables["privacy-sampling.csv"].decode().splitlines()
    assert rows[0] == ",".join(privacy_sampling_report.COLUMNS) and len(rows) == 1 + len(lines)
    index = report.report_index.render(rep.tables, {}, {}, {}, "2026-01-01", "v")
    assert "[privacy-sampling.md](tables/privacy-sampling.md)" in index


def test_without_the_opt_in_there_is_no_table(root):
    params = read_params(root)
    params["privacy"]["sampling_study"] = {"fractions": []}
    rep = report.Report()
    report.add_privacy(rep, root / "runs" / "privacy", "2026-01-01", report_params(params))
    assert "privacy.md" in rep.tables and "privacy-sampling.md" not in rep.tables


def test_a_stale_or_missing_document_is_refused_naming_its_command(root, tmp_path):
    folder = root / "runs" / "privacy"
    stale = privacy_params({"privacy": {**PRIVACY, "sampling_study": {**STUDY, "amplification": ["none"]}}})
    with pytest.raises(DataError) as info:
        privacy_sampling_report.load(folder, ["wesad"], (0.5,), stale.record("default", extra=True, study=True))
    assert "privacy.sampling_study" in str(info.value) and "--sampling 0.5" in str(info.value)
    assert "\n" not in str(info.value)
    expected = privacy_params(read_params(root)).record("default", extra=True, study=True)
    with pytest.raises(DataError, match=r"wesad/0\.25\.json: not found: run `esnfed privacy --dataset wesad "
                                        r"--sampling 0\.25` first"):
        privacy_sampling_report.load(folder, ["wesad"], (0.25,), expected)
    docs, absent = privacy_sampling_report.load(folder, ["wesad"], (0.5, 0.25), expected, allow_missing=True)
    assert list(docs) == [("wesad", "0.5")] and absent == [sampling_path(folder, "wesad", "0.25")]
    md = privacy_sampling_report.render({}, docs, absent=absent)["privacy-sampling.md"].decode()
    assert str(absent[0]) in md and "| privacy stage |" not in md  # no main document: study rows alone
    bad = tmp_path / "sampling" / "wesad" / "0.5.json"
    bad.parent.mkdir(parents=True)
    doc = _doc(root, "0.5")
    doc["accountings"]["sampling"]["4"]["sigma_round"] = None
    bad.write_text(json.dumps(doc))
    with pytest.raises(DataError, match=r"accountings\.sampling\.4\.sigma_round: expected a finite number >= 0"):
        privacy_sampling_report.load(tmp_path, ["wesad"], (0.5,), expected)


@pytest.mark.parametrize("study, key", [
    ({"fractions": [0]}, "privacy.sampling_study.fractions: must be > 0"),
    ({"fractions": [1.5]}, "privacy.sampling_study.fractions: must be <= 1"),
    ({"fractions": ["half"]}, "privacy.sampling_study.fractions"),
    ({"fractions": [True]}, "privacy.sampling_study.fractions"),
    ({"fractions": 0.5}, "privacy.sampling_study.fractions: must be a list"),
    ({"fractions": [0.5, 0.5]}, "privacy.sampling_study.fractions: each fraction once"),
    ({"fractions": [0.5], "amplification": ["poisson"]}, "privacy.sampling_study.amplification: must list some of"),
    ({"fractions": [0.5], "amplification": []}, "privacy.sampling_study.amplification"),
    ({"fractions": [0.5], "accounting": ["none"]}, "privacy.sampling_study.accounting: unknown key"),
    ([0.5], "privacy.sampling_study: must be a mapping"),
])
def test_bad_params_fail_in_one_line_naming_the_key(root, tmp_path, study, key):
    params = read_params(root)
    params["privacy"]["sampling_study"] = study
    with pytest.raises(ConfigError) as info:
        validate(params)  # the schema delegates to the stage's own check
    assert str(info.value).startswith(f"params.yaml: {key}") and "\n" not in str(info.value)
    write_params(tmp_path, params)
    out = tmp_path / "out"
    line = cli_fails("privacy", "--dataset", "wesad", "--sampling", "0.5", "--params", str(tmp_path / "params.yaml"),
                     "--data-dir", str(root / "data"), "--runs-dir", str(root / "runs"), "--out-dir", str(out))
    assert key.split(":")[0] in line
    assert not out.exists()  # no partial output


def test_a_fraction_not_listed_is_refused(root, tmp_path):
    out = tmp_path / "out"
    line = cli_fails("privacy", *stage_options(root), "--sampling", "0.50", "--out-dir", str(out))
    assert "privacy.sampling_study.fractions: '0.50' is not listed" in line
    assert not out.exists()
    assert "give --extra or --sampling, not both" in cli_fails(
        "privacy", *stage_options(root), "--sampling", "0.5", "--extra", "fedavg", "--out-dir", str(out))
    assert not out.exists()
