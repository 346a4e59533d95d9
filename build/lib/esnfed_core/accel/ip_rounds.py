"""The IP mini-batch steps of one IP epoch or FedIP round on the device, driven from a plan held
there: every slot's mini-batch indices, masks and window counts copied to the device once per
round, and in each run of consecutive steps with the same live slots (a *segment*) the steps
whose mini-batches are all full replayed as one CUDA graph on cuda (the short last mini-batch
of a client's epoch runs eagerly between the replays).

Why: the trial batcher's IP driver (accel.trials._train_ip) used to copy each step's indices
from pageable host memory, which makes the host wait for the device at every mini-batch step,
and a 32-trial IP step launches ~2,100 small kernels whose launch gaps were ~6 % of the step on
one H200 (BENCHMARKS.md, "Third GPU measurement": the step captured once and replayed took 0.94×
the eager one). A segment's first step runs eagerly on a side stream (the warm-up a capture
needs: cuBLAS handles, the fused sums' compile), the same step is then captured, and the
segment's other full steps replay it with their indices copied into the graph's static inputs.

The graph replays the eager step's kernels, so the result is the eager one (float32 rounding at
most, should cuBLAS choose another algorithm under capture; the CUDA test bounds it). On the CPU
(torch-cpu) no graph is made: the same static buffers run eagerly, so the plan and the
segments are tested there bit for bit against step-by-step ``ip_step`` calls. A capture that
fails warns once and leaves that segment and the later ones to run eagerly (COUNTS records it).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from esnfed_core.accel.torch_plasticity import ip_step
from esnfed_core.accel.torch_reservoir import Bank

# Capture each segment as a CUDA graph on cuda (False: every step eager, as before 2026-11-28).
GRAPHS = True
# A segment of fewer steps runs eagerly: its capture would cost more than its replays save.
MIN_GRAPH_STEPS = 3
# Since the process started: segments captured, steps replayed, eager steps, failed captures.
COUNTS = {"captured": 0, "replayed": 0, "eager": 0, "failed": 0}


@dataclass
class RoundPlan:
    """One round's mini-batches for every slot: ``idx`` (S, slots, bs) rows of the windows and
    ``mask`` (S, slots, bs) 0/1, ``n_win`` (S, slots) their counts, on the device; on the host,
    ``live[s]``, the slots with a mini-batch at step s, and ``full`` (S, slots), which of those
    are full (no padding)."""

    idx: torch.Tensor
    mask: torch.Tensor
    n_win: torch.Tensor
    live: list[tuple[int, ...]]
    full: np.ndarray

    @classmethod
    def of(cls, plans: Sequence[Sequence[np.ndarray]], batch_size: int, device: str | torch.device) -> "RoundPlan":
        """``plans[k]``: slot k's mini-batches in order, each an array of window rows (at most
        ``batch_size``); a slot whose mini-batches are done is absent from the later steps."""
        steps = max((len(p) for p in plans), default=0)
        idx = np.zeros((steps, len(plans), batch_size), np.int64)
        mask = np.zeros((steps, len(plans), batch_size), np.float32)
        for k, batches in enumerate(plans):
            for s, rows in enumerate(batches):
                if not 0 < len(rows) <= batch_size:
                    raise ValueError(f"RoundPlan: slot {k} step {s} has {len(rows)} windows (1..{batch_size})")
                idx[s, k, : len(rows)] = rows
                mask[s, k, : len(rows)] = 1.0
        live = [tuple(k for k, p in enumerate(plans) if s < len(p)) for s in range(steps)]
        dev = torch.device(device)
        return cls(torch.from_numpy(idx).to(dev), torch.from_numpy(mask).to(dev),
                   torch.from_numpy(mask.sum(axis=2)).to(dev), live, mask.all(axis=2))

    def masked(self, s: int, live: Sequence[int]) -> bool:
        """Whether step s needs a mask: some live slot's mini-batch is not full."""
        return not bool(self.full[s, list(live)].all())

    def segments(self) -> list[tuple[int, int, tuple[int, ...]]]:
        """(first step, end step, live slots) of each run of steps with the same live slots."""
        out: list[tuple[int, int, tuple[int, ...]]] = []
        for s, live in enumerate(self.live):
            if out and out[-1][2] == live:
                out[-1] = (out[-1][0], s + 1, live)
            else:
                out.append((s, s + 1, live))
        return out


