"""`esnfed flower` in the main environment: without the Flower environment it fails with one line
naming the make target and writes nothing; bad --app / --secagg / --pct fail with one line;
several --app and --plain-and-secagg make the (app, SecAgg+) list of one call.
The command's run through the Flower environment is tested in tests_flower/test_flower_cmd.py."""

from __future__ import annotations

from typer.testing import CliRunner

from esnfed_cli.main import app

runner = CliRunner()


def _invoke(tmp_path, *extra):
    return runner.invoke(app, ["flower", "--dataset", "wesad", "--data-dir", str(tmp_path / "data"),
                               "--runs-dir", str(tmp_path / "runs"), "--out-dir", str(tmp_path / "out"),
                               *extra])


def test_missing_flower_environment_is_one_line_naming_the_target(tmp_path):
    missing = tmp_path / "no-venv" / "bin" / "python"
    result = _invoke(tmp_path, "--flower-python", str(missing))
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and str(missing) in lines[0] and "esnfed flower-env" in lines[0]
    assert not (tmp_path / "out").exists()


def test_bad_app_and_secagg_are_one_line(tmp_path):
    for extra, word in ((["--app", "clip"], "--app"), (["--app", "fedavg", "--secagg"], "--secagg"),
                        (["--app", "fedclip-jointt"], "--app"), (["--app", "fedclip-joint", "--secagg"], "--secagg")):
        result = _invoke(tmp_path, *extra)
        assert result.exit_code == 1, extra
        assert len(result.output.strip().splitlines()) == 1 and word in result.output, result.output
    assert not (tmp_path / "out").exists()


def test_pct_is_a_choice_of_the_shares_as_in_select_and_the_help_lists_pct_and_app_choices(tmp_path):
    """--pct was a plain string (its help listed no choices, `all` was refused only
    after the options were read); it is a choice like select's --pct (one share a call: no `all`),
    a usage error otherwise; --app's help lists every app."""
    for extra in (["--pct", "30"], ["--pct", "all"], ["--app", "fedclip-replay", "--pct", "30"]):
        result = _invoke(tmp_path, *extra)
        assert result.exit_code == 2 and "--pct" in result.output, (extra, result.output)
    assert not (tmp_path / "out").exists()
    shown = " ".join(runner.invoke(app, ["flower", "--help"], env={"COLUMNS": "300"}).output.split())
    assert "<25|50|75|100>" in shown
    assert "incfed, fedip, fedavg, fedclip-naive, fedclip-replay, fedclip-joint" in shown


def test_the_default_out_dir_is_outside_the_stage_folder_the_report_depends_on(tmp_path, monkeypatch):
    """`esnfed flower` wrote runs/flower/*.json by default, inside the report stage's
    dependency runs/flower (dvc status: report stale; the manual run mixed into flower-table);
    dvc.yaml's flower stage passes its own --out-dir runs/flower/<dataset>."""
    import yaml

    from esnfed_stages import layout
    from esnfed_stages.studies import flower as flower_stage

    got = {}
    monkeypatch.setattr(flower_stage, "run_many", lambda ds, pairs, *a, **k: got.update(k) or [])
    python = tmp_path / "python"
    python.touch()
    assert runner.invoke(app, ["flower", "--dataset", "wesad", "--flower-python", str(python)]).exit_code == 0
    default = got["out_dir"]
    assert default == flower_stage.MANUAL_DIR and layout.FLOWER_DIR not in (default, *default.parents)
    stage = yaml.safe_load(open("dvc.yaml"))["stages"]["flower"]["do"]["cmd"]
    assert "--out-dir runs/flower/${item}" in stage
    from esnfed_cli import flower_cmd

    assert layout.FLOWER_DIR not in flower_cmd.TABLE_PATH.parents  # flower-table's --out likewise


def _result(dataset: str, app_name: str, secagg: bool = False) -> dict:
    rows = [{"phase": "stats", "stage": "plain", "rounds": 1, "messages": 4,
             "up_per_client_round": 500.0, "down_per_client_round": 90.0}]
    return {"dataset": dataset, "app": app_name, "secagg": secagg, "pct": "100", "n_clients": 4, "n_classes": 3,
            "config": {"units": 10}, "lambda": 0.1,
            "flower": {"test_accuracy": 0.5, "readout_relative_difference": 0.0,
                       "bytes": {"rows": rows, "up_per_client": {"mean": 500.0}, "down_per_client": {"mean": 90.0}}},
            "pipeline": {"test_accuracy": 0.5, "communication": {"up_bytes": 400, "down_bytes": 80}}}


