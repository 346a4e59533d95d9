"""Torch kernels of the reservoir core batched over R reservoirs x B windows: the recurrence
(one bmm per step), the ridge statistics and the readouts' correct counts, chunk by chunk.

The same equations as :mod:`esnfed_core.reservoir` and :mod:`esnfed_core.readout`, in float32
(TF32 only when :func:`set_tf32` enables it). States live in preallocated chunk buffers laid out
(R, k, B, N): the k steps of one reservoir form one contiguous (k·B, N) block, so the statistics
of a chunk are one bmm. Memory per call: 3 chunk buffers of CHUNK_ELEMENTS floats (3 × 128 MiB;
on the CPU CPU_CHUNK_ELEMENTS, cache-sized) unless one step of R·B·N alone is larger, plus the
(R, N, N) weights (twice with IP: the gains are folded into a scaled copy) and float64 statistics.

With IP, a step is three kernels: net = (g·W_in) u + b + (g·Ŵ) x(t−1) (the gains folded into the
weights, the biases into the input projection of the chunk: one baddbmm), h = tanh(net), and the
leak (lerp), instead of a fourth (g·x_net + b) per step.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch

from esnfed_core.reservoir import Reservoir

DTYPE = torch.float32
# Float32 elements of one chunk buffer (R·k·B·N; three such buffers: states, x_net, tanh):
# 2^25 = 128 MiB each. The steps per chunk shrink to fit, down to one step (then R·B·N rules).
CHUNK_ELEMENTS = 1 << 25
# On the CPU a chunk's elementwise passes (IP sums) run at cache speed only if its buffers fit in
# cache: 2^18 floats = 1 MiB each (benchmarks/bench_ip_epoch.py; the numpy path uses the same).
CPU_CHUNK_ELEMENTS = 1 << 18
MAX_CHUNK_STEPS = 32


def _numpy_tanh(x: torch.Tensor, out: torch.Tensor) -> None:
    """tanh of a CPU tensor through numpy's views of both: torch's CPU tanh runs ~2 ns/element on
    this project's machines against numpy's ~0.16 (bench_ip_epoch), as costly as the product
    itself at 100 units; numpy's is also the function the numpy path uses."""
    np.tanh(x.numpy(), out=out.numpy())


def set_tf32(enabled: bool) -> None:
    """Allow TF32 tensor-core products on CUDA (10-bit mantissa inputs; off by default)."""
    torch.backends.cuda.matmul.allow_tf32 = bool(enabled)
    torch.backends.cudnn.allow_tf32 = bool(enabled)


@contextmanager
def tf32(enabled: bool) -> Iterator[None]:
    """:func:`set_tf32` inside the block, then both flags as they were (torch's defaults differ:
    matmul off, cuDNN on; restoring both from the matmul flag would turn cuDNN's off)."""
    saved = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    set_tf32(enabled)
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = saved


def chunk_steps(reservoirs: int, windows: int, units: int, t_len: int, device: torch.device | str = "cuda") -> int:
    """Steps per chunk: as many as fit CHUNK_ELEMENTS (CPU_CHUNK_ELEMENTS on the CPU), between 1
    and MAX_CHUNK_STEPS."""
    budget = CPU_CHUNK_ELEMENTS if torch.device(device).type == "cpu" else CHUNK_ELEMENTS
    k = budget // max(1, reservoirs * windows * units)
    return int(max(1, min(MAX_CHUNK_STEPS, k, max(t_len, 1))))


