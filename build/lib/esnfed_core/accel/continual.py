"""Continual trials (CLIP/FedCLIP, every strategy) batched on the torch kernels.

Each trial of a batch runs :func:`esnfed_core.continual.run_continual` itself, in its own thread,
with a :class:`TorchEngine` whose heavy calls (one IP step, a client's ridge statistics, a
readout's correct counts) are requests to a lockstep driver. Once every live trial waits on a
request, the driver (the calling thread, the only one touching torch) answers all of them: the IP
steps of every trial as one batched ``ip_step`` (one bmm per recurrence step over trials ×
windows; a FedCLIP round's clients fit in threads of their own, so their steps share the tick),
statistics and counts grouped by the windows they read; the contexts are shared by the trials of
a batch, so one pass over a context runs every waiting trial's reservoir at once. The
trial threads run the numpy server code (FedAvg of (g, b), IncFed sums and solves, ledgers,
shuffles, replay buffers, early stopping) exactly as on the numpy path, so seeds, mini-batch
orders and messages are the same and the numbers equal the numpy path within float32 rounding.
A tick's requests depend only on the trials (the driver waits for every live trial), so a batch
is deterministic.

Memory on the device: the windows the trials read, uploaded once per host array and kept while
they fit ``CACHE_BYTES`` (least recently used first out; on torch-cpu an in-memory float32 array
is shared, not copied); replay mini-batches (gathered on the host, per step); the weights of the
trials (trials × N² floats, plus one stacked copy per recent set of trials); one IP mini-batch per
trial (trials × (100 + 32) windows × T × U floats) and the chunk buffers of torch_reservoir.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import torch

from esnfed_core.accel import torch_device
from esnfed_core.accel.torch_plasticity import ip_step
from esnfed_core.accel.torch_reservoir import DTYPE, Bank, tf32
from esnfed_core.accel.passes import counts_of, stats_of
from esnfed_core.continual import ContinualEngine
from esnfed_core.data.windows import Concatenation
from esnfed_core.method import Method
from esnfed_core.plasticity import IPConfig
from esnfed_core.readout import Counts, RidgeStats
from esnfed_core.reservoir import Reservoir
from esnfed_core.settings import Settings
from esnfed_core.trial import (
    FittedModel, TrialData, check_config, continual_contexts, fit_continual, sub_seeds,
)

# Bytes of windows and labels kept on the device between requests (least recently used first out).
CACHE_BYTES = 8 << 30
_BANKS_KEPT = 4  # stacked weights of the last few sets of trials (IP ticks, statistics groups)


@dataclass
class _Request:
    """One trial's pending call: kind "ip" (one SGD step on the windows ``idx`` of ``x``, or on
    ``x`` itself when ``idx`` is None), "stats" (ridge statistics of ``x``, ``y``) or "counts"
    (correct steps of readout ``w`` on ``x``, ``y``)."""

    kind: str
    trial: int  # whose weights
    slot: tuple  # who asks: (trial,) or (trial, client) for a FedCLIP client's fit
    res: Reservoir
    x: Any
    y: Any = None
    idx: np.ndarray | None = None
    cfg: IPConfig | None = None
    n_classes: int = 0
    w: np.ndarray | None = None
    bias: bool = False  # "stats": of the augmented states [S, 1] (readout.bias)


class _Lockstep:
    """Trial threads (and their FedCLIP clients' threads) ask; the driver answers every pending
    request once every live thread waits, on a request or on its clients (``fork``)."""

    def __init__(self, n_trials: int):
        self._cv = threading.Condition()
        self._pending: dict[tuple, _Request] = {}
        self._answers: dict[tuple, tuple[bool, Any]] = {}
        self._running = n_trials
        self._forked: dict[tuple, int] = {}  # parent slot -> its client threads still running

    def ask(self, req: _Request) -> Any:
        with self._cv:
            self._pending[req.slot] = req
            self._cv.notify_all()
            while req.slot not in self._answers:
                self._cv.wait()
            ok, value = self._answers.pop(req.slot)
        if not ok:
            raise value
        return value

    def fork(self, parent: tuple, n: int) -> None:
        """``parent`` waits on ``n`` new threads (each calls done(parent) at its end)."""
        with self._cv:
            self._running += n
            self._forked[parent] = n

    def done(self, parent: tuple | None = None) -> None:
        with self._cv:
            self._running -= 1
            if parent is not None:
                self._forked[parent] -= 1
                if not self._forked[parent]:
                    del self._forked[parent]
            self._cv.notify_all()

    def serve(self, answer: Callable[[list[_Request]], dict[tuple, Any]]) -> None:
        """Answer ticks until every trial is done."""
        while True:
            with self._cv:
                while len(self._pending) + len(self._forked) < self._running:
                    self._cv.wait()
                if not self._pending:
                    return
                reqs = [self._pending[k] for k in sorted(self._pending)]
                self._pending = {}
            try:
                out = answer(reqs)
                answers = {r.slot: (True, out[r.slot]) for r in reqs}
            except Exception as exc:  # noqa: BLE001 - handed to every waiting trial
                answers = {r.slot: (False, exc) for r in reqs}
            with self._cv:
                self._answers.update(answers)
                self._cv.notify_all()


class TorchEngine(ContinualEngine):
    """The engine of trial ``trial`` of a batch: every heavy call becomes a request, from the
    trial's thread or from one of its FedCLIP clients' threads (the asking thread's slot)."""

    def __init__(self, lock: _Lockstep, trial: int):
        self._lock, self._trial = lock, trial
        self._where = threading.local()

    @property
    def _slot(self) -> tuple:
        return getattr(self._where, "slot", (self._trial,))

    def fit_clients(self, start, fits):
        """The clients' fits in threads of their own, so their IP steps share the ticks."""
        if len(fits) < 2:
            return [fit(start) for fit in fits]
        parent = self._slot
        out: list[Reservoir | None] = [None] * len(fits)
        errors: list[BaseException | None] = [None] * len(fits)

        def client(c: int) -> None:
            self._where.slot = parent + (c,)
            try:
                out[c] = fits[c](start)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the trial's thread
                errors[c] = exc
            finally:
                self._lock.done(parent)

        self._lock.fork(parent, len(fits))
        threads = [threading.Thread(target=client, args=(c,), daemon=True) for c in range(len(fits))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for exc in errors:
            if exc is not None:
                raise exc
        return out

    def concat(self, splits):
        """The splits' windows as one lazy :class:`Concatenation` of the arrays the batch shares
        (so the driver finds them on the device); labels joined at once."""
        xs = [s[0] for s in splits]
        y = np.concatenate([s[1] for s in splits]) if len(splits) > 1 else splits[0][1]
        if len(xs) == 1:
            return xs[0], y
        parts: list[Any] = []
        for x in xs:
            parts.extend(x.parts if isinstance(x, Concatenation) else [x])
        return Concatenation(parts), y

    def _ip(self, res: Reservoir, x: Any, idx: np.ndarray | None, cfg: IPConfig) -> Reservoir:
        return self._lock.ask(_Request("ip", self._trial, self._slot, res, x, idx=idx, cfg=cfg))

    def ip_epoch(self, res, x, cfg, rng):
        order = rng.permutation(len(x))  # the draws of plasticity.shuffled_batches
        for i in range(0, len(order), cfg.batch_size):
            res = self._ip(res, x, order[i : i + cfg.batch_size], cfg)
        return res

    def ip_pass(self, res, batches, cfg):
        for batch in batches:
            res = self._ip(res, batch, None, cfg)
        return res

    def stats(self, res, x, y, n_classes, bias=False) -> RidgeStats:
        return self._lock.ask(_Request("stats", self._trial, self._slot, res, x, y, n_classes=n_classes,
                                       bias=bias))

    def counts(self, res, x, y, w) -> Counts:
        return self._lock.ask(_Request("counts", self._trial, self._slot, res, x, y, w=np.asarray(w)))


class _Driver:
    """Answers a tick's requests on ``device``, batched over the trials."""

    def __init__(self, device: str, fused_ip_sums: bool = False):
        self.device = device
        self.fused_ip_sums = fused_ip_sums  # runner.fused_ip_sums: ip_step's fused sums
        self._cache: OrderedDict[tuple, tuple[Any, torch.Tensor]] = OrderedDict()
        self._cached_bytes = 0
        self._weights: dict[int, Bank] = {}
        self._banks: OrderedDict[tuple, Bank] = OrderedDict()
        # Work done, for benchmarks: ticks, and trial-window-steps per kind (padding excluded).
        self.ticks = 0
        self.window_steps = {"ip": 0, "stats": 0, "counts": 0}

    # -- data on the device
    def _upload(self, arr: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(arr)).to(self.device)

    def _cached(self, key: tuple, host: Any, make: Callable[[], np.ndarray]) -> torch.Tensor:
        if key in self._cache:
            self._cache.move_to_end(key)
            return self._cache[key][1]
        t = self._upload(make())
        self._cache[key] = (host, t)  # the host reference keeps id(host) from being reused
        self._cached_bytes += t.numel() * t.element_size()
        while self._cached_bytes > CACHE_BYTES and len(self._cache) > 1:
            _, (_, old) = self._cache.popitem(last=False)
            self._cached_bytes -= old.numel() * old.element_size()
        return t

    def _x(self, part: Any) -> torch.Tensor:
        return self._cached(("x", id(part)), part, lambda: np.asarray(part, np.float32))

    def _y(self, part: Any, labels: np.ndarray) -> torch.Tensor:
        # A part's labels are the same whoever asks (the context's own labels).
        return self._cached(("y", id(part)), part, lambda: np.asarray(labels))

    def _rows(self, x: Any, idx: np.ndarray | None) -> torch.Tensor:
        """Windows ``x[idx]`` (``x`` itself when idx is None) as a float32 tensor on the device."""
        if idx is None:
            return self._upload(np.asarray(x, np.float32))
        parts = x.parts if isinstance(x, Concatenation) else [x]
        if not all(isinstance(p, np.ndarray) for p in parts):
            return self._upload(np.asarray(x[idx], np.float32))  # windows on disk: read on the host
        if len(parts) == 1:
            return self._x(x).index_select(0, self._upload(idx.astype(np.int64)))
        which = np.searchsorted(x.offsets, idx, side="right") - 1
        out = torch.empty((len(idx),) + tuple(x.shape[1:]), dtype=DTYPE, device=self.device)
        for p in np.unique(which).tolist():
            pos = np.flatnonzero(which == p)
            local = self._upload((idx[pos] - x.offsets[p]).astype(np.int64))
            out[self._upload(pos.astype(np.int64))] = self._x(parts[p]).index_select(0, local)
        return out

    @staticmethod
    def _parts(x: Any, y: np.ndarray) -> list[tuple[Any, np.ndarray]]:
        if isinstance(x, Concatenation):
            return [(p, y[int(o) : int(o) + len(p)]) for p, o in zip(x.parts, x.offsets)]
        return [(x, y)]

    # -- weights on the device
    def _bank(self, reqs: Sequence[_Request]) -> Bank:
        """The reservoirs of ``reqs`` (their trials' weights, their current gains and biases)."""
        key = tuple(r.trial for r in reqs)
        for r in reqs:
            if r.trial not in self._weights:
                self._weights[r.trial] = Bank.from_reservoirs([r.res], self.device)
        if key in self._banks:
            self._banks.move_to_end(key)
            stacked = self._banks[key]
        else:
            banks = [self._weights[k] for k in key]
            stacked = Bank(*(torch.cat([getattr(b, f) for b in banks]) for f in ("w_in_t", "w_t", "leak", "gain", "bias")))
            self._banks[key] = stacked
            if len(self._banks) > _BANKS_KEPT:
                self._banks.popitem(last=False)
        gain = self._upload(np.stack([np.asarray(r.res.gain, np.float32) for r in reqs]))
        bias = self._upload(np.stack([np.asarray(r.res.bias, np.float32) for r in reqs]))
        return stacked.with_ip(gain, bias)

    # -- one tick
    def answer(self, reqs: list[_Request]) -> dict[tuple, Any]:
        self.ticks += 1
        out: dict[tuple, Any] = {}
        ip = [r for r in reqs if r.kind == "ip"]
        groups: dict[tuple, list[_Request]] = {}
        for r in ip:
            c = r.cfg
            groups.setdefault((c.mu, c.eta, c.batch_size, c.normalize_step), []).append(r)
        for group in groups.values():
            out.update(self._ip_steps(group))
        out.update(self._grouped([r for r in reqs if r.kind == "stats"], self._stats))
        out.update(self._grouped([r for r in reqs if r.kind == "counts"], self._counts))
        return out

    def _ip_steps(self, reqs: list[_Request]) -> dict[tuple, Reservoir]:
        rows = [self._rows(r.x, r.idx) for r in reqs]
        for r, u in zip(reqs, rows):
            if u.ndim != 3 or u.shape[0] == 0:
                raise ValueError(f"input: expected a non-empty (windows, steps, features) batch, got shape "
                                 f"{tuple(u.shape)}")
        if len({tuple(u.shape[1:]) for u in rows}) > 1:
            raise ValueError(f"ip: mini-batches of different window shapes {sorted({tuple(u.shape[1:]) for u in rows})}")
        sizes = [u.shape[0] for u in rows]
        self.window_steps["ip"] += sum(sizes) * int(rows[0].shape[1])
        b = max(sizes)
        if min(sizes) == b:
            u, mask = torch.stack(rows), None
        else:  # shorter mini-batches are padded, and the padding masked out of every sum
            u = torch.zeros((len(rows), b) + tuple(rows[0].shape[1:]), dtype=DTYPE, device=self.device)
            m = np.zeros((len(rows), b), np.float32)
            for k, rk in enumerate(rows):
                u[k, : sizes[k]] = rk
                m[k, : sizes[k]] = 1.0
            mask = self._upload(m)
        cfg = reqs[0].cfg
        sigma = self._upload(np.array([r.cfg.sigma for r in reqs], np.float64))
        n_win = self._upload(np.array(sizes, np.float64))
        new = ip_step(self._bank(reqs), u, mask, n_win, sigma, mu=cfg.mu, eta=cfg.eta,
                      normalize_step=cfg.normalize_step, fused=self.fused_ip_sums)
        gain, bias = new.gain.cpu().numpy(), new.bias.cpu().numpy()
        return {r.slot: r.res.with_ip(gain[k], bias[k]) for k, r in enumerate(reqs)}

    def _grouped(self, reqs: list[_Request], run: Callable) -> dict[tuple, Any]:
        """Split each request's windows into parts and run every part once for all the trials
        that read it; ``run(part, labels, requests)`` returns one result per request, summed."""
        if not reqs:
            return {}
        by_part: OrderedDict[tuple, tuple[Any, np.ndarray, list[_Request]]] = OrderedDict()
        for r in reqs:
            for part, labels in self._parts(r.x, np.asarray(r.y)):
                extra = (r.n_classes, r.bias) if r.kind == "stats" else (r.w.shape,)
                key = (id(part),) + extra
                by_part.setdefault(key, (part, labels, []))[2].append(r)
        out: dict[tuple, Any] = {}
        for part, labels, group in by_part.values():
            for r, value in zip(group, run(part, labels, group)):
                out[r.slot] = value if r.slot not in out else out[r.slot] + value
        return out

    def _stats(self, part: Any, labels: np.ndarray, reqs: list[_Request]) -> list[RidgeStats]:
        if len(part) == 0:
            return [RidgeStats.zeros(r.res.units, r.n_classes, r.bias) for r in reqs]
        self.window_steps["stats"] += len(reqs) * int(np.shape(part)[0] * np.shape(part)[1])
        return stats_of(self._bank(reqs), self._x(part), self._y(part, labels), reqs[0].n_classes,
                        reqs[0].bias)

    def _counts(self, part: Any, labels: np.ndarray, reqs: list[_Request]) -> list[Counts]:
        grid = np.stack([np.asarray(r.w, np.float64).reshape((-1,) + r.w.shape[-2:]) for r in reqs])
        if len(part) == 0:
            return [Counts(np.zeros(grid.shape[1], np.int64), 0) for _ in reqs]
        correct = counts_of(self._bank(reqs), self._x(part), self._y(part, labels),
                             self._upload(grid)).cpu().numpy()
        total = int(np.shape(part)[0] * np.shape(part)[1])
        self.window_steps["counts"] += len(reqs) * total
        return [Counts(correct[k].astype(np.int64), total) for k in range(len(reqs))]


def fit_continual_batch(method: str | Method, configs: Sequence[Mapping[str, Any]], seeds: Sequence[int],
                        data: TrialData, settings: Settings, *, score: bool = True,
                        work: dict[str, Any] | None = None) -> list[FittedModel]:
    """Train (and with ``score``, score on validation) one continual trial per (config, seed),
    batched: the FittedModels of :func:`esnfed_core.trial.fit` within float32 rounding. ``work``,
    when given, receives the driver's ticks and window-steps per kind (benchmarks)."""
    m = method if isinstance(method, Method) else Method.parse(method)
    if not m.continual:
        raise ValueError(f"fit_continual_batch: {m.id} is not a continual method")
    if len(configs) != len(seeds) or not configs:
        raise ValueError(f"fit_continual_batch: {len(configs)} configs for {len(seeds)} seeds")
    for cfg in configs:
        check_config(m, cfg)
    dev = torch_device(settings.device)
    contexts = continual_contexts(m, data)  # shared: each context goes to the device once
    lock = _Lockstep(len(configs))
    results: list[FittedModel | None] = [None] * len(configs)
    errors: list[BaseException | None] = [None] * len(configs)

    def run_trial(i: int) -> None:
        try:
            seed = int(seeds[i])
            results[i] = fit_continual(m, dict(configs[i]), seed, sub_seeds(seed), data, settings, score,
                                       engine=TorchEngine(lock, i), contexts=contexts)
        except BaseException as exc:  # noqa: BLE001 - re-raised below, in the caller's thread
            errors[i] = exc
        finally:
            lock.done()

    threads = [threading.Thread(target=run_trial, args=(i,), name=f"continual-trial-{i}", daemon=True)
               for i in range(len(configs))]
    driver = _Driver(dev, settings.fused_ip_sums)
    with tf32(settings.tf32 and dev == "cuda"):
        for t in threads:
            t.start()
        lock.serve(driver.answer)  # returns once every trial is done
    for t in threads:
        t.join()
    if work is not None:
        work.update(ticks=driver.ticks, window_steps=dict(driver.window_steps))
    for exc in errors:
        if exc is not None:
            raise exc
    return [r for r in results if r is not None]
