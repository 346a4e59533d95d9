"""The saved-model format of `esnfed retrain`: one uncompressed .npz of arrays plus one .json of
metadata per retrained model, readable with numpy and json alone (no pickle, no esnfed code).

Files: ``runs/models/<dataset>/<method>/<pct>/seed-<k>.npz`` and ``seed-<k>.json`` (k = 0, 1, ...).

The .npz (``np.load(path, allow_pickle=False)``) holds, for every method except ``random``:
  w_in    float32 (N, U)  input weights
  w       float32 (N, N)  recurrent weights Ŵ
  leak    float64 ()      leak rate a
  gain    float32 (N,)    IP gain g of the final reservoir (all ones without IP)
  bias    float32 (N,)    IP bias b of the final reservoir (all zeros without IP)
  readout float64 (C, N)  readout W of the final model; (C, N+1) with readout.bias (the .json's
                          "readout_bias": true): the last column is the bias b_out
  lambda  float64 ()      ridge regularisation λ the readout was solved with
  seed    int64 ()        the retrain seed
and, for the continual methods (clip-*, fedclip-*), the model after each context t = 0..T-1:
  context_gain    float32 (T, N)
  context_bias    float32 (T, N)
  context_readout float64 (T, C, N)  ((T, C, N+1) with readout.bias)
(the last row of each equals gain, bias, readout). ``random`` stores only ``seed``.
Deep reservoirs (deep-incfed, deep-fedip; esnfed_core.deep) store, instead of w_in, w and leak,
  layer_units int64 (L,)            units N_l of each layer (N = Σ N_l)
  w_in_<l>    float32 (N_l, U_l)    input weights of layer l (U_0 = U, U_l = N_{l-1})
  w_<l>       float32 (N_l, N_l)    recurrent weights of layer l
  leak        float64 (L,)          leak rate of each layer
with gain, bias (N,) and readout (C, N) over the concatenated states of the layers in order;
layer l runs the recurrence below on layer l−1's states x_{l−1}(t) as its input u(t).
The heterogeneous methods (local, ensemble, align-α; docs/heterogeneous.md) also store each
client c's own reservoir: client<c>_w_in, client<c>_w, client<c>_leak, client<c>_gain,
client<c>_bias (as above), and (local, ensemble) its readout client<c>_readout float64 (C, N_c) ((C, N_c + 1) with readout.bias).
align-α's w_in ... readout are the server's target reservoir and the shared readout;
local/ensemble store no target reservoir (w_in ... bias absent, readout absent).

Recomputing a prediction (PROTOCOL §2-3): per window u(1..T') (float32, from
data/processed/<dataset>/<user>.npz ``x``), start from x(0) = 0 and for t = 1..T'
  x_net = w_in @ u(t) + w @ x(t-1);  h = tanh(gain * x_net + bias);  x(t) = (1-leak) x(t-1) + leak h
then predict argmax(readout @ x(t)) for every step; accuracy = share of steps whose prediction
equals ``y`` (pooled over all windows of all evaluated users). The random baseline predicts
``numpy.random.default_rng(seeds[role]).integers(0, C, size=n)`` for the n labels of the users of
that role (``test``, ``train`` or ``validation``) concatenated in partition order, each user's
``y`` flattened row-major.

The .json holds: format ("esnfed-model"), format_version (1), dataset, method, pct, retrain (k),
seed, seeds (the named sub-seeds of the seed: reservoir, ip, validation, test, train), config (the
selected hyperparameters), lambda, n_classes, n_inputs, units, n_contexts (continual) or null,
train_users, params_budget (params.yaml's budget the model was retrained under) and
params_budget_digest (16 hex digits: the digest of what of that budget the selection it was
retrained from drew on, esnfed_stages.params.experiment.BudgetSpec.digest; assess refuses another
name or digest, and trusts a model without them), (heterogeneous methods only) params (the
heterogeneity settings of params.yaml it was retrained with, {"heterogeneity.seed", ".mode",
".vary", ".combine": value}; assess refuses other ones and trusts a model without it), n_clients and
client_configs (each client's drawn hyperparameters), communication (federated methods: floats and bytes up/down, rounds, clients) or
null, ip_rounds (continual: the IP rounds or epochs behind each context's model) or null,
(joint only) joint_capped (per context, true where continual.joint.max_rounds, not early stopping,
ended its rounds: the kept model may still have been improving; always false without a cap),
lambda_selection (stationary ESN methods: {"mode": "select" | "frozen", "lambdas": the grid tried,
"lambda": the one kept, "validation_accuracy": per λ of the grid on the validation users, or null
when frozen}; null otherwise), arrays ({name: {"shape", "dtype"}}), npz_sha256 (of the .npz
bytes) and key (the identity that lets a rerun skip a model already trained with the same inputs).
"""

