"""Smoke tests of the scripts of benchmarks/ that BENCHMARKS.md and the docs quote: each runs at
tiny sizes, as the quoted command line does at full size, and what it prints or writes has the
fields the documents read, with positive, finite numbers (bench_gpu, bench_continual and
bench_assess: tests/test_accel*.py; compare_reports: tests/test_compare_reports.py)."""

from __future__ import annotations

import importlib
import json
import math
import os
import re
import subprocess
import sys
import pytest

from bench_smoke import BENCHMARKS, ROOT, last_json, run, smoke, table_rows

slow = pytest.mark.slow


def _positive(*values: float) -> bool:
    return all(math.isfinite(v) and v > 0 for v in values)


def _number(cell: str) -> float:
    """'0.155 s' / '**1.30**' / '12.2×' -> the number."""
    return float(re.match(r"[*\s]*([0-9.]+)", cell).group(1))


@slow
def test_preprocess_hhar_reports_rows_windows_time_and_peak_of_csv_and_zip(tmp_path):
    root = tmp_path / "hhar"
    out = run("bench_preprocess_hhar.py", "--zip", "--repeats", "1", "--seconds", "1", "--root", str(root))
    r = last_json(out)
    assert len(r["rows"]) == 4 and all(n > 0 for n in r["rows"].values())
    assert r["users"] == 9 and r["windows"] > 0
    assert _positive(r["raw_csv_gb"], r["preprocess_median_s"], r["preprocess_peak_mib"], r["synthesize_s"],
                     r["zip_gb"], r["zip_preprocess_s"], r["zip_preprocess_peak_mib"])
    assert "| rows (phone acc / gyro, watch acc / gyro) |" in out
    assert not root.exists()  # generated files deleted without --keep


@slow
def test_preprocess_wesad_reports_subjects_sizes_time_and_peak(tmp_path):
    root = tmp_path / "wesad"
    out = run("bench_preprocess_wesad.py", "--protocol", "0", "--repeats", "1", "--scale", "0.002", "--root", str(root))
    r = last_json(out)
    assert (r["protocol"], r["subjects"]) == (0, 15) and r["windows"] > 0
    assert _positive(r["raw_gb"], r["processed_gb"], r["preprocess_median_s"], r["preprocess_peak_mib"])
    assert not root.exists()


def test_plasticity_prints_the_table_rows_with_their_ratios():
    out = run("bench_plasticity.py", "--shapes", "hhar", "--windows", "8", "--repeats", "1", "--clients", "2")
    rows = table_rows(out, "what")
    assert rows[0][0] == "**hhar** (8×200×6, 100 units)" and len(rows) == 6
    for cells in rows[1:]:
        assert _positive(*(_number(c) for c in cells[3:6])), cells
    assert re.search(r"round / summed epochs: wall [0-9.]+, CPU \*\*[0-9.]+\*\*", rows[-1][-1])
    assert "Command: `.venv/bin/python benchmarks/bench_plasticity.py --shapes hhar" in out


def test_reservoir_writes_the_ratios_to_the_bare_gemm_and_reservoirpy(tmp_path):
    pytest.importorskip("reservoirpy")
    path = tmp_path / "res.json"
    run("bench_reservoir.py", "--quick", "--repeats", "1", "--threads", "1", "--json", str(path))
    doc = json.loads(path.read_text())
    assert doc["environment"]["numpy"] and doc["environment"]["blas"]
    (r,) = doc["results"]
    assert set(r["median_s"]) == {"run_batch", "run_batch_1thread", "bare_gemm", "stats_add", "reservoirpy"}
    assert _positive(*r["median_s"].values(), *r["cpu_ratios"].values(), r["ratio_recurrence_over_bare_gemm"],
                     r["speedup_over_reservoirpy"], r["bare_gemm_speedup_over_reservoirpy"])


def test_ab_recurrence_gives_both_loops_as_ratios_to_the_gemm_and_the_same_bits():
    if subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True).returncode != 0:
        pytest.skip("not a git checkout: ab_recurrence.py reads the earlier loop from git")
    out = run("ab_recurrence.py", "--before", "HEAD", "--smoke", "--repeats", "1")
    m = re.search(r"before [0-9.]+ ms \(([0-9.]+)x\), after [0-9.]+ ms \(([0-9.]+)x\); same bits: (\w+)", out)
    assert m and _positive(float(m[1]), float(m[2])) and m[3] == "True", out


