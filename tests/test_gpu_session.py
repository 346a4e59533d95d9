"""benchmarks/gpu_session.sh, the one call a session with a GPU makes, checked on the CPU: its
REHEARSE=1 mode runs every step with tiny sizes (torch-cpu, --smoke), so a typo or a broken step
shows here and not in the few minutes of a lent GPU; and without a GPU its preflight stops it at
once (exit 3) rather than run the full sizes on the CPU."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest
from bench_smoke import gpu_session

STEPS = ["tests", "ip_step", "gpu", "ipepoch", "continual", "jax", "slice300", "assess"]


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