from __future__ import annotations

import hashlib
import math
from pathlib import Path
from typing import Any

import numpy as np

from esnfed_core.data.paths import path_problem
from esnfed_core.errors import ConfigError, DataError
from esnfed_core.hyperparameters import check_values
from esnfed_core.method import Method
from esnfed_core.quote import quote
from esnfed_core.deep import DeepReservoir
from esnfed_core.reservoir import Reservoir
from esnfed_core.communication import check_communication
from esnfed_core.validation import ParameterError
from esnfed_core.trial import FittedModel, check_config
from esnfed_stages._io import read_json, read_npz, write_json, write_npz

__all__ = ["save_model", "load_model", "read_meta", "model_paths", "FORMAT", "FORMAT_VERSION"]

FORMAT = "esnfed-model"
MAX_CLASSES = 128  # labels are int8 (0..127)
FORMAT_VERSION = 1
_STATIONARY = ("w_in", "w", "leak", "gain", "bias", "readout", "lambda", "seed")
_CONTINUAL = ("context_gain", "context_bias", "context_readout")
_DEEP = ("layer_units", "leak", "gain", "bias", "readout", "lambda", "seed")
_CLIENT = ("w_in", "w", "leak", "gain", "bias")


def _client_arrays(model: FittedModel) -> dict[str, np.ndarray]:
    """Each client's reservoir (and readout) of a heterogeneous model as client<c>_<name>."""
    out: dict[str, np.ndarray] = {}
    for c, res in enumerate(model.clients or ()):
        out.update({f"client{c}_w_in": res.w_in, f"client{c}_w": res.w,
                    f"client{c}_leak": np.asarray(res.leak, np.float64), f"client{c}_gain": res.gain,
                    f"client{c}_bias": res.bias})
        if model.client_readouts is not None:
            out[f"client{c}_readout"] = np.asarray(model.client_readouts[c], np.float64)
    return out


def model_paths(directory: Path, k: int) -> tuple[Path, Path]:
    """(npz, json) of retrain ``k`` in ``directory``."""
    return Path(directory) / f"seed-{k}.npz", Path(directory) / f"seed-{k}.json"


def model_arrays(model: FittedModel) -> dict[str, np.ndarray]:
    arrays: dict[str, np.ndarray] = {"seed": np.asarray(model.seed, np.int64)}
    if model.reservoir is None and model.clients is None:
        return arrays
    res = model.reservoir
    arrays.update(_client_arrays(model))
    if res is None:  # local / ensemble: no target reservoir
        arrays["lambda"] = np.asarray(model.lam, np.float64)
        return arrays
    if isinstance(res, DeepReservoir):
        arrays["layer_units"] = np.asarray([r.units for r in res.layers], np.int64)
        for i, r in enumerate(res.layers):
            arrays.update({f"w_in_{i}": r.w_in, f"w_{i}": r.w})
        arrays["leak"] = np.asarray([r.leak for r in res.layers], np.float64)
    else:
        arrays.update(w_in=res.w_in, w=res.w, leak=np.asarray(res.leak, np.float64))
    arrays.update(
        gain=res.gain, bias=res.bias,
        readout=np.asarray(model.readout, np.float64), **{"lambda": np.asarray(model.lam, np.float64)},
    )
    if model.context_gain is not None:
        arrays.update(context_gain=np.asarray(model.context_gain, np.float32),
                      context_bias=np.asarray(model.context_bias, np.float32),
                      context_readout=np.asarray(model.context_readout, np.float64))
    return arrays


