"""Differential privacy for FedGCN's pre-training sums: per-node L2 clipping and the Gaussian
mechanism.

What is protected: the features of every node, against anyone who sees a client's released
partial sums (the server in plaintext mode, everyone downstream of the aggregate otherwise).
Neighbouring datasets differ in the features of ONE node (replace-one, each vector clipped to
L2 norm ``C``); edges, degrees and labels are not covered.

Sensitivity. Client k releases ``S_k[i] = Σ_{j ∈ V_k ∩ Ñ(i)} d̃_j^{-1/2} x_j`` for every row i it
touches. Node j appears in exactly the ``d̃_j`` rows ``i ∈ Ñ(j)``, each time scaled by
``d̃_j^{-1/2}``, so replacing ``x_j`` by ``x_j'`` moves the whole release by
``sqrt(d̃_j · d̃_j^{-1}) ‖x_j - x_j'‖ = ‖x_j - x_j'‖ ≤ 2C`` in L2 (Frobenius) norm: the symmetric
GCN normalisation makes the sensitivity independent of the degree.

Calibration. The analytic Gaussian mechanism (Balle & Wang, ICML 2018, Theorem 8): the smallest
σ with ``Φ(Δ/2σ - εσ/Δ) - e^ε Φ(-Δ/2σ - εσ/Δ) ≤ δ``, found by bisection. It is exact for every
ε > 0 (the classic ``σ = Δ sqrt(2 ln(1.25/δ))/ε`` of Dwork & Roth, Theorem A.1, holds only for
ε < 1 and is looser; :func:`classic_gaussian_sigma` gives it for comparison).
"""

from __future__ import annotations

import json
import math
import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from fedgl.errors import OutputError


def _delta_of_sigma(sigma: float, epsilon: float, sensitivity: float) -> float:
    """The δ achieved by Gaussian noise of scale σ at privacy level ε (Balle & Wang, Thm 8)."""
    from scipy.special import log_ndtr, ndtr  # only with DP on: 0.05 s of a run's imports

    a = sensitivity / (2.0 * sigma)
    b = epsilon * sigma / sensitivity
    first = float(ndtr(a - b))
    log_second = epsilon + float(log_ndtr(-a - b))
    second = math.exp(log_second) if log_second < 700 else math.inf
    return first - second


def analytic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """Smallest σ for which ``f(D) + N(0, σ² I)`` is (ε, δ)-DP when ``‖f(D) - f(D')‖₂ ≤ Δ``."""
    if epsilon <= 0 or not 0 < delta < 1 or sensitivity <= 0:
        raise ValueError("need epsilon > 0, 0 < delta < 1 and sensitivity > 0")
    hi = sensitivity
    while _delta_of_sigma(hi, epsilon, sensitivity) > delta:
        hi *= 2.0
    lo = hi
    while lo > sensitivity * 1e-12 and _delta_of_sigma(lo, epsilon, sensitivity) <= delta:
        lo /= 2.0
    if _delta_of_sigma(lo, epsilon, sensitivity) <= delta:
        return lo  # ε so large that (almost) no noise is needed
    for _ in range(100):  # invariant: delta(lo) > δ >= delta(hi)
        mid = math.sqrt(lo * hi)
        if _delta_of_sigma(mid, epsilon, sensitivity) <= delta:
            hi = mid
        else:
            lo = mid
        if hi / lo < 1 + 1e-10:
            break
    return hi


def classic_gaussian_sigma(epsilon: float, delta: float, sensitivity: float) -> float:
    """Dwork & Roth's ``Δ sqrt(2 ln(1.25/δ)) / ε`` (valid for ε < 1 only)."""
    return sensitivity * math.sqrt(2.0 * math.log(1.25 / delta)) / epsilon


def clip_rows(x: Tensor, clip: float) -> Tensor:
    """Scale every row (one node's feature vector) to L2 norm at most ``clip``."""
    norms = x.norm(dim=1, keepdim=True)
    factor = torch.clamp(clip / torch.clamp(norms, min=1e-30), max=1.0)
    return x * factor