class _Segment:
    """The static inputs and outputs of one segment's step: the live slots' weights (``base``
    rows of their trials), σ, (g, b), and one step's indices, mask and counts."""

    def __init__(self, base: Bank, trials: Sequence[int], sigma: torch.Tensor, gain: torch.Tensor,
                 bias: torch.Tensor, x: torch.Tensor, batch_size: int, step_args: dict):
        dev = base.device
        at = torch.tensor(list(trials), device=dev)
        self.bank = base.select(at)
        self.sigma = sigma.index_select(0, at)
        self.gain, self.bias = gain.clone(), bias.clone()
        r = len(trials)
        self.x = x
        self.idx = torch.zeros((r, batch_size), dtype=torch.int64, device=dev)
        self.mask = torch.ones((r, batch_size), dtype=torch.float32, device=dev)
        self.n_win = torch.zeros((r,), dtype=torch.float32, device=dev)
        self.step_args = step_args

    def load(self, plan: RoundPlan, s: int, at: torch.Tensor, masked: bool) -> None:
        self.idx.copy_(plan.idx[s].index_select(0, at))
        self.n_win.copy_(plan.n_win[s].index_select(0, at))
        if masked:
            self.mask.copy_(plan.mask[s].index_select(0, at))

    def step(self, masked: bool = False) -> None:
        """One SGD step of every live slot, (g, b) updated in place (``masked``: with the loaded
        mask, else none): only device work, no host sync, so it can be captured."""
        r, bs = self.idx.shape
        u = self.x.index_select(0, self.idx.view(-1)).view(r, bs, *self.x.shape[1:])
        new = ip_step(self.bank.with_ip(self.gain, self.bias), u, self.mask if masked else None, self.n_win,
                      self.sigma, **self.step_args)
        self.gain.copy_(new.gain)
        self.bias.copy_(new.bias)


def _capture(seg: _Segment) -> torch.cuda.CUDAGraph | None:
    """Run the loaded step once eagerly on a side stream (the warm-up: the segment's first real
    step, so nothing is computed twice), then capture it (recorded, not run); None (with one
    warning per process) when the capture fails: the step was still done once."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        seg.step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            seg.step()
    except RuntimeError as err:
        COUNTS["failed"] += 1
        if COUNTS["failed"] == 1:
            warnings.warn(f"accel.ip_rounds: CUDA graph capture of the IP step failed, running eagerly: "
                          f"{str(err).splitlines()[0][:200]}", RuntimeWarning, stacklevel=3)
        return None
    COUNTS["captured"] += 1
    return graph


def run_round(base: Bank, trial_of: Sequence[int], sigma: torch.Tensor, x: torch.Tensor, plan: RoundPlan,
              gain: torch.Tensor, bias: torch.Tensor, *, mu: float, eta: float, normalize_step: bool,
              fused: bool | None = None, graphs: bool | None = None) -> None:
    """Every step of ``plan``: slot k trains the reservoir ``base`` row ``trial_of[k]`` with σ
    ``sigma[trial_of[k]]`` on its mini-batches of windows ``x`` (W, T, U), starting from and
    updating in place ``gain[k]``, ``bias[k]`` (slots, N) float32. The same arithmetic as
    ``ip_step`` called step by step on each step's live slots (mask None where all are full).
    ``graphs`` (None: GRAPHS), on cuda: in each segment with ≥ MIN_GRAPH_STEPS full steps, the
    first full step is captured and the later full ones replay it; the steps with a short
    mini-batch (one per client and epoch) run eagerly between the replays, on the same buffers."""
    graphs = GRAPHS if graphs is None else bool(graphs)
    run_segments(base, trial_of, sigma, x, plan, gain, bias, capture=graphs and base.device.type == "cuda",
                 step_args={"mu": mu, "eta": eta, "normalize_step": normalize_step, "fused": fused})


def run_segments(base: Bank, trial_of: Sequence[int], sigma: torch.Tensor, x: torch.Tensor, plan: RoundPlan,
                 gain: torch.Tensor, bias: torch.Tensor, *, capture: bool, step_args: dict) -> None:
    """:func:`run_round`'s loop over ``plan.segments()``, capturing (``capture``: cuda) as it
    says; ``step_args`` are ip_step's keywords."""
    for start, end, live in plan.segments():
        at = torch.tensor(list(live), device=base.device)
        seg = _Segment(base, [trial_of[k] for k in live], sigma, gain.index_select(0, at), bias.index_select(0, at),
                       x, plan.idx.shape[2], step_args)
        masked = [plan.masked(s, live) for s in range(start, end)]
        want = capture and masked.count(False) >= MIN_GRAPH_STEPS and COUNTS["failed"] == 0
        graph = None
        for s, mask_it in zip(range(start, end), masked):
            seg.load(plan, s, at, mask_it)
            if graph is not None and not mask_it:
                graph.replay()
                COUNTS["replayed"] += 1
                continue
            if want and graph is None and not mask_it:
                graph = _capture(seg)  # runs this step (its warm-up), then captures it
                want = graph is not None
            else:
                seg.step(mask_it)
            COUNTS["eager"] += 1
        gain[at], bias[at] = seg.gain, seg.bias
        del graph
