"""benchmarks/gpu_session.sh, the one call a session with a GPU makes, checked on the CPU: its
REHEARSE=1 mode runs every step with tiny sizes (torch-cpu, --smoke), so a typo or a broken step
shows here and not in the few minutes of a lent GPU; and without a GPU its preflight stops it at
once (exit 3) rather than run the full sizes on the CPU. The benchmark scripts' smoke tests read
the rehearsal's records of their steps (one rehearsal for all, in this one file: pytest-xdist's
--dist loadfile runs a file's tests in one worker)."""

from __future__ import annotations

import json
import math
import tarfile
from pathlib import Path

import pytest
import torch  # in the [test] extra: a missing torch is an error, not a skip
from bench_smoke import gpu_session, smoke, step_records

STEPS = ["tests", "ip_step", "gpu", "ipepoch", "continual", "jax", "slice300", "assess"]


@pytest.fixture(scope="module")
def gpu_rehearsal(tmp_path_factory):
    """The script run once with REHEARSE=1 (every step tiny, on torch-cpu): the completed process,
    its $OUT and its $RES (each step's output as <step>.txt, its records as <step>.jsonl)."""
    return gpu_session(tmp_path_factory.mktemp("gpu_rehearsal"), REHEARSE="1", TOTAL_S="400")


@pytest.mark.slow
def test_rehearsal_runs_every_step_and_packs_the_results_into_few_files(gpu_rehearsal):
    proc, out, _ = gpu_rehearsal
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # The device tool brings back at most 8 files from $OUT: the steps' 15 are packed into one.
    assert sorted(p.name for p in out.iterdir()) == ["env.txt", "results.tar.gz", "summary.txt"]
    summary = (out / "summary.txt").read_text().splitlines()
    rc = {line.split()[0]: line.split()[1] for line in summary if " rc=" in line}
    assert list(rc) == STEPS and summary[-1].startswith("total ")
    try:
        import jax  # noqa: F401
        jax_ok = True
    except ImportError:  # a machine without the [test] extra's jax: the step fails, the others still run
        jax_ok = False
    assert all(v == "rc=0" for k, v in rc.items() if k != "jax"), summary
    assert rc["jax"] == ("rc=0" if jax_ok else "rc=1")
    with tarfile.open(out / "results.tar.gz") as tar:
        names = {Path(n).name for n in tar.getnames()}
    assert {f"{s}.txt" for s in STEPS} | {"summary.txt", "env.txt"} <= names
    assert {f"{s}.jsonl" for s in STEPS if s not in ("tests", "jax")} <= names
    assert proc.stdout.rstrip().endswith(summary[-1])  # the summary closes the output (output_tail)