@dataclass(frozen=True)
class GaussianMechanism:
    """Clip-then-noise for one client's pre-training release."""

    epsilon: float
    delta: float
    clip: float

    @property
    def sensitivity(self) -> float:
        """L2 sensitivity of a client's whole release under replace-one-node's-features: 2C."""
        return 2.0 * self.clip

    @property
    def sigma(self) -> float:
        return analytic_gaussian_sigma(self.epsilon, self.delta, self.sensitivity)

    def describe(self) -> dict:
        """JSON-ready parameters, recorded in every result."""
        return {"mechanism": "Gaussian, analytic calibration (Balle & Wang 2018)",
                "neighbouring": "replace one node's feature vector (each clipped to L2 norm C)",
                "epsilon": self.epsilon, "delta": self.delta, "clip": self.clip,
                "sensitivity": self.sensitivity, "sigma": self.sigma,
                "classic_sigma_eps_lt_1": (classic_gaussian_sigma(self.epsilon, self.delta,
                                                                  self.sensitivity)
                                           if self.epsilon < 1 else None),
                "scope": "node features in the pre-training sums, once per client; "
                         "not edges, degrees, labels or model updates"}

    def add_noise(self, values: Tensor, rng: np.random.Generator | None = None) -> Tensor:
        """``values + N(0, σ²)`` elementwise. The default generator is seeded from the OS's
        CSPRNG, so the run seed (public in every result) does not reveal the noise."""
        rng = rng if rng is not None else np.random.default_rng(secrets.randbits(128))
        noise = rng.normal(0.0, self.sigma, size=tuple(values.shape))
        return values + torch.from_numpy(noise).to(values.dtype)


# ---------------------------------------------------------------------- accounting
def gaussian_epsilon(mu: float, delta: float) -> float:
    """Smallest ε at which a Gaussian mechanism with ``μ = Δ/σ`` is (ε, δ)-DP (the same
    Balle & Wang curve, solved for ε by bisection)."""
    if mu <= 0:
        return 0.0
    sigma = 1.0 / mu  # sensitivity 1
    lo, hi = 0.0, 1.0
    while _delta_of_sigma(sigma, hi, 1.0) > delta:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2
        if _delta_of_sigma(sigma, mid, 1.0) > delta:
            lo = mid
        else:
            hi = mid
    return hi


def compose(mech: GaussianMechanism, releases: int) -> dict:
    """(ε, δ) of ``releases`` releases of the same features, each with ``mech``.

    Basic composition: ``(r ε, r δ)``. Exact for Gaussian noise (Dong, Roth & Su's Gaussian
    DP): r releases with ``μ = Δ/σ`` each are one Gaussian mechanism with ``μ √r``, whose ε
    at the same total δ = r δ is reported too (never larger than the basic bound)."""
    if releases <= 0:
        return {"releases": 0, "epsilon": 0.0, "delta": 0.0, "gaussian_epsilon": 0.0}
    mu = mech.sensitivity / mech.sigma * math.sqrt(releases)
    delta = min(releases * mech.delta, 1.0)
    exact = gaussian_epsilon(mu, delta) if delta < 1 else 0.0
    return {"releases": releases, "epsilon": releases * mech.epsilon, "delta": delta,
            "gaussian_mu": mu, "gaussian_epsilon": min(exact, releases * mech.epsilon)}


def account(mech: GaussianMechanism, releases: dict[str, list[str]]) -> dict:
    """One repeat's accounting: per client the number of releases (a restart or resume draws
    fresh noise), the per-release values and the composed total of the worst client (a node's
    features are released only by its owner)."""
    counts = {k: len(v) for k, v in sorted(releases.items(), key=lambda kv: int(kv[0]))}
    worst = max(counts.values(), default=0)
    return {"per_release": {"epsilon": mech.epsilon, "delta": mech.delta, "sigma": mech.sigma},
            "releases_per_client": counts, "repeat_total": compose(mech, worst)}


def account_run(repeats: list) -> None:
    """Across repeats (each re-releases the same features): adds ``run_total`` (composed over
    this and every earlier repeat, per client) to every repeat's ``extra["privacy"]["dp"]``."""
    totals: dict[str, int] = {}
    for rep in repeats:
        dp = (rep.extra.get("privacy") or {}).get("dp")
        if not dp or "accounting" not in dp:
            continue
        for k, n in dp["accounting"]["releases_per_client"].items():
            totals[str(k)] = totals.get(str(k), 0) + n
        mech = GaussianMechanism(dp["epsilon"], dp["delta"], dp["clip"])
        dp["accounting"]["run_total"] = {**compose(mech, max(totals.values(), default=0)),
                                         "repeats_so_far": rep.repeat + 1}


