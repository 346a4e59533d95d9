"""SecAgg+ hides a client's data from the server: the masked vector a client
uploads has the same distribution, uniform over the field Z_(2^32), whatever the client's data.

Flower's own client-side stages (secaggplus_mod's _setup, _share_keys, _collect_masked_vectors:
stochastic quantization, the weight entry, the private mask and the pairwise mask, mod 2^32) run
for a client and one neighbour over many independent draws of keys and seeds, for two clients'
real IncFed uploads (esnfed_flower.secagg.mean_stats of two training users, their step counts as
the weights). Their randomness is drawn from one seeded generator (key pairs, the private seed,
the stochastic rounding), so the test and its p-values are reproducible. The control, the same
stages with the masks zeroed, shows that the test has the power to see the data. The stages are
Flower's private functions: flwr is pinned (requirements/flower.txt, 1.42.0); docs/flower.md has
the measured p-values.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from experiment_data import trial_data  # noqa: E402

MOD = 2**32          # SecAggPlusWorkflow's default modulus_range
QUANT = 2**22        # and quantization_range
DRAWS = 200          # independent key/seed draws per dataset
ALPHA = 0.01         # a masked test passes with p > ALPHA
BINS = 64            # chi-square bins over the field
CFG = {"units": 10, "spectral_radius": 0.9, "leak": 0.5, "input_scaling": 0.8,
       "reservoir-seed": 5, "batch-size": 5}


def _uploads():
    """Two clients' SecAgg+ uploads ([Ā, B̄], n_steps): the first and the last training user."""
    from esnfed_flower.secagg import mean_stats

    data, _ = trial_data(pct="100")
    users = list(data.train.values())
    rc = {**CFG, "n-classes": data.n_classes}
    return [mean_stats(rc, np.asarray(u.x), np.asarray(u.y)) for u in (users[0], users[-1])]


def _masked_vectors(mod, uploads, max_weight, seed: int, monkeypatch) -> list[np.ndarray]:
    """For each upload, DRAWS masked vectors (flattened, weight entry first) from Flower's
    client stages; client 1 holds the data, client 2 is its neighbour."""
    from cryptography.hazmat.primitives.asymmetric import ec
    from flwr.common import bytes_to_ndarray, ndarrays_to_parameters
    from flwr.common.secure_aggregation.secaggplus_constants import Key

    rng = np.random.default_rng(seed)
    curve_order = int("FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFF"
                      "C7634D81F4372DDF581A0DB248B0A77AECEC196ACCC52973", 16)  # SECP384R1's order n

    def key_pair():
        sk = ec.derive_private_key(1 + int.from_bytes(rng.bytes(48), "big") % (curve_order - 1), ec.SECP384R1())
        return sk, sk.public_key()

    monkeypatch.setattr(mod, "generate_key_pairs", key_pair)
    monkeypatch.setattr(mod.os, "urandom", lambda n: rng.bytes(n))
    np.random.seed(seed)  # Flower's stochastic rounding draws from numpy's global generator
    setup = {Key.SAMPLE_NUMBER: 2, Key.SHARE_NUMBER: 2, Key.THRESHOLD: 2, Key.CLIPPING_RANGE: 1.0,
             Key.TARGET_RANGE: QUANT, Key.MOD_RANGE: MOD, Key.MAX_WEIGHT: float(max_weight)}
    out = []
    for vec, n_steps in uploads:
        rows = []
        for _ in range(DRAWS):
            me, other = mod.SecAggPlusState(nid=1), mod.SecAggPlusState(nid=2)
            keys = {}
            for s in (me, other):
                r = mod._setup(s, setup)
                keys[str(s.nid)] = (r[Key.PUBLIC_KEY_1], r[Key.PUBLIC_KEY_2])
            mod._share_keys(me, keys)
            shared = mod._share_keys(other, keys)
            masked = mod._collect_masked_vectors(
                me, {Key.CIPHERTEXT_LIST: shared[Key.CIPHERTEXT_LIST], Key.SOURCE_LIST: [2]},
                n_steps, ndarrays_to_parameters(vec))
            rows.append(np.concatenate([bytes_to_ndarray(b).ravel() for b in masked[Key.MASKED_PARAMETERS]]))
        out.append(np.stack(rows).astype(np.int64))
    return out


@pytest.fixture(scope="module")
def views():
    """(masked, unmasked): per dataset, DRAWS × (d + 1) field elements the server receives, and
    the same stages' output with every mask zeroed (the quantized data)."""
    mod = importlib.import_module("flwr.client.mod.secure_aggregation.secaggplus_mod")
    uploads = _uploads()
    max_weight = max(n for _, n in uploads)
    with pytest.MonkeyPatch.context() as mp:
        masked = _masked_vectors(mod, uploads, max_weight, 11, mp)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mod, "pseudo_rand_gen", lambda seed, rng, dims: [np.zeros(d, np.int64) for d in dims])
        unmasked = _masked_vectors(mod, uploads, max_weight, 11, mp)
    return masked, unmasked


def _chi2_uniform(v: np.ndarray) -> float:
    """p of a chi-square test that field elements are uniform over BINS equal bins of Z_MOD."""
    counts = np.bincount((v // (MOD // BINS)).astype(np.int64), minlength=BINS)
    return float(stats.chisquare(counts).pvalue)


def test_masked_vector_does_not_depend_on_the_data(views):
    (ma, mb), _ = views
    assert ma.shape == mb.shape and ma.shape[0] == DRAWS
    assert ma.min() >= 0 and ma.max() < MOD
    # pooled over entries and draws: same distribution for both clients' data, and uniform
    assert stats.ks_2samp(ma.ravel(), mb.ravel()).pvalue > ALPHA
    assert _chi2_uniform(ma.ravel()) > ALPHA and _chi2_uniform(mb.ravel()) > ALPHA
    # entry by entry (the weight entry included), Bonferroni over the d + 1 entries
    p = [stats.ks_2samp(ma[:, j], mb[:, j]).pvalue for j in range(ma.shape[1])]
    assert min(p) * len(p) > ALPHA


def test_control_the_unmasked_vectors_differ(views):
    """The same statistics on the quantized data (masks zeroed) tell the two clients apart."""
    _, (ua, ub) = views
    assert ua.max() <= QUANT  # really unmasked: the quantized data and weight lie in [0, 2^22]
    assert stats.ks_2samp(ua.ravel(), ub.ravel()).pvalue < 1e-6
    assert _chi2_uniform(ua.ravel()) < 1e-6
    p = [stats.ks_2samp(ua[:, j], ub[:, j]).pvalue for j in range(ua.shape[1])]
    assert min(p) * len(p) < 1e-6