def test_flower_table_reads_the_stage_folders_and_names_where_it_looked(tmp_path):
    """After `dvc repro`, flower-table said "runs/flower: no esnfed flower results":
    the stage writes runs/flower/<dataset>/*.json and the table read only runs/flower/*.json."""
    import json

    flower = tmp_path / "flower"
    for ds in ("wesad", "hhar"):
        (flower / ds).mkdir(parents=True)
        (flower / ds / f"{ds}-incfed-100.json").write_text(json.dumps(_result(ds, "incfed")))
    (flower / "wesad-fedavg-100.json").write_text(json.dumps(_result("wesad", "fedavg")))  # top level: read too
    out = tmp_path / "flower-table.md"
    result = runner.invoke(app, ["flower-table", "--flower-dir", str(flower), "--out", str(out)])
    assert result.exit_code == 0, result.output
    body = [line for line in out.read_text().splitlines() if line.startswith("| hhar |") or line.startswith("| wesad |")]
    assert [line.split(" | ")[:2] for line in body[:3]] == [["| hhar", "incfed"], ["| wesad", "incfed"],
                                                             ["| wesad", "fedavg"]]
    empty = tmp_path / "empty"
    empty.mkdir()
    result = runner.invoke(app, ["flower-table", "--flower-dir", str(empty), "--out", str(empty / "flower-table.md")],
                           env={"COLUMNS": "300"})
    assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1
    assert f"{empty / '*.json'} or {empty / '*' / '*.json'}" in result.output
    assert not (empty / "flower-table.md").exists()


def test_several_apps_and_plain_and_secagg_make_one_call(tmp_path, monkeypatch):
    from esnfed_stages.studies import flower as flower_stage

    calls = []
    monkeypatch.setattr(flower_stage, "run_many", lambda ds, pairs, *a, **k: calls.append((ds, pairs)) or [])
    python = tmp_path / "python"  # the pairs are checked first, the Flower interpreter's path too
    python.touch()
    for extra in (["--app", "incfed", "--app", "fedavg", "--plain-and-secagg"], ["--app", "fedip", "--secagg"], []):
        assert _invoke(tmp_path, *extra, "--flower-python", str(python)).exit_code == 0, extra
    assert calls == [("wesad", [("incfed", False), ("incfed", True), ("fedavg", False)]),  # fedavg: no SecAgg+
                     ("wesad", [("fedip", True)]), ("wesad", [("incfed", False)])]  # the default: plain IncFed


def test_a_bad_app_among_several_or_both_secagg_flags_are_one_line(tmp_path):
    for extra, word in ((["--app", "incfed", "--app", "clip"], "--app"),
                        (["--app", "incfed", "--secagg", "--plain-and-secagg"], "--plain-and-secagg")):
        result = _invoke(tmp_path, *extra)
        assert result.exit_code == 1, extra
        assert len(result.output.strip().splitlines()) == 1 and word in result.output, result.output
    assert not (tmp_path / "out").exists()


def test_table_puts_the_masked_vector_beside_its_formula():
    from esnfed_stages.report.flower_table import render_table, vector_entries

    comm = {"up_bytes": 400, "down_bytes": 80, "clients": 4}
    rows = [{"phase": "ip", "stage": "collect_masked_vectors", "rounds": 2, "messages": 8,
             "up_per_client_round": 400.0, "down_per_client_round": 90.0},
            {"phase": "stats", "stage": "collect_masked_vectors", "rounds": 1, "messages": 4,
             "up_per_client_round": 900.0, "down_per_client_round": 95.0},
            {"phase": "stats", "stage": "setup", "rounds": 1, "messages": 4,
             "up_per_client_round": 800.0, "down_per_client_round": 480.0}]
    doc = {"dataset": "wesad", "app": "fedip", "secagg": True, "pct": "100", "n_clients": 4, "n_classes": 3,
           "config": {"units": 10}, "lambda": 0.1,
           "flower": {"test_accuracy": 0.5, "readout_relative_difference": 1e-5,
                      "bytes": {"rows": rows, "up_per_client": {"mean": 2500.0}, "down_per_client": {"mean": 400.0}}},
           "pipeline": {"test_accuracy": 0.5, "communication": comm}}
    assert vector_entries(doc, "ip") == 20 and vector_entries(doc, "stats") == 130
    md = render_table([doc])
    assert "| wesad | fedip | yes | 4 | 10 | 0.1 | 50.00 | 50.00 | 1e-05 | 100 / 20 | 2500 / 400 |" in md
    assert "| SecAgg+ masked vector | 400 | 90 | 20 | 168 |" in md  # 8·(2N + 1)
    assert "| SecAgg+ masked vector | 900 | 95 | 130 | 1048 |" in md  # 8·(C·N + N² + 1)
    assert "| SecAgg+ setup (public keys) | 800 | 480 | 130 |  |" in md