# ---------------------------------------------------------------------- the release log
RELEASE_LOG_DIR = "dp-releases"


def release_log_path(config: Any, client_id: int) -> Path | None:
    """Where client ``client_id`` records its releases: ``<out>/dp-releases/client-<k>.jsonl``
    for a run that checkpoints or whose folder holds a checkpoint (the runs that can be resumed,
    a resumed one included even if it no longer checkpoints), else None (the server's count then
    covers everything: no release can happen outside the one attempt)."""
    out = getattr(config, "out", None)
    if not out or not (getattr(config, "checkpoint_every", 0)
                       or (Path(out) / "checkpoint.pt").is_file()):
        return None
    return Path(out) / RELEASE_LOG_DIR / f"client-{int(client_id)}.jsonl"


def record_release(config: Any, client_id: int, seed: int, release_id: str,
                   mech: GaussianMechanism) -> None:
    """The releasing party's own account, written before its release leaves it: one JSON line
    appended to its log and fsync'ed (file and, when it is new, folder), so that no interrupt
    after this call can lose the release. In a deployment each client keeps its own log."""
    path = release_log_path(config, client_id)
    if path is None:
        return
    line = json.dumps({"client": int(client_id), "seed": int(seed), "release": release_id,
                       "epsilon": mech.epsilon, "delta": mech.delta, "clip": mech.clip},
                      sort_keys=True) + "\n"
    try:
        append_durably(path, line.encode())
    except OSError as exc:  # the release is not sent: the run stops here
        raise OutputError(f"DP release log '{path}' could not be written "
                          f"({exc.strerror or type(exc).__name__}); the release was not sent; "
                          "choose a writable --out folder with free space") from None


def append_durably(path: Path, data: bytes) -> None:
    """Append ``data`` to ``path`` and fsync it (and the folders it created): once this
    returns, a crash cannot lose it. Also the party's input record (:mod:`fedgl.privacy.inputs`)."""
    new_dir = not path.parent.is_dir()
    path.parent.mkdir(parents=True, exist_ok=True)
    new_file = not path.exists()
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        if os.write(fd, data) != len(data):
            raise OSError(0, "short write")
        os.fsync(fd)
    finally:
        os.close(fd)
    for folder in ([path.parent.parent] if new_dir else []) + ([path.parent] if new_file else []):
        dfd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)


def logged_releases(out: str | Path | None, seed: int) -> dict[str, list[str]]:
    """Client -> the names of its releases for ``seed`` (one repeat) recorded in the logs
    under ``out``, every attempt of the run included. A line that cannot be parsed (a write torn
    by a crash) still counts, as a release of unknown name: the account may over-count, never
    under-count."""
    folder = Path(out) / RELEASE_LOG_DIR if out else None
    if folder is None or not folder.is_dir():
        return {}
    found: dict[str, list[str]] = {}
    for path in sorted(folder.glob("client-*.jsonl")):
        client = path.stem.split("-", 1)[1]
        for n, line in enumerate(path.read_text(errors="replace").splitlines()):
            try:
                rec = json.loads(line)
                ok = isinstance(rec, dict) and str(rec["client"]) == client
                rid, rec_seed = str(rec["release"]), int(rec["seed"])
            except (ValueError, KeyError, TypeError):
                ok, rid, rec_seed = True, f"unreadable-line-{n}", seed
            if ok and rec_seed == seed and rid not in found.setdefault(client, []):
                found[client].append(rid)
    return {k: v for k, v in found.items() if v}


def merge_releases(*sources: dict[str, list[str]]) -> dict[str, list[str]]:
    """The union, per client, of release names from several accounts (server, logs,
    checkpoint), in first-seen order."""
    out: dict[str, list[str]] = {}
    for src in sources:
        for k, names in src.items():
            seen = out.setdefault(str(k), [])
            seen.extend(n for n in names if n not in seen)
    return out