def save_model(directory: Path, k: int, model: FittedModel, meta: dict[str, Any]) -> None:
    """Write the .npz, then the .json (which names the .npz's hash): the .json is written last,
    so a model counts as saved only when both files are complete."""
    npz, js = model_paths(directory, k)
    arrays = model_arrays(model)
    write_npz(npz, **arrays)
    res = model.reservoir
    doc = {
        "format": FORMAT, "format_version": FORMAT_VERSION, **meta, "retrain": k,
        "method": model.method, "seed": model.seed, "seeds": model.seeds, "config": model.config,
        "lambda": model.lam, "n_classes": model.n_classes,
        "n_inputs": None if res is None else res.n_inputs, "units": None if res is None else res.units,
        **({} if model.clients is None else {  # heterogeneous methods only
            "n_clients": len(model.clients),
            "client_configs": None if model.client_configs is None else list(model.client_configs)}),
        "n_contexts": None if model.context_gain is None else int(len(model.context_gain)),
        "communication": model.communication, "ip_rounds": model.ip_rounds,
        **({} if model.joint_capped is None else {"joint_capped": model.joint_capped}),  # joint only
        **({"readout_bias": True} if readout_bias(model) else {}),  # readout.bias only: (C, N+1)
        "arrays": {name: {"shape": list(a.shape), "dtype": str(a.dtype)} for name, a in arrays.items()},
        "npz_sha256": hashlib.sha256(npz.read_bytes()).hexdigest(),
    }
    write_json(js, doc)


def readout_bias(model: FittedModel) -> bool:
    """Whether ``model``'s readout (or, local and ensemble, its clients' readouts) carries the bias
    column (C, N+1) of readout.bias."""
    if model.client_readouts is not None and model.clients is not None:
        return model.client_readouts[0].shape[1] == model.clients[0].units + 1
    return model.readout is not None and model.reservoir is not None \
        and model.readout.shape[1] == model.reservoir.units + 1


def read_meta(directory: Path, k: int) -> dict[str, Any] | None:
    """The .json of retrain ``k`` if both files exist and the .npz matches its recorded hash."""
    npz, js = model_paths(directory, k)
    if not (npz.is_file() and js.is_file()):
        return None
    try:
        meta = read_json(js)
    except DataError:
        return None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        return None
    if meta.get("npz_sha256") != hashlib.sha256(npz.read_bytes()).hexdigest():
        return None
    return meta


def check_best_config(path: Path, method: Method, config: dict[str, Any]) -> None:
    """A saved config (best.json's, a model's) has the method's hyperparameters, each a finite
    number in the range params.yaml's search space is checked against (esnfed_core.hyperparameters):
    else one DataError naming the file and key (not one failed retrain per seed naming neither, or
    a MemoryError for a reservoir of 10^9 units)."""
    try:
        check_config(method, config)
    except ConfigError as exc:
        raise DataError(f"{path}: {exc}") from None
    for key, value in config.items():
        if key not in method.config_keys + method.optional_keys and key != "lambda":
            raise DataError(f"{path}: config.{key}: not a hyperparameter of {method.id} (expected "
                            f"{', '.join(method.config_keys + ('lambda',))}, optionally "
                            f"{', '.join(method.optional_keys) or 'nothing else'})")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise DataError(f"{path}: config.{key}: expected a finite number, got {quote(value)}")
    try:
        check_values(config)
    except ParameterError as exc:
        raise DataError(f"{path}: {exc}") from None


def _array(npz: Path, arrays: dict[str, np.ndarray], name: str, shape: tuple[int, ...] | None = None,
           kind: str = "f") -> np.ndarray:
    """``arrays[name]`` checked: dtype kind (``f`` float, finite; ``iu`` integer) and ``shape``."""
    a = arrays[name]
    if a.dtype.kind not in kind:
        raise DataError(f"{npz}: {name} has dtype {a.dtype}, expected {'a float' if kind == 'f' else 'an integer'} "
                        "array")
    if shape is not None and a.shape != shape:
        raise DataError(f"{npz}: {name} has shape {a.shape}, expected {shape}")
    if kind == "f" and not np.isfinite(a).all():
        raise DataError(f"{npz}: {name} holds NaN or infinity")
    return a