def test_a_sampled_run_shows_its_client_fraction_and_a_bad_one_is_refused_naming_the_key(tmp_path):
    """A result recorded under federated.client_fraction < 1 (``client_fraction``) shows it in its
    table cell (beside a DP run's label, as the same list); flower-table refuses a recorded fraction
    outside (0, 1) in one line naming the file and key, writing no table."""
    import json

    from esnfed_stages.report.flower_table import app_label, render_table

    sampled = {**_result("wesad", "fedip"), "client_fraction": 0.5}
    assert app_label(sampled) == "fedip (f = 0.5)" and app_label(_result("wesad", "fedip")) == "fedip"
    assert app_label({**sampled, "dp": {"epsilon": "4", "noise": "central"}}) == "fedip (f = 0.5, ε = 4, central)"
    md = render_table([sampled])
    assert "| wesad | fedip (f = 0.5) | no | 4 |" in md and "| wesad | fedip (f = 0.5) | no | stats |" in md
    flower = tmp_path / "flower"
    flower.mkdir()
    path = flower / "wesad-fedip-100.json"
    out = tmp_path / "flower-table.md"
    for bad in (1.0, 0, "0.5", None):
        path.write_text(json.dumps({**sampled, "client_fraction": bad}))
        result = runner.invoke(app, ["flower-table", "--flower-dir", str(flower), "--out", str(out)],
                               env={"COLUMNS": "300"})
        assert result.exit_code == 1 and len(result.output.strip().splitlines()) == 1, (bad, result.output)
        assert f"{path}: client_fraction:" in result.output and not out.exists()


def test_table_lists_fedclip_after_the_stationary_apps(tmp_path):
    import json

    from esnfed_stages.report.flower_table import load_docs, render_table

    rows = [{"phase": "ip", "stage": "plain", "rounds": 6, "messages": 24,
             "up_per_client_round": 1500.0, "down_per_client_round": 1800.0},
            {"phase": "stats", "stage": "plain", "rounds": 3, "messages": 12,
             "up_per_client_round": 5000.0, "down_per_client_round": 1800.0}]
    for app, acc in (("fedclip-replay", 0.625), ("incfed", 0.5)):
        doc = {"dataset": "wesad", "app": app, "secagg": False, "pct": "100", "n_clients": 4, "n_classes": 3,
               "config": {"units": 10}, "lambda": 1e-5,
               "flower": {"test_accuracy": acc, "readout_relative_difference": 0.0,
                          "bytes": {"rows": rows, "up_per_client": {"mean": 2e4}, "down_per_client": {"mean": 1e4}}},
               "pipeline": {"test_accuracy": acc, "communication": {"up_bytes": 400, "down_bytes": 80}}}
        (tmp_path / f"wesad-{app}-100.json").write_text(json.dumps(doc))
    docs = load_docs(tmp_path)
    assert [d["app"] for d in docs] == ["incfed", "fedclip-replay"]
    md = render_table(docs)
    assert "| wesad | fedclip-replay | no | 4 | 10 | 1e-05 | 62.50 | 62.50 | 0 | 100 / 20 | 20000 / 10000 |" in md
    assert "| wesad | fedclip-replay | no | ip | 6 | plain | 1500 | 1800 | 20 |  |" in md


def test_fedclip_apps_run_after_the_stationary_ones_in_their_own_calls(tmp_path, monkeypatch):
    """Mixed --app: the stationary apps go to one run_many call (one Flower session), each FedCLIP
    pair to flower_fedclip.run, after it; a bad pair anywhere stops everything before any run."""
    from esnfed_stages.studies import flower as flower_stage
    from esnfed_stages.studies import flower_fedclip

    calls = []
    monkeypatch.setattr(flower_stage, "run_many", lambda ds, pairs, *a, **k: calls.append(("many", pairs)) or [])
    monkeypatch.setattr(flower_fedclip, "run", lambda ds, app, secagg, *a, **k: calls.append(("fedclip", app, secagg))
                        or _doc(app, secagg))
    python = tmp_path / "python"
    python.touch()
    result = _invoke(tmp_path, "--app", "fedclip-replay", "--app", "incfed", "--app", "fedclip-naive",
                     "--plain-and-secagg", "--flower-python", str(python))
    assert result.exit_code == 0, result.output
    assert calls == [("many", [("incfed", False), ("incfed", True)]),
                     ("fedclip", "fedclip-replay", False), ("fedclip", "fedclip-replay", True),
                     ("fedclip", "fedclip-naive", False), ("fedclip", "fedclip-naive", True)]
    assert result.output.count("fedclip-replay") == 2  # one summary line per document
    calls.clear()
    bad = _invoke(tmp_path, "--app", "fedclip-naive", "--app", "fedavg", "--secagg", "--flower-python", str(python))
    assert bad.exit_code == 1 and "--secagg" in bad.output and calls == []