def test_deep_prints_the_ratios_to_its_gemms_and_to_the_shallow_reservoir():
    out = run("bench_deep.py", "--smoke", "--repeats", "1")
    rows = table_rows(out, "windows × steps × inputs × units (layers)")
    assert [r[0] for r in rows] == ["8 × 20 × 3 × 16 (L=2: 8+8)", "8 × 20 × 3 × 16 (L=4: 4+4+4+4)"]
    for cells in rows:
        assert _positive(*(_number(c) for c in cells[4:6] + cells[7:9])) and cells[9] == "True", cells


def test_ip_epoch_writes_the_ip_step_and_the_recurrence_against_the_gemm(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "ip.jsonl"
    run("bench_ip_epoch.py", "--reservoirs", "2", "--windows", "4", "--steps", "5", "--units", "16", "8",
        "--mu", "0", "0.1", "--repeats", "1", "--out", str(out))
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert {(r["units"], r["mu"]) for r in recs} == {(16, 0.0), (16, 0.1), (8, 0.0), (8, 0.1)}
    for r in recs:
        assert _positive(r["ip_s"], r["gemm_s"], r["recurrence_s"], r["ip_over_gemm"], r["recurrence_over_gemm"])


def test_ip_epoch_times_the_ip_step_per_chunk_size_and_restores_the_default(tmp_path):
    """With --fused-sums too: the fused step (torch.compile'd sums, inductor's C++ here) is timed
    at the default chunk and at each --chunk-elements size, its first call (the compile) apart."""
    pytest.importorskip("torch")
    out = tmp_path / "ip.jsonl"
    text = run("bench_ip_epoch.py", "--reservoirs", "2", "--windows", "4", "--steps", "6", "--units", "16",
               "--repeats", "1", "--chunk-elements", "128", "1024", "--cuda-graph", "--fused-sums", "--out", str(out))
    (r,) = [json.loads(line) for line in out.read_text().splitlines()]
    # 2 × 4 × 16 = 128 floats a step: one step per chunk at 128, all 6 at 1024
    assert r["chunk_steps"] == {"128": 1, "1024": 6}
    assert _positive(*r["ip_s_by_chunk_elements"].values()) and set(r["ip_s_by_chunk_elements"]) == {"128", "1024"}
    from esnfed_core.accel import torch_reservoir as tr
    assert r["chunk_elements_default"] == tr.CPU_CHUNK_ELEMENTS
    assert "| 2 × 4 × 6 × 16, 0 | 1024 (6) |" in text
    assert r["ip_graph_error"] == "needs cuda" and "ip_graph_s" not in r  # torch-cpu: said, not faked
    assert "ip_fused_error" not in r, r["ip_fused_error"]
    assert _positive(r["ip_fused_s"], r["ip_fused_first_call_s"], r["ip_fused_over_gemm"], r["ip_fused_over_ip"])
    assert math.isclose(r["ip_fused_over_ip"], r["ip_fused_s"] / r["ip_s"])
    by_chunk = r["ip_fused_s_by_chunk_elements"]
    assert set(by_chunk) == {"128", "1024"} and _positive(*by_chunk.values())
    (row,) = table_rows(text, "R × B × T × N, μ | IP step, fused sums s")
    assert row[0] == "2 × 4 × 6 × 16, 0" and _positive(*(_number(c) for c in row[1:]))


def test_ip_epoch_records_a_fused_sums_compile_that_fails(tmp_path):
    """No C++ compiler for inductor: ``ip_fused_error`` names the cause, the other fields are there."""
    pytest.importorskip("torch")
    out = tmp_path / "ip.jsonl"
    env = {"CXX": str(tmp_path / "no-such-g++"), "TORCHINDUCTOR_FX_GRAPH_CACHE": "0",
           "TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    text = run("bench_ip_epoch.py", "--reservoirs", "2", "--windows", "4", "--steps", "6", "--units", "16",
               "--repeats", "1", "--fused-sums", "--out", str(out), env=env)
    (r,) = [json.loads(line) for line in out.read_text().splitlines()]
    assert r["ip_fused_error"].startswith("FusedSumsError: torch_plasticity.FUSED_SUMS: ")
    assert "InvalidCxxCompiler" in r["ip_fused_error"] and "ip_fused_s" not in r
    assert _positive(r["ip_s"], r["gemm_s"])
    assert "| 2 × 4 × 6 × 16, 0 | FusedSumsError: " in text


@slow
def test_paper_budget_projects_both_budgets_from_one_measurement():
    out = run("bench_paper_budget.py", "--budget", "paper", "reduced", "--windows", "2", "--repeats", "1")
    for ds, units in (("wesad", [200, 300, 400]), ("hhar", [100, 200, 300, 400, 500])):
        section = out[out.index(f"\n{ds}: µs per window-step"):]
        rows = table_rows(section, "units")[: len(units)]
        assert [int(r[0]) for r in rows] == units and all(_positive(*map(float, r[1:])) for r in rows)
    hours = {m[1]: float(m[2]) for m in re.finditer(r"^(paper|reduced): ([0-9.]+) CPU hours", out, re.MULTILINE)}
    assert set(hours) == {"paper", "reduced"} and 0 < hours["reduced"] < hours["paper"]


def test_paper_budget_check_times_one_ridge_trial_against_the_projection(monkeypatch):
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    budget = importlib.import_module("bench_paper_budget")
    monkeypatch.setitem(budget.DATA["wesad"], "windows_per_user", 6)  # --check's trial, tiny
    measured, predicted = budget.check({400: {"stats": 1e-8, "eval": 2e-8, "ip_epoch": 3e-8}})
    assert _positive(measured) and predicted == pytest.approx(3 * 6 * 700 * 3e-8)


@slow
def test_paper_scale_runs_every_stage_and_assesses_the_model_in_four_share_folders(tmp_path):
    root = tmp_path / "scale"
    out = run("bench_paper_scale.py", "--rounds", "2", "--local-epochs", "1", "--calibrate", "--units", "8",
              "--scale", "0.002", "--root", str(root))
    r = last_json(out)
    for stage in ("synthesize", "preprocess", "partition", "select", "retrain", "assess"):
        assert _positive(r[stage]["peak_mib"]) and r[stage]["wall_s"] >= 0, stage
    assert r["assess"]["models"] == 4 and r["scale"] == 0.002
    assert r["windows"]["all"] > r["windows"]["train_100"] > r["windows"]["train_25"] > 0
    assert r["calibration"]["trial_1x1_s"] >= 0 and _positive(r["calibration"]["peak_mib"])
    assert not root.exists()


@slow
def test_paper_scale_scaling_measures_every_command_lazy_and_eager(tmp_path):
    out = run("bench_paper_scale.py", "--scaling", "--scale", "0.002", "--units", "8", "--root", str(tmp_path / "s"))
    rows = last_json(out)["scaling"]
    selects = {f"select --algo {a} --pct {p}" for a in ("fedip", "ip") for p in ("25", "100")}
    assert {r["command"] for r in rows if r["loading"] == "eager"} == selects | {"assess --algo fedip (4 models)"}
    assert {r["command"] for r in rows if r["loading"] == "lazy"} == selects | {
        "retrain --algo fedip --pct 25", "retrain --algo fedip --pct 100", "assess --algo fedip (4 models)"}
    assert all(_positive(r["peak_mib"]) for r in rows)


@slow
def test_paper_scale_read_cost_times_both_batch_patterns_from_disk_and_memory(tmp_path):
    out = run("bench_paper_scale.py", "--read-cost", "--scale", "0.002", "--repeats", "1", "--root", str(tmp_path / "r"))
    cost = last_json(out)["read_us_per_window"]
    assert cost["windows"] > 0 and _positive(cost["ip_shuffled_100_disk"], cost["ip_shuffled_100_memory"],
                                             cost["states_in_order_256_disk"])
    assert cost["states_in_order_256_memory"] >= 0  # a view: ~0


def test_synth_accuracy_prints_a_test_accuracy_per_share():
    out = run("bench_synth_accuracy.py", "--dataset", "wesad", "--units", "8")
    m = re.search(r"test accuracy 25 % ([0-9.]+), 50 % ([0-9.]+), 75 % ([0-9.]+), 100 % ([0-9.]+)", out)
    assert m and all(0 < float(a) <= 100 for a in m.groups()), out


@slow
def test_privacy_clip_sweep_prints_validation_accuracy_per_clip(tmp_path):
    from experiment_data import cli_ok, make_dataset, small_params, stage_options, write_params

    make_dataset(tmp_path)
    write_params(tmp_path, small_params())
    for algo in ("incfed", "fedip"):
        cli_ok("select", "--algo", algo, "--pct", "100", *stage_options(tmp_path))
    out = run("privacy_clip_sweep.py", "--datasets", "wesad", "--clips", "0.1,1", "--eps", "1",
              "--params", "params.yaml", cwd=tmp_path)
    (row,) = table_rows(out, "dataset")
    assert row[:2] == ["wesad", "1"] and len(row) == 4
    for cell in row[2:]:
        mean, std = (float(x) for x in cell.split("±"))
        assert 0 < mean <= 100 and 0 <= std <= 100
    # --sweep ip_clip (FedIP's update bound, docs/privacy.md), --smoke: bounds 0.001 and 1 at ε 1, one
    # seed. First the updates' natural scale (ε = ∞: a norm per client and round), then every update
    # clipped at a bound far below it and none at one far above, as the printed table says.
    recs, out = smoke("privacy_clip_sweep.py", tmp_path / "ip.jsonl", "--sweep", "ip_clip", "--datasets", "wesad",
                      "--params", str(tmp_path / "params.yaml"), "--data-dir", str(tmp_path / "data"),
                      "--runs-dir", str(tmp_path / "runs"))
    natural, cells = recs[0], {r["clip"]: r for r in recs[1:]}
    assert natural["eps"] == "inf" and len(natural["norms"]) == natural["config"]["rounds"] * 4  # 4 clients
    assert 0.001 < min(natural["norms"]) and max(natural["norms"]) < 1
    assert set(cells) == {0.001, 1.0} and all(r["eps"] == 1 for r in cells.values())
    assert all(0 <= a <= 1 for r in cells.values() for a in r["validation"] + r["test"])
    assert cells[0.001]["clipped"] == 1.0 and cells[1.0]["clipped"] == 0.0
    assert [r[:2] for r in table_rows(out, "dataset | updates")] == [["wesad", str(len(natural["norms"]))]]
    assert table_rows(out, "dataset | ε")[0][:2] == ["wesad", "1"]
    assert "| wesad | 1 | 100 % | 0 % |" in out
    # --sweep fedavg_clip (DP-FedAvg's readout bound, opt-in): a readout norm per client and seed at
    # ε = ∞, then every readout clipped at a bound far below them and none far above
    cli_ok("select", "--algo", "fedavg", "--pct", "100", *stage_options(tmp_path))
    out = run("privacy_clip_sweep.py", "--sweep", "fedavg_clip", "--datasets", "wesad", "--clips", "0.001,1000",
              "--eps", "1", "--seeds", "1", "--out", str(tmp_path / "avg.jsonl"), "--params", "params.yaml",
              cwd=tmp_path)
    recs = [json.loads(line) for line in (tmp_path / "avg.jsonl").read_text().splitlines()]
    natural, cells = recs[0], {r["clip"]: r for r in recs[1:]}
    assert natural["eps"] == "inf" and len(natural["norms"]) == 4 and 0.001 < min(natural["norms"])
    assert max(natural["norms"]) < 1000 and "lambda" in natural["config"]
    assert cells[0.001]["clipped"] == 1.0 and cells[1000.0]["clipped"] == 0.0
    assert "| wesad | 1 | 100 % | 0 % |" in out and "local readout ‖W_c‖_F" in out


def test_same_outputs_ignores_timings_and_keys_and_names_what_differs(tmp_path):
    import numpy as np

    for side, (loss, arr) in {"a": (0.5, [1.0, 2.0]), "b": (0.5, [1.0, 2.0])}.items():
        (tmp_path / side / "runs").mkdir(parents=True)
        (tmp_path / side / "runs" / "t.json").write_text(json.dumps({"loss": loss, "seconds": len(side), "key": side}))
        np.savez(tmp_path / side / "runs" / "m.npz", w=np.asarray(arr))
    a, b = str(tmp_path / "a"), str(tmp_path / "b")
    assert "2 files in" in run("same_outputs.py", a, b) and "0 differ" in run("same_outputs.py", a, b)
    np.savez(tmp_path / "b" / "runs" / "m.npz", w=np.asarray([1.0, 3.0]))
    (tmp_path / "b" / "reports").mkdir()
    (tmp_path / "b" / "reports" / "x.txt").write_text("x")
    proc = subprocess.run([sys.executable, str(BENCHMARKS / "same_outputs.py"), a, b], capture_output=True, text=True)
    assert proc.returncode == 1
    assert "runs/m.npz: array w differs" in proc.stdout and "reports/x.txt: only in" in proc.stdout


def test_jax_torch_cpu_smoke_runs_every_case_against_jax(tmp_path):
    out = tmp_path / "jax.jsonl"
    run("bench_jax_torch_cpu.py", "--smoke", "--repeats", "1", "--out", str(out))
    recs = [json.loads(line) for line in out.read_text().splitlines()]
    assert recs[0]["smoke"] is True
    cases = [r for r in recs if "case" in r]
    assert len(cases) == 7
    for r in cases:
        assert set(r["cpu_over_jax"]) == {"jax", "torch_bare", "project", "numpy_gemm", "torch_gemm"}
        assert _positive(*r["cpu_over_jax"].values(), *r["M_ws_per_s_cpu"].values())


@slow
def test_ab_command_times_the_command_on_both_trees(tmp_path):
    from experiment_data import make_dataset, small_params, write_params

    if subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True).returncode != 0:
        pytest.skip("not a git checkout: ab_command.sh checks the old side out of git")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(clone)], check=True)
    (clone / ".venv").symlink_to(sys.prefix)  # the script runs .venv/bin/python: this environment
    if not (clone / ".venv" / "bin" / "python").exists():
        pytest.skip(f"{sys.prefix}/bin/python missing: ab_command.sh needs a venv's python")
    make_dataset(clone)
    write_params(clone, small_params())
    cmd = ["bash", str(BENCHMARKS / "ab_command.sh"), "HEAD", "2", "--", "select", "--dataset", "wesad",
           "--algo", "ridge", "--pct", "25", "--backend", "sequential"]
    for own in ("", "1"):  # this checkout's params.yaml for both sides, or each tree's own
        proc = subprocess.run(cmd, cwd=clone, capture_output=True, text=True, timeout=300,
                              env={**os.environ, "AB_OWN_PARAMS": own})
        assert proc.returncode == 0, proc.stderr
        times = re.findall(r"^(old|new) ([0-9.]+)$", proc.stdout, re.MULTILINE)
        assert [s for s, _ in times] == ["old", "new"] * 2 and _positive(*(float(t) for _, t in times))
        medians = dict(re.findall(r"^(old|new) median ([0-9.]+) s$", proc.stdout, re.MULTILINE))
        assert set(medians) == {"old", "new"} and _positive(*map(float, medians.values()))
    worktrees = subprocess.run(["git", "worktree", "list", "--porcelain"], cwd=clone, capture_output=True,
                               text=True, check=True).stdout
    assert worktrees.count("worktree ") == 1  # the old side's worktree removed