def test_without_a_gpu_the_preflight_stops_it_at_once(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the preflight passes")
    proc, out, res = gpu_session(tmp_path)
    assert proc.returncode == 3
    assert (out / "summary.txt").read_text().startswith("preflight rc=3: no step run")
    assert "sees no CUDA device" in (out / "env.txt").read_text()
    assert not [p for p in res.iterdir() if p.name not in ("env.txt", "summary.txt")]  # no step ran


def test_only_runs_the_named_steps(tmp_path):
    proc, out, _ = gpu_session(tmp_path, REHEARSE="1", ONLY="ip_step")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = (out / "summary.txt").read_text().splitlines()
    assert [line.split()[0] for line in summary[:-1]] == STEPS
    assert [line for line in summary if " rc=" in line][0].startswith("ip_step rc=0 ")
    assert sum("skipped (not in ONLY)" in line for line in summary) == len(STEPS) - 1


def test_slice_units_runs_one_step_per_batch_and_shares_the_time(tmp_path):
    proc, out, res = gpu_session(tmp_path, REHEARSE="1", ONLY="slice200 slice400", SLICE_UNITS="200 400", TOTAL_S="200")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = (out / "summary.txt").read_text().splitlines()
    steps = [line.split()[0] for line in summary[:-1]]
    assert steps == ["tests", "ip_step", "gpu", "ipepoch", "continual", "jax", "slice200", "slice400", "assess"], summary
    ran = {line.split()[0]: line for line in summary if " rc=" in line}
    assert set(ran) == {"slice200", "slice400"} and all(" rc=0 " in v for v in ran.values()), summary
    # the first slice step gets about half the time left (no assess wanted), not all of it
    limit = int(ran["slice200"].split("(limit ")[1].rstrip("s)"))
    assert 80 <= limit <= 101, ran["slice200"]
    assert (res / "slice200.jsonl").exists() and (res / "slice400.jsonl").exists()


def test_gpu_benchmark_smoke_mode_prints_every_case_and_the_projection(gpu_rehearsal, tmp_path):
    """benchmarks/bench_gpu.py --smoke: the same code as on the GPU, tiny, on the CPU (the
    rehearsal's `gpu` step, --smoke --ip-fused, and its `slice300` step, --smoke --slice 3)."""
    lines, stdout = step_records(gpu_rehearsal[2], "gpu")
    assert lines[0]["torch"] == torch.__version__ and lines[0]["device"] == "cpu"
    cases = {r["case"]: r for r in lines if "case" in r}
    assert not [r for r in cases.values() if "error" in r]
    for name in ("state pass, 1 reservoir", "IP mini-batch, 1 reservoir", "IP mini-batches, 3 reservoirs",
                 "3 reservoirs + ridge statistics", "IP epoch, 2 trials", "FedIP epoch, 2 trials",
                 "IP epoch, 2 trials, fused IP sums",
                 "CPU run_batch, 1 reservoir (all cores)", "cost wesad 400 units", "cost hhar 500 units"):
        assert cases[name]["M_ws_per_s" if "cost" not in name else "ip_epoch_ns_per_ws"] > 0, name
    # --ip-fused: the IP epoch once more with FUSED_SUMS on, that case only
    assert cases["IP epoch, 2 trials, fused IP sums"]["fused_ip_sums"] is True
    assert cases["IP epoch, 2 trials"]["fused_ip_sums"] is False
    assert cases["FedIP epoch, 2 trials"]["fused_ip_sums"] is False
    assert cases["IP epoch, 2 trials, fused IP sums"]["window_steps"] == cases["IP epoch, 2 trials"]["window_steps"]
    assert cases["state pass, 1 reservoir"]["project_over_bare"] > 0
    assert "Paper budget projected" in stdout and "| **all** |" in stdout
    # --slice: paper-scale FedIP trials end to end through fit_batch, against the projection
    lines, _ = step_records(gpu_rehearsal[2], "slice300")
    rec = [r for r in lines if "paper slice" in json.dumps(r)][-1]
    assert "error" not in rec and rec["trials"] == 3 and rec["seconds"] > 0 and rec["projected_seconds"] > 0
    plan = [r for r in lines if r.get("case") == "slice plan"]  # written before the run
    assert len(plan) == 1 and plan[0]["projected_seconds"] == rec["projected_seconds"]
    # --time-limit: a run whose projection does not fit is not started (a timeout measures nothing)
    lines, _ = smoke("bench_gpu.py", tmp_path / "gpu.jsonl", "--slice", "3", "--time-limit", "0")
    rec = [r for r in lines if "paper slice" in json.dumps(r)][-1]
    assert "does not fit" in rec["skipped"] and "seconds" not in rec
    assert not [r for r in lines if r.get("case", "").startswith("slice group")]


def test_continual_benchmark_smoke_mode_reports_every_method_and_its_projection(gpu_rehearsal):
    """benchmarks/bench_continual.py --smoke (the rehearsal's `continual` step)."""
    recs, stdout = step_records(gpu_rehearsal[2], "continual")
    cases = {r["case"]: r for r in recs if "case" in r}
    assert set(cases) == {"kernel prices", "fedclip-naive", "clip-replay", "fedclip-joint"}
    for m in ("fedclip-naive", "clip-replay", "fedclip-joint"):
        assert cases[m]["ip_window_steps"] > 0 and cases[m]["projected_seconds"] > 0
    assert "| fedclip-joint |" in stdout


def test_assess_benchmark_smoke_mode_reports_every_path_and_the_ratios(gpu_rehearsal):
    """benchmarks/bench_assess.py --smoke: the script gpu_session.sh runs on the GPU, tiny, here
    (the rehearsal's `assess` step)."""
    recs, _ = step_records(gpu_rehearsal[2], "assess")
    cases = {r["case"]: r for r in recs if "case" in r}
    assert recs[0]["device"] == "torch-cpu" and recs[0]["retrains"] == 2
    for name in ("numpy (scaled)", "batched", "bare recurrence"):
        assert cases[name]["seconds"] > 0 and cases[name]["M_model_ws_per_s"] > 0, name
    assert cases["ratios"]["batched_over_bare"] > 0 and cases["ratios"]["numpy_over_batched"] > 0


def test_jax_anchor_smoke_runs_every_case(gpu_rehearsal):
    # jax's CPU build is pinned in the [test] extra, so these run in CI (a missing jax fails);
    # the records of the rehearsal's `jax` step (bench_jax_anchor.py --smoke)
    recs, _ = step_records(gpu_rehearsal[2], "jax")
    assert recs[0]["lib"] == "jax"
    cases = [r for r in recs[1:] if "case" in r]
    assert len(cases) == 6 and all("error" not in r and math.isfinite(r["M_ws_per_s"]) and r["M_ws_per_s"] > 0 for r in cases)