def _doc(app: str, secagg: bool) -> dict:
    per_client = {"mean": 1.0, "max": 1.0}
    return {"dataset": "wesad", "app": app, "secagg": secagg, "pct": "100",
            "flower": {"test_accuracy": 0.5, "readout_relative_difference": 0.0,
                       "bytes": {"up_per_client": per_client, "down_per_client": per_client}},
            "pipeline": {"test_accuracy": 0.5}}


def test_progress_counts_every_fit_and_simulation_then_the_summary(tmp_path, monkeypatch):
    """The command showed nothing while its simulations ran (a minute or more): each stage reports
    (done, total) of its own steps, the bar shows them as one count over the whole call."""
    from esnfed_cli import flower_cmd
    from esnfed_stages.studies import flower as flower_stage
    from esnfed_stages.studies import flower_fedclip

    def many(ds, pairs, *a, progress, **k):  # run_many's steps: a fit per app, then the simulation
        total = flower_stage.progress_steps(pairs)
        for done in range(total + 1):
            progress(done, total)
        return [_doc(app, secagg) for app, secagg in pairs]

    def fedclip(ds, app, secagg, *a, progress, **k):
        for done in range(3):
            progress(done, 2)
        return _doc(app, secagg)

    shown = []
    monkeypatch.setattr(flower_stage, "run_many", many)
    monkeypatch.setattr(flower_fedclip, "run", fedclip)
    monkeypatch.setattr(flower_cmd, "bar_task", lambda bar, what: lambda done, total: shown.append((what, done, total)))
    python = tmp_path / "python"
    python.touch()
    result = _invoke(tmp_path, "--app", "incfed", "--app", "fedip", "--app", "fedclip-naive", "--plain-and-secagg",
                     "--flower-python", str(python))
    assert result.exit_code == 0, result.output
    # incfed, fedip: 2 fits + 1 simulation (plain and SecAgg+ share both); fedclip-naive plain, SecAgg+: 2 each
    assert flower_stage.progress_steps([("incfed", False), ("incfed", True), ("fedip", False), ("fedip", True),
                                        ("fedclip-naive", False), ("fedclip-naive", True)]) == 7
    assert {what for what, _, _ in shown} == {"flower wesad"} and {t for _, _, t in shown} == {7}
    done = [d for _, d, _ in shown]
    assert done == sorted(done) and done[0] == 0 and done[-1] == 7
    assert len(result.output.strip().splitlines()) == 6  # then one summary line per document


def test_dataset_is_any_declared_one_and_an_undeclared_one_is_one_line(tmp_path, monkeypatch):
    """--dataset takes any dataset params.yaml declares, yours too (before: wesad or hhar only, so
    the flower stage of a study of `example` could not run); an undeclared one is a usage error
    naming params.yaml datasets, as select's and privacy's."""
    from esnfed_stages.studies import flower as flower_stage

    calls = []
    monkeypatch.setattr(flower_stage, "run_many", lambda ds, pairs, *a, **k: calls.append(ds) or [])
    python = tmp_path / "python"
    python.touch()
    common = ["--data-dir", str(tmp_path / "data"), "--runs-dir", str(tmp_path / "runs"), "--out-dir",
              str(tmp_path / "out"), "--flower-python", str(python)]
    ok = runner.invoke(app, ["flower", "--dataset", "example", *common])
    assert ok.exit_code == 0, ok.output
    assert calls == ["example"]
    bad = runner.invoke(app, ["flower", "--dataset", "mine", *common])
    assert bad.exit_code == 2 and calls == ["example"]
    text = " ".join(w for w in bad.output.split() if w not in "│╭╮╰╯─")  # the usage error's box
    assert "'mine' is not declared in params.yaml datasets (declared: wesad, hhar, example)" in text