@dataclass(frozen=True, eq=False)
class Bank:
    """R reservoirs of one size on one device: ``w_in_t`` (R, U, N), ``w_t`` (R, N, N) (the
    transposes, so a step is x @ w_t), ``leak`` (R,), ``gain`` and ``bias`` (R, N), float32.
    ``ip`` False promises gains 1 and biases 0 (known on the host: no device sync to find out)."""

    w_in_t: torch.Tensor
    w_t: torch.Tensor
    leak: torch.Tensor
    gain: torch.Tensor
    bias: torch.Tensor
    ip: bool = True

    @classmethod
    def from_reservoirs(cls, reservoirs: Sequence[Reservoir], device: str | torch.device) -> "Bank":
        if not reservoirs:
            raise ValueError("Bank: no reservoirs")
        deep = [len(r.layers) for r in reservoirs if not isinstance(r, Reservoir)]
        if deep:
            raise ValueError(f"Bank: a deep reservoir ({deep[0]} layers) runs on the numpy path only "
                             "(runner.device cpu; esnfed_core.deep)")
        shapes = {(r.units, r.n_inputs) for r in reservoirs}
        if len(shapes) != 1:
            raise ValueError(f"Bank: reservoirs of one (units, inputs) shape only, got {sorted(shapes)}")

        def stack(arrays) -> torch.Tensor:
            return torch.from_numpy(np.ascontiguousarray(np.stack(arrays), np.float32)).to(device)

        return cls(
            w_in_t=stack([r.w_in.T for r in reservoirs]), w_t=stack([r.w.T for r in reservoirs]),
            leak=torch.tensor([r.leak for r in reservoirs], dtype=DTYPE, device=device),
            gain=stack([r.gain for r in reservoirs]), bias=stack([r.bias for r in reservoirs]),
            ip=any(r.has_ip for r in reservoirs),
        )

    @property
    def reservoirs(self) -> int:
        return self.w_t.shape[0]

    @property
    def units(self) -> int:
        return self.w_t.shape[1]

    @property
    def device(self) -> torch.device:
        return self.w_t.device

    def with_ip(self, gain: torch.Tensor, bias: torch.Tensor) -> "Bank":
        """The same weights with new (R, N) gains and biases (cast to float32)."""
        return Bank(self.w_in_t, self.w_t, self.leak, gain.to(DTYPE), bias.to(DTYPE))

    def select(self, index: Sequence[int] | torch.Tensor) -> "Bank":
        """The reservoirs at ``index`` (repeats allowed: FedIP clients of one trial share weights)."""
        idx = torch.as_tensor(index, dtype=torch.long, device=self.device)
        return Bank(*(t.index_select(0, idx) for t in (self.w_in_t, self.w_t, self.leak, self.gain, self.bias)),
                    ip=self.ip)


@dataclass
class Chunk:
    """Steps t0 .. t0+k of every reservoir and window: ``states``, ``net`` (g·x_net + b, with
    x_net = W_in u + Ŵ x(t-1)) and ``h`` (tanh(net)), each (R, k, B, N). Views of reused buffers:
    the consumer may overwrite them, and must use them before asking for the next chunk."""

    t0: int
    states: torch.Tensor
    net: torch.Tensor
    h: torch.Tensor


def iter_chunks(bank: Bank, u: torch.Tensor, *, steps: int | None = None) -> Iterator[Chunk]:
    """Run the reservoirs over windows ``u`` (R', B, T, U), R' = 1 (the same windows for every
    reservoir) or R; every window starts from x(0) = 0 (PROTOCOL §2)."""
    if u.ndim != 4 or u.shape[0] not in (1, bank.reservoirs) or u.shape[3] != bank.w_in_t.shape[1]:
        raise ValueError(f"input: expected (1 or {bank.reservoirs}, B, T, {bank.w_in_t.shape[1]}), "
                         f"got {tuple(u.shape)}")
    r, n = bank.reservoirs, bank.units
    _, b, t_len, _ = u.shape
    dev = bank.device
    k_max = steps or chunk_steps(r, b, n, t_len, dev)
    flat = [torch.empty(r * k_max * b * n, dtype=DTYPE, device=dev) for _ in range(3)]
    prev = torch.zeros((r, b, n), dtype=DTYPE, device=dev)
    a = bank.leak.view(r, 1, 1)
    if bank.ip:  # g folded into the weights' columns, b into the input projection
        g = bank.gain.view(r, 1, n)
        w_in, w_t = bank.w_in_t * g, bank.w_t * g
        bias4 = bank.bias.view(r, 1, 1, n)
    else:
        w_in, w_t, bias4 = bank.w_in_t, bank.w_t, None
    w_in4 = w_in.unsqueeze(1)  # (R, 1, U, N): broadcast over the chunk's steps
    tanh = _numpy_tanh if dev.type == "cpu" else torch.tanh
    for t0 in range(0, t_len, k_max):
        k = min(k_max, t_len - t0)
        st, net, h = (f[: r * k * b * n].view(r, k, b, n) for f in flat)
        torch.matmul(u[:, :, t0 : t0 + k].transpose(1, 2), w_in4, out=net)
        if bias4 is not None:
            net += bias4
        for j in range(k):
            if t0 + j > 0:  # x(0) = 0: no recurrent term at the first step
                net[:, j].baddbmm_(prev if j == 0 else st[:, j - 1], w_t)
            tanh(net[:, j], out=h[:, j])
            torch.lerp(prev if j == 0 else st[:, j - 1], h[:, j], a, out=st[:, j])
        prev.copy_(st[:, k - 1])
        yield Chunk(t0, st, net, h)