def test_gpu_session_runs_every_step_with_options_its_scripts_have(tmp_path):
    """benchmarks/gpu_session.sh, dry run: python3 is a stub that logs its arguments, so every step
    runs at once; each benchmark is then called only with options its argument parser defines,
    and each test file it names exists."""
    stub = tmp_path / "bin" / "python3"
    stub.parent.mkdir()
    stub.write_text('#!/bin/bash\necho "$*" >> "$STUB_LOG"\n')
    stub.chmod(0o755)
    log = tmp_path / "calls.txt"
    env = {**os.environ, "PATH": f"{stub.parent}{os.pathsep}{os.environ['PATH']}", "STUB_LOG": str(log),
           "OUT": str(tmp_path / "out")}
    proc = subprocess.run(["bash", str(BENCHMARKS / "gpu_session.sh")], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    summary = (tmp_path / "out" / "summary.txt").read_text()
    steps = re.findall(r"^(\w+) rc=0 ", summary, re.MULTILINE)
    assert steps == ["tests", "ip_step", "gpu", "ipepoch", "continual", "jax", "slice300", "assess"], summary
    calls = [line.split() for line in log.read_text().splitlines()]
    scripts = [c for c in calls if c[0].startswith("benchmarks/")]
    assert len(scripts) == 7
    for script, *args in scripts:
        defined = set(re.findall(r"add_argument\(\s*\"(--[\w-]+)\"", (ROOT / script).read_text()))
        assert {a for a in args if a.startswith("--")} <= defined, (script, args)
    (pytest_call,) = [c for c in calls if c[:2] == ["-m", "pytest"]]
    assert all((ROOT / f).is_file() for f in pytest_call if f.startswith("tests/"))


@slow
def test_clients_reports_every_stage_of_each_count_with_time_memory_and_communication():
    out = run("bench_clients.py", "--smoke", "--methods", "incfed,fedip")
    rows = table_rows(out, "stage")
    stages = ["import", "partition"] + [f"{m} {s}" for m in ("incfed", "fedip") for s in ("select", "retrain", "assess")]
    assert [r[0] for r in rows[:8]] == stages
    for cells in rows[:8]:
        for cell in cells[1:]:  # "<cpu> s (<wall> s), <peak> MiB"
            cpu, wall, peak = map(float, re.fullmatch(r"([0-9.]+) s \(([0-9.]+) s\), ([0-9]+) MiB", cell).groups())
            assert _positive(cpu, wall, peak), cell
    records = json.loads(out.strip().splitlines()[-1])["records"]
    assert [r["clients"] for r in records] == [4, 8]
    # the same windows over twice the clients: FedIP's uploads grow with the clients (one message each)
    ups = [r["communication"]["fedip"]["up_floats"] for r in records]
    assert ups[1] > ups[0] > 0
    assert "Command: `.venv/bin/python benchmarks/bench_clients.py --smoke --methods incfed,fedip`" in out