def test_dp_options_reach_run_many_and_default_the_noise_per_app(tmp_path, monkeypatch):
    """--epsilon (and --noise) reach run_many as one DPRequest; without --noise the plain apps get
    central noise and the SecAgg+ apps distributed noise; "inf" is read as ε = ∞."""
    import math

    from esnfed_stages.studies import flower as flower_stage

    calls = []
    monkeypatch.setattr(flower_stage, "run_many", lambda ds, pairs, *a, **k: calls.append((pairs, k["dp"])) or [])
    python = tmp_path / "python"
    python.touch()
    for extra in (["--app", "incfed", "--app", "fedip", "--plain-and-secagg", "--epsilon", "2"],
                  ["--app", "fedip", "--secagg", "--epsilon", "0.5", "--noise", "distributed"],
                  ["--epsilon", "inf"], [], ["--app", "fedavg", "--plain-and-secagg", "--epsilon", "1"]):
        result = _invoke(tmp_path, *extra, "--flower-python", str(python))
        assert result.exit_code == 0, (extra, result.output)
    (pairs, dp), (_, dp2), (_, dp3), (_, dp4), (pairs5, dp5) = calls
    assert dp == flower_stage.DPRequest(2.0) and dp2 == flower_stage.DPRequest(0.5, "distributed")
    assert [dp.noise_for(s) for _, s in pairs] == ["central", "distributed", "central", "distributed"]
    assert math.isinf(dp3.epsilon) and dp4 is None
    # DP-FedAvg: the plain app only (there is no SecAgg+ FedAvg app), central noise
    assert pairs5 == [("fedavg", False)] and dp5.noise_for(False) == "central"


def test_bad_dp_options_are_one_line_naming_the_option(tmp_path):
    """ε ≤ 0, an unknown --noise, --noise without --epsilon, central noise under SecAgg+ (the server
    sees only the sum), distributed noise without it (the server would see each client's share)
    and DP on an app without a private variant: one line naming the option, exit 1, nothing written."""
    python = tmp_path / "python"
    python.touch()
    cases = ((["--epsilon", "0"], "--epsilon must be > 0"), (["--epsilon", "-1"], "--epsilon must be > 0"),
             (["--epsilon", "1", "--noise", "local"], "--noise must be one of central, distributed"),
             (["--noise", "central"], "--noise: give --epsilon too"),
             (["--secagg", "--epsilon", "1", "--noise", "central"], "--noise central runs on the plain apps"),
             (["--epsilon", "1", "--noise", "distributed"], "--noise distributed needs --secagg"),
             (["--app", "fedavg", "--secagg", "--epsilon", "1"], "--secagg is for incfed, fedip, fedclip-naive, "
              "fedclip-replay, not fedavg"),
             (["--app", "fedavg", "--secagg", "--epsilon", "1", "--noise", "distributed"], "--secagg is for"),
             (["--app", "fedavg", "--epsilon", "1", "--noise", "distributed"], "--noise distributed needs --secagg"),
             (["--app", "fedclip-replay", "--epsilon", "1"],
              "--epsilon is for incfed, fedip, fedavg, not fedclip-replay"))
    for extra, words in cases:
        result = _invoke(tmp_path, *extra, "--flower-python", str(python))
        assert result.exit_code == 1, (extra, result.output)
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and words in lines[0], (extra, result.output)
    assert not (tmp_path / "out").exists()


def test_dp_spec_takes_delta_and_clips_from_params_and_refuses_the_window_relation():
    """δ = min(1e-5, 1/(10·n)) of the training users (privacy.delta auto), the dataset's clip and ip_clip; the
    Flower apps protect users (one client each), so relation window is one line naming the key."""
    import pytest

    from esnfed_core.errors import ConfigError
    from esnfed_stages.studies.flower import dp_spec
    from experiment_data import small_params, trial_data

    params = small_params()
    params["privacy"].update(clip={"wesad": 0.01, "hhar": 0.02, "example": 0.03}, ip_clip=0.2)
    data, _ = trial_data(pct="100")
    spec = dp_spec(params, "wesad", data, 3.0)
    assert (spec.epsilon, spec.delta, spec.relation, spec.clip, spec.ip_clip) == (3.0, 1e-5, "user", 0.01, 0.2)
    params["privacy"]["relation"] = "window"
    with pytest.raises(ConfigError, match=r"^params.yaml: privacy.relation: window level is not implemented: "):
        dp_spec(params, "wesad", data, 3.0)