def _scalar(npz: Path, arrays: dict[str, np.ndarray], name: str, kind: str = "f") -> Any:
    """The single number ``arrays[name]`` (0-d or one element), checked as by :func:`_array`."""
    a = _array(npz, arrays, name, kind=kind)
    if a.size != 1 or a.ndim > 1:
        raise DataError(f"{npz}: {name} must hold one number, got shape {a.shape}")
    return a.reshape(()).item()


def _reservoir(npz: Path, arrays: dict[str, np.ndarray], prefix: str = "") -> Reservoir:
    """The shallow reservoir stored as ``<prefix>w_in`` ... (shapes checked by Reservoir)."""
    try:
        return Reservoir(w_in=_array(npz, arrays, f"{prefix}w_in"), w=_array(npz, arrays, f"{prefix}w"),
                         leak=float(_scalar(npz, arrays, f"{prefix}leak")), gain=_array(npz, arrays, f"{prefix}gain"),
                         bias=_array(npz, arrays, f"{prefix}bias"))
    except ParameterError as exc:
        raise DataError(f"{npz}: {prefix}{exc}") from None


# Fields of a model's .json that load_model reads back, and their JSON types.
_META_TYPES = {"method": str, "seed": int, "config": dict, "n_classes": int, "seeds": dict}


def _why_unreadable(npz: Path, js: Path) -> str:
    """One line naming the file of a model ``read_meta`` refused, and why."""
    rerun = "(run `esnfed retrain`)"
    for path in (js, npz):
        if (problem := path_problem(path, "not found: model missing or incomplete")) is not None:
            return f"{path}: {problem} {rerun}"
    try:
        meta = read_json(js)
    except DataError as exc:
        return f"{exc} {rerun}"
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        return f"{js}: not an esnfed model description (format {quote(FORMAT)} expected) {rerun}"
    return (f"{npz}: contents differ from the npz_sha256 in {js.name} (corrupt or changed after "
            f"retraining) {rerun}")


def _deep_reservoir(npz: Path, arrays: dict[str, np.ndarray]) -> DeepReservoir:
    """The deep reservoir of a saved model (format above); DataError naming what is inconsistent."""
    sizes = [int(n) for n in np.atleast_1d(_array(npz, arrays, "layer_units", kind="iu"))]
    leaks = np.atleast_1d(_array(npz, arrays, "leak"))
    missing = [k for i in range(len(sizes)) for k in (f"w_in_{i}", f"w_{i}") if k not in arrays]
    if missing or len(leaks) != len(sizes) or arrays["gain"].shape != (sum(sizes),):
        raise DataError(f"{npz}: deep reservoir arrays inconsistent with layer_units {quote(sizes)} "
                        f"(missing {', '.join(missing) or 'none'}, leak {leaks.shape}, gain {arrays['gain'].shape})")
    bounds = np.cumsum([0] + sizes)
    try:
        return DeepReservoir(tuple(
            Reservoir(w_in=_array(npz, arrays, f"w_in_{i}"), w=_array(npz, arrays, f"w_{i}"), leak=float(leaks[i]),
                      gain=_array(npz, arrays, "gain")[a:b], bias=_array(npz, arrays, "bias")[a:b])
            for i, (a, b) in enumerate(zip(bounds[:-1], bounds[1:]))))
    except ParameterError as exc:
        raise DataError(f"{npz}: {exc}") from None


