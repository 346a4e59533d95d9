"""The sizes of the GPU benchmarks' cases (the GPU goals' cases at full scale; SMOKE shrinks every one
to run on a CPU in seconds). Shared by bench_gpu.py (torch) and bench_jax_anchor.py (JAX), so the
two measure the same shapes; this module imports neither library."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Scale:
    """Sizes of every case (the full scale of the GPU goals; --smoke shrinks everything)."""

    steps: int = 700
    units: int = 400
    small_units: int = 100
    inputs: int = 8
    state_windows: int = 36000
    ip_windows: int = 100
    trials: int = 64
    trial_windows: int = 1024
    epoch_trials: int = 32
    epoch_clients: int = 3
    client_windows: int = 2990  # WESAD: ~2,990 one-second windows per subject (bench_paper_budget)
    cpu_windows: int = 2048
    cost_trials: int = 32
    cost_windows: int = 256
    reps: int = 2


SMOKE = Scale(steps=12, units=16, small_units=8, state_windows=64, ip_windows=5, trials=3, trial_windows=8,
              epoch_trials=2, epoch_clients=2, client_windows=12, cpu_windows=8, cost_trials=2,
              cost_windows=3, reps=1)