def test_dp_record_states_the_mechanism_and_what_the_distributed_sum_carries():
    """The result's dp record: ε, δ, z from the accountant, σ = z·C with C = clip·√(N + N²), FedIP's
    σ_ip = z·C_ip; distributed: σ/√K_min per client, σ·√(K'/K_min) in the sum of K' clients and the
    smaller ε that sum buys (PLD at z·√(K'/K_min))."""
    import math

    import pytest

    from esnfed_core.privacy import DPSpec, epsilon_of, noise_multiplier
    from esnfed_stages.studies.flower import dp_record

    spec = DPSpec(2.0, 1e-3, "user", 0.01, 0.05)
    central = dp_record(spec, "central", 3, 20, True, None)
    z = noise_multiplier(2.0, 1e-3, 3)
    assert central["noise_multiplier"] == z and central["epsilon"] == "2" and central["releases"] == 3
    assert central["sigma"] == pytest.approx(z * 0.01 * math.sqrt(20 + 400))
    assert central["sigma_ip"] == pytest.approx(z * 0.05) and "PLD" in central["accountant"]
    assert "min_clients" not in central
    assert central["noise_source"].startswith("seeded") and "simulation" in central["noise_source"]
    dist = dp_record(spec, "distributed", 3, 20, False, {"clients": 9, "sampled": 9, "min_clients": 8})
    assert dist["noise_source"].startswith("OS CSPRNG")
    assert "sigma_ip" not in dist and dist["min_clients"] == 8 and dist["clients_in_sum"] == 9
    assert dist["client_sigma"] == pytest.approx(dist["sigma"] / math.sqrt(8))
    assert dist["sum_sigma"] == pytest.approx(dist["sigma"] * math.sqrt(9 / 8))
    assert dist["epsilon_spent"] == pytest.approx(epsilon_of(z * math.sqrt(9 / 8), 1e-3, 3))
    assert 1.5 < dist["epsilon_spent"] < 2.0  # more noise than needed: a smaller ε, not a larger one


def test_dp_record_of_sampled_distributed_rounds_states_each_rounds_threshold():
    """Sampled SecAgg+ DP-FedIP (the app's out.json with ip_clients): the record adds m, K_min(m),
    σ_ip/√K_min(m) per client and each IP round's K'; epsilon_spent is the PLD ε at z times the
    smallest √(K'/K_min) over all releases (a round where one dropped: K' = K_min(m), exactly z, so ε);
    at fraction 1 (no ip_clients) the record is as before."""
    import math

    import pytest

    from esnfed_core.privacy import DPSpec, epsilon_of, noise_multiplier
    from esnfed_stages.studies.flower import dp_record

    spec = DPSpec(2.0, 1e-3, "user", 0.01, 0.05)
    z = noise_multiplier(2.0, 1e-3, 3)
    stats = {"clients": 10, "sampled": 10, "min_clients": 9}
    full = dp_record(spec, "distributed", 3, 20, True, stats)
    assert "ip_min_clients" not in full and full["epsilon_spent"] == pytest.approx(epsilon_of(z * math.sqrt(10 / 9),
                                                                                              1e-3, 3))
    rec = dp_record(spec, "distributed", 3, 20, True, {**stats, "ip_clients": [5, 5], "ip_sampled": 5,
                                                       "ip_min_clients": 4})
    assert (rec["ip_sampled"], rec["ip_min_clients"], rec["ip_clients_in_sum"]) == (5, 4, [5, 5])
    assert rec["ip_client_sigma"] == pytest.approx(z * 0.05 / 2)  # σ_ip/√4
    assert rec["epsilon_spent"] == pytest.approx(epsilon_of(z * math.sqrt(10 / 9), 1e-3, 3))  # 10/9 < 5/4
    dropped = dp_record(spec, "distributed", 3, 20, True, {**stats, "ip_clients": [5, 4], "ip_sampled": 5,
                                                           "ip_min_clients": 4})
    assert dropped["epsilon_spent"] == pytest.approx(epsilon_of(z, 1e-3, 3)) and dropped["epsilon_spent"] <= 2.0 + 1e-6


