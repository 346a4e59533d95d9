"""What a stage pays per client: each user's processed file is opened and parsed once per stage,
not once per share it is in (benchmarks/bench_clients.py measures the curve; BENCHMARKS.md,
"Clients"), and the per-process copy is never served for a file that changed on disk."""

from __future__ import annotations

import collections
import os

import pytest

from esnfed_core.data.processed import save_user
from esnfed_stages.experiment import trial_data
from experiment_data import TRAIN, VALIDATION, cli_ok, make_dataset, small_params, stage_options, write_params


@pytest.fixture
def counted(monkeypatch):
    """Calls of load_user by user, with the per-process caches emptied first."""
    trial_data._lazy_user_at.cache_clear()
    trial_data.load_trial_data.cache_clear()
    calls: collections.Counter[str] = collections.Counter()
    real = trial_data.load_user

    def load_user(directory, user, **kw):
        calls[user] += 1
        return real(directory, user, **kw)

    monkeypatch.setattr(trial_data, "load_user", load_user)
    return calls


def test_a_select_of_every_share_parses_each_user_once(tmp_path, counted):
    """Before: once to check it and once per share holding it (u0, in all four shares: 5 times)."""
    make_dataset(tmp_path)
    write_params(tmp_path, small_params())
    cli_ok("select", "--algo", "incfed", "--pct", "all", *stage_options(tmp_path))
    assert counted == {u: 1 for u in TRAIN["100"] + VALIDATION}


def test_a_file_changed_on_disk_is_parsed_again(tmp_path, counted):
    make_dataset(tmp_path)
    folder = tmp_path / "data" / "processed" / "wesad"
    first = trial_data.lazy_user(folder, "u0")
    assert trial_data.lazy_user(folder, "u0") is first and counted["u0"] == 1
    shorter = first.select(slice(0, 2))
    save_user(folder / "u0.tmp.npz", type(first)(shorter.x[:], shorter.y, shorter.context))
    os.replace(folder / "u0.tmp.npz", folder / "u0.npz")  # a new inode, as every writer here makes
    again = trial_data.lazy_user(folder, "u0")
    assert counted["u0"] == 2 and again.windows == 2 and first.windows > 2
    with pytest.raises(ValueError):  # one copy serves every share: it is read-only
        again.y[0, 0] = 1