def states(bank: Bank, u: torch.Tensor) -> torch.Tensor:
    """All states (R, T, B, N) of windows ``u`` (R', B, T, U): for tests and small batches."""
    out = [c.states.clone() for c in iter_chunks(bank, u)]
    return torch.cat(out, dim=1)


def _chunk_labels(labels: torch.Tensor, t0: int, k: int) -> torch.Tensor:
    """Labels (R', B, T) of steps t0..t0+k flattened like the chunk's rows: (R', k·B)."""
    return labels[:, :, t0 : t0 + k].transpose(1, 2).reshape(labels.shape[0], -1).long()


def ridge_stats(bank: Bank, u: torch.Tensor, labels: torch.Tensor, n_classes: int, bias: bool = False
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """A = YᵀS (R, C, N) and B = SᵀS (R, N, N) of windows ``u`` (R', B, T, U) with per-step
    labels (R', B, T): products and sums in float32 within a chunk (k·B rows, one bmm), added
    into float64 across chunks (PROTOCOL §3). With ``bias`` (readout.bias) those of the augmented
    states [S, 1], (R, C, N+1) and (R, N+1, N+1): the constant column's entries (state sums in
    float64, class counts, steps) beside the same float32 products, as readout.StatsAccumulator."""
    r, n = bank.reservoirs, bank.units
    m = n + int(bias)
    a64 = torch.zeros((r, n_classes, m), dtype=torch.float64, device=bank.device)
    b64 = torch.zeros((r, m, m), dtype=torch.float64, device=bank.device)
    a_states, b_states = a64[:, :, :n], b64[:, :n, :n]  # the whole arrays without bias
    gram = torch.empty((r, n, n), dtype=DTYPE, device=bank.device)
    for c in iter_chunks(bank, u):
        k = c.states.shape[1]
        s = c.states.reshape(r, -1, n)
        torch.bmm(s.transpose(1, 2), s, out=gram)
        b_states += gram
        y = _chunk_labels(labels, c.t0, k)
        onehot = torch.nn.functional.one_hot(y, n_classes).to(DTYPE)  # (R', k·B, C)
        a_states += torch.matmul(onehot.transpose(1, 2), s)
        if bias:  # the constant feature's row and column: Σs, steps, and class counts
            sums = s.sum(dim=1, dtype=torch.float64)
            b64[:, :n, n] += sums
            b64[:, n, :n] += sums
            b64[:, n, n] += s.shape[1]
            a64[:, :, n] += onehot.sum(dim=1, dtype=torch.float64)
    b64 = 0.5 * (b64 + b64.transpose(1, 2))  # exactly symmetric, as StatsAccumulator.result
    return a64, b64


def count_correct(bank: Bank, u: torch.Tensor, labels: torch.Tensor, readouts: torch.Tensor) -> torch.Tensor:
    """Correct steps (R, L) of each reservoir's readouts ``readouts`` (R, L, C, N) on windows
    ``u`` (R', B, T, U) with labels (R', B, T): argmax of the float32 scores, as readout.predict.
    Readouts (R, L, C, N+1) (readout.bias) add their last column, the bias, to the scores."""
    r, n = bank.reservoirs, bank.units
    _, ll, c, cols = readouts.shape
    if cols not in (n, n + 1):
        raise ValueError(f"readouts: expected (R, L, C, {n}) or (R, L, C, {n + 1}), got {tuple(readouts.shape)}")
    b_out = readouts[..., n].to(DTYPE).reshape(r, 1, ll * c) if cols == n + 1 else None
    w = (readouts if cols == n else readouts[..., :n]).to(DTYPE).reshape(r, ll * c, n).transpose(1, 2)  # (R, N, L·C)
    correct = torch.zeros((r, ll), dtype=torch.int64, device=bank.device)
    for ch in iter_chunks(bank, u):
        k = ch.states.shape[1]
        scores = torch.bmm(ch.states.reshape(r, -1, n), w)
        if b_out is not None:
            scores += b_out
        scores = scores.view(r, -1, ll, c)
        pred = scores.argmax(dim=3)
        y = _chunk_labels(labels, ch.t0, k).unsqueeze(2)  # (R', k·B, 1)
        correct += (pred == y).sum(dim=1)
    return correct