def test_dp_fedavg_record_and_run_config_carry_its_clip_and_sigma():
    """DP-FedAvg's dp record: central, one release, σ = z·fedavg_clip (esnfed_core.privacy.fedavg_sigma)
    with fedavg_clip as its clipping norm and nothing of IncFed's statistics or FedIP's updates; its run
    config carries dp-fedavg-clip and no λ grid (one release at the run's λ), the others' a grid."""
    import pytest

    from esnfed_core.privacy import DPSpec, fedavg_sigma, noise_multiplier
    from esnfed_core.settings import Settings
    from esnfed_stages.studies.flower import dp_record, dp_run_config

    spec = DPSpec(2.0, 1e-3, "user", 0.01, 0.05, fedavg_clip=0.4)
    rec = dp_record(spec, "central", 1, 20, False, None, fedavg=True)
    z = noise_multiplier(2.0, 1e-3, 1)
    assert (rec["noise"], rec["epsilon"], rec["releases"], rec["noise_multiplier"]) == ("central", "2", 1, z)
    assert rec["fedavg_clip"] == rec["clip_norm"] == 0.4 and rec["sigma"] == fedavg_sigma(spec, 1)
    assert rec["sigma"] == pytest.approx(z * 0.4, rel=1e-12) and "PLD" in rec["accountant"]
    assert "fedavg_clip" in rec["mechanism"] and not {"clip", "ip_clip", "sigma_ip"} & set(rec)
    settings = Settings(lambdas=(1e-4, 1e-2), batch_size=5)
    rc = dp_run_config(spec, "central", 1, 7, settings, "fedavg")
    assert rc["dp-fedavg-clip"] == 0.4 and rc["dp-noise-seed"] == 7 and "lambdas" not in rc
    other = dp_run_config(spec, "central", 1, 7, settings, "incfed")
    assert other["lambdas"] == [1e-4, 1e-2] and "dp-fedavg-clip" not in other


def test_sampled_amplified_fedip_record_and_run_config_carry_the_amplified_z():
    """Sampled DP-FedIP under privacy.amplification: sampling (the spec trial_spec gives: R rounds of
    m of K clients): the run config carries dp-amplification (the app rebuilds (R, m, K) from it), the
    dp record the amplified z (its σs with it) and the RDP accountant; unsampled, neither appears and
    z is the PLD one, as before."""
    import dataclasses

    import pytest

    from esnfed_core.privacy import DPSpec, noise_multiplier, sampled_noise_multiplier
    from esnfed_core.settings import Settings
    from esnfed_stages.studies.flower import dp_record, dp_run_config

    spec = dataclasses.replace(DPSpec(2.0, 1e-3, "user", 0.01, 0.05, amplification="sampling"), sampled=(3, 2, 4))
    rec = dp_record(spec, "central", 4, 20, True, None)
    z = sampled_noise_multiplier(2.0, 1e-3, 3, 2, 4)
    assert rec["noise_multiplier"] == z and z != pytest.approx(noise_multiplier(2.0, 1e-3, 4), rel=1e-2)
    assert rec["sigma_ip"] == pytest.approx(z * 0.05) and rec["sigma"] == pytest.approx(z * 0.01 * (420 ** 0.5))
    assert rec["amplification"] == "sampling" and "RDP" in rec["sampled_accountant"]
    rc = dp_run_config(spec, "central", 4, 7, Settings(lambdas=(1e-2,), batch_size=5), "fedip")
    assert rc["dp-amplification"] == "sampling"
    plain = DPSpec(2.0, 1e-3, "user", 0.01, 0.05, amplification="sampling")  # f = 1: trial_spec leaves it
    assert "dp-amplification" not in dp_run_config(plain, "central", 4, 7, Settings(batch_size=5), "fedip")
    unsampled = dp_record(plain, "central", 4, 20, True, None)
    assert unsampled["noise_multiplier"] == noise_multiplier(2.0, 1e-3, 4) and "amplification" not in unsampled


def test_dp_fedavg_trains_at_best_json_lambda_as_the_privacy_stage(tmp_path, monkeypatch):
    """The private FedAvg trial's config keeps best.json's λ (its one release; the privacy-extra stage's
    trial trains at it); IncFed's and FedIP's leave λ out (chosen on the validation users)."""
    from esnfed_stages.studies import flower as flower_stage

    best = {"units": 10, "leak": 0.5, "lambda": 0.01}
    monkeypatch.setattr(flower_stage, "selected_config", lambda *a: dict(best))
    cfg = {"units": 10, "leak": 0.5}
    assert flower_stage.private_config(tmp_path, "wesad", "fedavg", "100", None, cfg) == best
    assert flower_stage.private_config(tmp_path, "wesad", "incfed", "100", None, cfg) == cfg