def load_model(directory: Path, k: int) -> tuple[FittedModel, dict[str, Any]]:
    """Read retrain ``k`` back into a FittedModel (and its metadata); DataError if incomplete."""
    npz, js = model_paths(directory, k)
    meta = read_meta(directory, k)
    if meta is None:
        raise DataError(_why_unreadable(npz, js))
    if meta.get("format_version") != FORMAT_VERSION:
        raise DataError(f"{js}: format_version {quote(meta.get('format_version'))}, expected {FORMAT_VERSION}")
    for key, kind in _META_TYPES.items():  # what is read back below (an edited .json keeps the npz's hash)
        if key not in meta:
            problem = f"missing key {quote(key)}"
        elif isinstance(meta[key], bool) or not isinstance(meta[key], kind):
            problem = f"{key}: expected {kind.__name__}, got {quote(meta[key])}"
        else:
            continue
        # retrain resumes a model whose result key still matches: the file must go first
        raise DataError(f"{js}: {problem} (delete {js.name} and run `esnfed retrain`)")
    if not 2 <= meta["n_classes"] <= MAX_CLASSES:
        raise DataError(f"{js}: n_classes: expected 2..{MAX_CLASSES}, got {meta['n_classes']}")
    bad = [k for k, v in meta["seeds"].items() if isinstance(v, bool) or not isinstance(v, int) or v < 0]
    if bad:
        raise DataError(f"{js}: seeds.{bad[0]}: expected an integer >= 0, got {quote(meta['seeds'][bad[0]])}")
    try:
        method = Method.parse(meta["method"])
    except ConfigError as exc:
        raise DataError(f"{js}: method: {exc}") from None
    check_best_config(js, method, meta["config"])
    try:  # assess copies it into the assess file, whose communication table reads it
        check_communication("communication", meta.get("communication"), method.federated)
    except ParameterError as exc:
        raise DataError(f"{js}: {exc} (delete {js.name} and run `esnfed retrain`)") from None
    arrays = read_npz(npz)
    n_clients = meta.get("n_clients")
    shared = method.shared_model
    deep = "layer_units" in arrays
    expected = (_DEEP if deep else _STATIONARY) if shared else ("seed",)
    if meta.get("n_contexts") is not None:
        expected += _CONTINUAL
    if n_clients is not None:
        expected += tuple(f"client{c}_{a}" for c in range(n_clients) for a in _CLIENT)
        if not shared:
            expected += ("lambda",) + tuple(f"client{c}_readout" for c in range(n_clients))
    missing = [a for a in expected if a not in arrays]
    if missing:
        raise DataError(f"{npz}: missing arrays {', '.join(missing)}")
    bias = meta.get("readout_bias", False)
    if not isinstance(bias, bool):
        raise DataError(f"{js}: readout_bias: expected true or false, got {quote(bias)}")
    res = None
    ctx = {}
    readout = lam = None
    clients = client_readouts = None
    c = meta["n_classes"]
    t = meta.get("n_contexts")
    if n_clients is not None:
        if isinstance(n_clients, bool) or not isinstance(n_clients, int) or n_clients < 1:
            raise DataError(f"{js}: n_clients: expected an integer >= 1, got {quote(n_clients)}")
        clients = tuple(_reservoir(npz, arrays, f"client{i}_") for i in range(n_clients))
        if not shared:
            client_readouts = tuple(_array(npz, arrays, f"client{i}_readout", (c, clients[i].units + bias))
                                    for i in range(n_clients))
            lam = float(_scalar(npz, arrays, "lambda"))
    if shared:
        res = _deep_reservoir(npz, arrays) if deep else _reservoir(npz, arrays)
        readout, lam = _array(npz, arrays, "readout", (c, res.units + bias)), float(_scalar(npz, arrays, "lambda"))
        if t is not None:
            if isinstance(t, bool) or not isinstance(t, int) or t < 1:
                raise DataError(f"{js}: n_contexts: expected an integer >= 1, got {quote(t)}")
            ctx = {"context_gain": _array(npz, arrays, "context_gain", (t, res.units)),
                   "context_bias": _array(npz, arrays, "context_bias", (t, res.units)),
                   "context_readout": _array(npz, arrays, "context_readout", (t, c, res.units + bias))}
    model = FittedModel(
        meta["method"], int(meta["seed"]), dict(meta["config"]), int(meta["n_classes"]),
        dict(meta["seeds"]), reservoir=res, readout=readout, lam=lam,
        context_gain=ctx.get("context_gain"), context_bias=ctx.get("context_bias"),
        context_readout=ctx.get("context_readout"), communication=meta.get("communication"),
        ip_rounds=meta.get("ip_rounds"), joint_capped=meta.get("joint_capped"), clients=clients,
        client_readouts=client_readouts,
        client_configs=None if meta.get("client_configs") is None else tuple(meta["client_configs"]),
    )
    return model, meta