def test_a_sampled_result_carries_its_fraction_in_its_name_and_every_client_keeps_the_old_name(tmp_path):
    """Runs of one app at two client fractions went to the same name (two --out-dirs needed): a
    result recording ``client_fraction`` is named with it (-f<f>, the float's shortest repr, before
    the share and a DP run's ε); without it (every client in every round) the names are those the
    dvc.yaml flower stage, the report and flower-table always read, byte for byte. Two fractions
    and f = 1 of one app in one folder: three files, all read by flower-table, f = 1 first."""
    import json

    from esnfed_stages.layout import out_name

    assert out_name("wesad", "fedip", False, "100") == "wesad-fedip-100.json"
    assert out_name("wesad", "fedip", True, "100", fraction=None) == "wesad-fedip-secagg-100.json"
    assert out_name("wesad", "incfed", True, "25", 4.0) == "wesad-incfed-secagg-eps4-25.json"
    assert out_name("wesad", "fedip", True, "100", fraction=0.75) == "wesad-fedip-secagg-f0.75-100.json"
    assert out_name("hhar", "fedip", False, "50", 4.0, 0.5) == "hhar-fedip-f0.5-eps4-50.json"
    # exact: two fractions that print alike at 6 digits (":g") still get two names
    assert out_name("wesad", "fedip", False, "100", fraction=1 / 3) != out_name("wesad", "fedip", False, "100",
                                                                                fraction=0.333333)
    flower = tmp_path / "flower"
    flower.mkdir()
    for f, acc in ((None, 0.5), (0.5, 0.25), (0.75, 0.375)):
        doc = {**_result("wesad", "fedip"), **({} if f is None else {"client_fraction": f})}
        doc["flower"]["test_accuracy"] = acc
        (flower / out_name("wesad", "fedip", False, "100", fraction=f)).write_text(json.dumps(doc))
    assert sorted(p.name for p in flower.iterdir()) == ["wesad-fedip-100.json", "wesad-fedip-f0.5-100.json",
                                                         "wesad-fedip-f0.75-100.json"]
    out = tmp_path / "flower-table.md"
    result = runner.invoke(app, ["flower-table", "--flower-dir", str(flower), "--out", str(out)])
    assert result.exit_code == 0, result.output
    rows = [line for line in out.read_text().splitlines() if line.startswith("| wesad | fedip")][:3]
    assert [r.split(" | ")[1] for r in rows] == ["fedip", "fedip (f = 0.75)", "fedip (f = 0.5)"]
    assert [r.split(" | ")[6] for r in rows] == ["50.00", "37.50", "25.00"]  # each file's own result


def test_secagg_survivor_bound_refuses_below_and_accepts_at_it():
    """esnfed_core.sampling.check_survivors: threshold max(2, K − 1) below the bound is one line
    naming secagg-min-survivors; at or above it nothing is raised. The key's default is 5."""
    import pytest

    from esnfed_core.sampling import SECAGG_MIN_SURVIVORS, check_survivors, min_survivors

    assert min_survivors() == SECAGG_MIN_SURVIVORS == 5 and min_survivors(2) == 2
    for k in (3, 4, 5):
        with pytest.raises(ValueError, match=rf"^secagg-min-survivors: a SecAgg\+ round of {k} clients may complete "
                                             rf"with {max(2, k - 1)} survivors, below 5: .*needs 6 or more clients"):
            check_survivors(k, 5)
    for k in (6, 9, 40):
        check_survivors(k, 5)
    check_survivors(3, 2)
    for bad in (1, 2.5, True, "5"):
        with pytest.raises(ValueError, match=r"^secagg-min-survivors: expected an integer >= 2, got "):
            min_survivors(bad)


def test_the_pipelines_secagg_runs_are_labelled_a_simulation_of_the_protocol():
    """esnfed flower's SecAgg+ run configs carry secagg-min-survivors 2 (no bound: the embedded
    datasets have 3-9 training users), and its tables say the masks of rounds with fewer than 5
    survivors are brute-forceable, naming those runs (a sampled round's m counts)."""
    from esnfed_core.settings import Settings
    from esnfed_stages.studies.flower import run_config
    from esnfed_stages.report.flower_table import masks_note
    from experiment_data import trial_data

    data, _ = trial_data(pct="100")
    cfg = {"units": 10, "spectral_radius": 0.9, "leak": 0.5, "input_scaling": 0.8}
    settings = Settings(lambdas=(1.0,), batch_size=5)
    assert run_config(cfg, {"reservoir": 1}, data, settings, 1.0, "incfed", True)["secagg-min-survivors"] == 2
    assert "secagg-min-survivors" not in run_config(cfg, {"reservoir": 1}, data, settings, 1.0, "incfed", False)
    assert masks_note([]) == []
    (note,) = masks_note([("wesad", 3, 1.0), ("hhar", 9, 1.0), ("hhar", 9, 0.5)])
    assert "brute-forceable" in note and "simulation of the protocol, not a privacy guarantee" in note
    assert "secagg-min-survivors 2" in note and "wesad (K = 3)" in note and "hhar (K = 9)" in note
    (strong,) = masks_note([("hhar", 9, 1.0)])
    assert "below the bound here" not in strong and "simulation" in strong
