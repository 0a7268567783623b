"""Vertical alignment deployed: the PSI of :mod:`fedgl.privacy.psi` as one command per step, each
organisation on its own machine, its messages files that a relay passes around.

**Route: a star through an untrusted relay.** Every file goes from an organisation to the relay
(the coordinator who will run the GLASU server, say) and from the relay to the next
organisation, as the Flower deployment's messages do; the relay sees only blinded values and
public facts. With ``K`` parties (client ids ``0..K-1``):

1. ``start`` (party ``j``, ``fedgl psi start --ingest DIR --parties K --out FILE``): a fresh
   scalar ``k_j``; the file ``psi.set`` holds ``[k_j] u(s)`` for its ids (sorted by value) and
   the party's public facts (client id, ``K``, data set name, feature width, number of classes
   and the SHA-256 of its class list at a label holder, the secret's fingerprint, the set's
   size). The scalar and the start's order stay in the party's ingest folder
   (``psi-state.npz``, mode 0600).
2. ``blind`` (``K - 1`` hops; ``fedgl psi blind --ingest DIR --set FILE --out FILE``): the relay
   hands the set of origin ``j``, blinded so far by ``j, ..., j+h-1``, to party ``j+h``
   (mod ``K``), which blinds it once more. A party blinds at most ``K - 1`` sets, never its own
   nor one it already blinded (its budget is on its own disk, spent before it answers).
3. ``intersect`` (the relay, ``fedgl psi intersect SET... --out DIR``): from the ``K`` fully
   blinded sets (each blinded by every party), after checking the facts agree (one secret, one
   name, one class list, labels at client 0 or at every party), ``result-j.psi`` per party: the
   positions of its values in the intersection, the column offsets (from the widths, in client
   order), the number of classes and the label holders; and ``psi.json`` (sizes, common
   entities, the bytes of every file it received).
4. ``place`` (party ``j``, ``fedgl psi place --ingest DIR --result FILE --out DIR``): its GLASU
   vertical shard ``client-j.json/.npz`` (``fedgl-shard/1``) over exactly the intersection, in
   the pseudonyms' byte order (:func:`fedgl.privacy.psi.common_rows`): the rows every party
   agrees on, the same as ``fedgl run --shards`` aligns in process. Its manifest records the
   settings (``own:NAME``, ``K`` clients) and their digest, the label holders, the PSI's figures
   and ``common_sha256`` (SHA-256 of the common pseudonyms, in order: equal at every party when
   the relay was honest; organisations may compare it among themselves).

No file the relay handles holds an id, a pseudonym or a hashed point ``u(s)``; a party learns
which of its own ids are common, nothing of the others' ids outside the intersection. Each file
is one typed message in fedgl's wire encoding (:mod:`fedgl.federation.codec`, no pickle); every
bad or unexpected file is one line naming the problem, and nothing is written.
"""

from __future__ import annotations

import hashlib
import io
from pathlib import Path
from typing import Any

import numpy as np

from fedgl.data.own.ingest import VERTICAL_FORMAT, read_npz
from fedgl.data.shard_format import write_atomic
from fedgl.errors import DataError
from fedgl.privacy.psi import VALUE_BYTES, PsiParty, common_rows, intersect_blinded

SET = "psi.set"
RESULT = "psi.result"
STATE = "psi-state.npz"
#: the largest message file read (2^28 values of 32 bytes)
MAX_FILE = VALUE_BYTES << 28


# ---------------------------------------------------------------------- message files
def write_message(path: Path, msg_type: str, payload: dict[str, Any]) -> Path:
    from fedgl.federation.codec import encode

    if path.exists():
        raise DataError(f"'{path}' exists; choose another --out")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, encode(msg_type, payload).to_bytes())
    return path


def read_message(path: str | Path, msg_type: str) -> tuple[dict[str, Any], int]:
    """A message file's payload (it must be a ``msg_type``) and its size in bytes."""
    from fedgl.federation.codec import Encoded, WireError, decode

    path = Path(path)
    try:
        if path.stat().st_size > MAX_FILE:
            raise DataError(f"'{path}' is larger than any PSI message; check the file")
        data = path.read_bytes()
    except FileNotFoundError:
        raise DataError(f"'{path}' does not exist; check the file's name") from None
    except OSError as exc:
        raise DataError(f"'{path}' is unreadable ({exc.strerror})") from None
    try:
        got, payload = decode(Encoded.from_bytes(data))
    except WireError as exc:
        raise DataError(f"'{path}' is not a fedgl message ({exc})") from None
    if got != msg_type or not isinstance(payload, dict):
        raise DataError(f"'{path}' is a '{got}' message, not a '{msg_type}'")
    return payload, len(data)


def _int(payload: dict[str, Any], key: str, where: Path | str) -> int:
    v = payload.get(key)
    if not isinstance(v, int) or isinstance(v, bool):
        raise DataError(f"'{where}' lacks an integer '{key}'")
    return v


def _ints(payload: dict[str, Any], key: str, where: Path | str) -> list[int]:
    v = payload.get(key)
    if not isinstance(v, list | tuple) or not all(isinstance(i, int) and not isinstance(i, bool)
                                                  for i in v):
        raise DataError(f"'{where}' lacks a list of integers '{key}'")
    return list(v)


# ---------------------------------------------------------------------- the party's state
def _vertical(ingest: str | Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    return read_npz(Path(ingest), "vertical.json", VERTICAL_FORMAT)


def _save_state(folder: Path, state: dict[str, Any]) -> None:
    buf = io.BytesIO()
    np.savez(buf, key=np.frombuffer(state["key"], dtype=np.uint8), order=state["order"],
             budget=np.int64(state["budget"]), parties=np.int64(state["parties"]),
             done=np.bool_(state["done"]))
    write_atomic(folder / STATE, buf.getvalue())   # mkstemp: mode 0600


def _load_state(folder: Path) -> dict[str, Any]:
    path = folder / STATE
    if not path.is_file():
        raise DataError(f"'{folder}' has not started a PSI; run `fedgl psi start --ingest "
                        f"{folder}` first")
    try:
        with np.load(path, allow_pickle=False) as z:
            return {"key": z["key"].tobytes(), "order": z["order"], "budget": int(z["budget"]),
                    "parties": int(z["parties"]), "done": bool(z["done"])}
    except (OSError, ValueError, KeyError) as exc:
        raise DataError(f"'{path}' is unreadable ({type(exc).__name__}); start the PSI again "
                        "with every party") from None


def _facts(meta: dict[str, Any], parties: int, count: int) -> dict[str, Any]:
    import json

    classes = meta.get("classes")
    return {"client_id": int(meta["client_id"]), "parties": parties, "name": str(meta["name"]),
            "num_features": int(meta["num_features"]),
            "num_classes": len(classes) if classes else 0,
            "classes_sha256": hashlib.sha256(json.dumps(classes).encode()).hexdigest()
            if classes else "", "secret_check": str(meta["secret_check"]), "count": count}


# ---------------------------------------------------------------------- the four steps
def _threads(n: int) -> int:
    if n < 1:
        raise DataError(f"--threads {n}: give at least 1")
    return n


def start(ingest: str | Path, parties: int, out: str | Path, threads: int = 1) -> Path:
    """Step 1 at one party: its blinded set (``psi.set``) in ``out``; its state kept."""
    folder = Path(ingest)
    meta, arrays = _vertical(folder)
    k = int(meta["client_id"])
    if parties < 2:
        raise DataError(f"--parties {parties}: a PSI needs at least 2 parties")
    if not 0 <= k < parties:
        raise DataError(f"this party is client {k}, outside --parties {parties} (0..{parties - 1})")
    if (folder / STATE).exists():
        raise DataError(f"'{folder}' already started a PSI ({STATE}); to start a new one "
                        f"(a new key, every party again), delete {folder / STATE}")
    out = Path(out)
    if out.exists():
        raise DataError(f"'{out}' exists; choose another --out")
    party = PsiParty(k, arrays["own"], parties, threads=_threads(threads))
    values = party.start()["values"]
    _save_state(folder, {**party.state(), "parties": parties, "done": False})
    count = len(values) // VALUE_BYTES
    return write_message(out, SET, {"origin": k, "blinded_by": [k], "values": values,
                                    "facts": _facts(meta, parties, count)})


def blind(ingest: str | Path, set_file: str | Path, out: str | Path,
          threads: int = 1) -> Path:
    """Step 2 at one party: another party's set, blinded once more by this party."""
    folder = Path(ingest)
    meta, arrays = _vertical(folder)
    k = int(meta["client_id"])
    state = _load_state(folder)
    payload, _ = read_message(set_file, SET)
    origin = _int(payload, "origin", set_file)
    by = _ints(payload, "blinded_by", set_file)
    values = payload.get("values")
    if not isinstance(values, bytes) or len(values) % VALUE_BYTES:
        raise DataError(f"'{set_file}' holds no whole number of {VALUE_BYTES}-byte values")
    if state["done"]:
        raise DataError(f"'{folder}' already placed its shard from this PSI; it blinds no more")
    if origin == k or k in by:
        raise DataError(f"'{set_file}' is this party's own set or one it already blinded; "
                        "the relay must pass each set to the next party in the ring")
    if len(by) >= state["parties"] or len(set(by)) != len(by) or \
            not all(0 <= i < state["parties"] for i in by) or by[0] != origin:
        raise DataError(f"'{set_file}' claims blinding by {by}, not a partial ring of "
                        f"{state['parties']} parties from its origin {origin}")
    if Path(out).exists():
        raise DataError(f"'{out}' exists; choose another --out")
    party = PsiParty.restore(k, arrays["own"], state["parties"], state,
                             threads=_threads(threads))
    if state["budget"] <= 0:
        raise DataError(f"this party already blinded {state['parties'] - 1} sets, every other "
                        "party's once; it blinds no more in this PSI")
    state["budget"] -= 1
    _save_state(folder, state)   # spent before the answer leaves
    try:
        blinded = party.blind(values)["values"]
    except ValueError as exc:   # a low-order point: no honest party's value
        raise DataError(f"'{set_file}' holds a value that is not a blinded id ({exc})") from None
    return write_message(Path(out), SET, {"origin": origin, "blinded_by": [*by, k],
                                          "values": blinded, "facts": payload.get("facts")})


def intersect(set_files: list[str | Path], out: str | Path) -> dict[str, Any]:
    """Step 3 at the relay: ``result-j.psi`` per party and ``psi.json`` in ``out``; the
    figures."""
    import json

    out = Path(out)
    if out.exists() and any(out.glob("result-*.psi")):
        raise DataError(f"'{out}' already holds PSI results; choose an empty --out folder")
    sets: dict[int, bytes] = {}
    facts: dict[int, dict[str, Any]] = {}
    received = {}
    for f in set_files:
        payload, size = read_message(f, SET)
        origin = _int(payload, "origin", f)
        fact = payload.get("facts")
        if not isinstance(fact, dict) or fact.get("client_id") != origin:
            raise DataError(f"'{f}' carries no facts of its origin {origin}")
        for key in ("parties", "num_features", "num_classes", "count"):
            _int(fact, key, f)
        if not all(isinstance(fact.get(key), str) for key in ("name", "secret_check",
                                                                "classes_sha256")):
            raise DataError(f"'{f}' carries malformed facts; start the PSI again")
        if origin in sets:
            raise DataError(f"two sets come from client {origin}; give each party's set once")
        values = payload.get("values")
        if not isinstance(values, bytes) or len(values) != VALUE_BYTES * fact["count"]:
            raise DataError(f"'{f}' holds {len(values) if isinstance(values, bytes) else 0} "
                            f"bytes, not the {fact.get('count')} values client {origin} started")
        sets[origin], facts[origin], received[Path(f).name] = values, fact, size
        by = _ints(payload, "blinded_by", f)
        if sorted(by) != list(range(fact["parties"])):
            raise DataError(f"'{f}' (client {origin}'s set) is blinded by {by}, not by every "
                            f"one of the {fact.get('parties')} parties; pass it on around the ring")
    parties = len(sets)
    if sorted(sets) != list(range(parties)) or any(f.get("parties") != parties
                                                   for f in facts.values()):
        raise DataError(f"the sets come from clients {sorted(sets)}; give one fully blinded set "
                        f"of every party 0..{max(parties, max(sets, default=0) + 1) - 1}")
    for key, what in (("secret_check", "federation secrets differ; ingest again with the one "
                                       "shared secret"),
                      ("name", "data set names differ; ingest with one --name")):
        if len({facts[j].get(key) for j in facts}) != 1:
            raise DataError(f"the parties' {what}")
    holders = [j for j in sorted(facts) if facts[j].get("num_classes")]
    if holders not in ([0], list(range(parties))):
        raise DataError(f"parties {holders} hold labels; GLASU needs them at client 0 only or at "
                        "every party")
    if len({(facts[j]["num_classes"], facts[j]["classes_sha256"]) for j in holders}) != 1:
        raise DataError("the label holders' class lists differ; give every one the same "
                        "--classes")
    placed = intersect_blinded(sets)
    common = len(placed[0]["positions"])
    if common == 0:
        raise DataError("the parties have no entity in common; check they used one secret "
                        "and the same kind of ids")
    widths = [int(facts[j]["num_features"]) for j in range(parties)]
    offsets = np.concatenate([[0], np.cumsum(widths)]).astype(int).tolist()
    figures = {"parties": parties, "name": facts[0]["name"], "common": common,
               "sizes": [len(sets[j]) // VALUE_BYTES for j in range(parties)],
               "label_holders": holders, "received_bytes": received}
    out.mkdir(parents=True, exist_ok=True)
    for j in range(parties):
        write_message(out / f"result-{j}.psi", RESULT, {
            "client_id": j, "parties": parties, "name": facts[0]["name"],
            "positions": placed[j]["positions"], "offsets": offsets,
            "num_classes": int(facts[holders[0]]["num_classes"]), "label_holders": holders,
            "sizes": figures["sizes"], "common": common})
    write_atomic(out / "psi.json", (json.dumps(figures, indent=2) + "\n").encode())
    return figures


def place(ingest: str | Path, result_file: str | Path, out: str | Path) -> Path:
    """Step 4 at one party: its GLASU vertical shard over the intersection in ``out``."""
    from fedgl.data.own.secret import as_keys
    from fedgl.data.provenance import own_settings, settings_sha256
    from fedgl.data.shard_format import shard_paths, write_shard
    from fedgl.privacy.vertical_align import aligned_shard

    folder = Path(ingest)
    meta, arrays = _vertical(folder)
    k = int(meta["client_id"])
    state = _load_state(folder)
    if state["done"]:
        raise DataError(f"'{folder}' already placed its shard from this PSI")
    if len(state["order"]) != len(arrays["own"]):
        raise DataError(f"'{folder}' holds {len(arrays['own'])} ids, its PSI started with "
                        f"{len(state['order'])}: the ingest changed; start the PSI again")
    payload, _ = read_message(result_file, RESULT)
    parties = _int(payload, "parties", result_file)
    offsets = _ints(payload, "offsets", result_file)
    holders = _ints(payload, "label_holders", result_file)
    num_classes = _int(payload, "num_classes", result_file)
    positions = payload.get("positions")
    own_classes = len(meta["classes"]) if meta.get("classes") else 0
    problems = []
    if _int(payload, "client_id", result_file) != k or parties != state["parties"]:
        problems.append(f"it is for client {payload.get('client_id')} of {parties}, this party "
                        f"is client {k} of {state['parties']}")
    if payload.get("name") != meta["name"]:
        problems.append(f"it names data set {payload.get('name')!r}, this party {meta['name']!r}")
    widths = np.diff(offsets).tolist() if offsets else []
    if len(offsets) != parties + 1 or offsets[0] != 0 or min(widths, default=0) <= 0 or \
            k >= len(widths) or widths[k] != int(meta["num_features"]):
        problems.append(f"its column offsets {offsets} do not give this party's "
                        f"{meta['num_features']} columns")
    if (k in holders) != bool(own_classes) or (own_classes and num_classes != own_classes) or \
            num_classes < 2 or holders not in ([0], list(range(parties))):
        problems.append(f"its labels (holders {holders}, {num_classes} classes) are not this "
                        f"party's ({own_classes} classes)")
    if not isinstance(positions, np.ndarray) or positions.dtype != np.int64:
        problems.append("its positions are not an int64 array")
    if problems:
        raise DataError(f"'{result_file}' is not this party's PSI result: {problems[0]}")
    try:
        common = common_rows(arrays["own"], state["order"], positions)
    except ValueError as exc:
        raise DataError(f"'{result_file}': {exc}") from None
    if len(common) == 0:
        raise DataError(f"'{result_file}' places no common entity; the parties share none")
    out = Path(out)
    if shard_paths(out, k)[0].exists():
        raise DataError(f"'{out}' already holds client {k}'s shard; choose an empty --out folder")
    shard = aligned_shard(k, arrays, common, offsets[k], num_classes)
    settings = own_settings(str(meta["name"]), parties, False)
    source = {"dataset": f"own:{meta['name']}", "algorithm": "glasu", "clients": parties,
              "label_holders": "all" if len(holders) == parties else "one",
              "partition": "vertical, aligned by PSI", "settings": settings,
              "settings_sha256": settings_sha256(settings),
              "psi": {"common": len(common), "sizes": _ints(payload, "sizes", result_file)},
              "common_sha256": hashlib.sha256(as_keys(arrays["own"][common]).tobytes())
              .hexdigest(), "provenance": meta.get("provenance")}
    path = write_shard(shard, out, source)
    _place_ids(folder, arrays["own"], common, path, k)
    state["done"] = True
    _save_state(folder, state)
    return path


def _place_ids(folder: Path, own: np.ndarray, common: np.ndarray, manifest: Path, k: int) -> None:
    """Beside the shard, the party's private map from its shard's rows to its own raw ids (from
    the ingest's ``ids.csv``), so that the scores its client writes name them."""
    from fedgl.data.own.ingest import OWN_IDS, read_own_ids
    from fedgl.data.shard_format import ids_path, write_ids

    if not (folder / OWN_IDS).is_file():
        return
    ids = read_own_ids(folder, own)
    write_ids(ids_path(manifest, k), list(range(len(common))), [ids[int(c)] for c in common])


# ---------------------------------------------------------------------- a trial of the shards
def placed_manifests(folders: list[str | Path]) -> list[Path] | None:
    """The vertical shard manifests ``fedgl psi place`` wrote, when ``folders`` name them (a
    folder of ``client-<k>.json`` or the files); None when they are anything else (ingests)."""
    found: list[Path] = []
    for f in map(Path, folders):
        if f.is_file() and f.suffix == ".json":
            found.append(f)
        elif f.is_dir() and not (f / "vertical.json").exists() and \
                not (f / "ingest.json").exists() and any(f.glob("client-*.json")):
            found += sorted(f.glob("client-*.json"))
        else:
            return None
    return found


def read_placed(manifests: list[Path]) -> tuple[list[Any], dict[str, Any]]:
    """The parties' placed shards (client order) and what they agree on: ``name``,
    ``label_holders`` (``one``/``all``), ``common_sha256``, each shard's provenance. Shards of
    different PSI results (their common pseudonyms differ) are refused in one line."""
    from fedgl.data.shard_format import read_manifest, read_shard
    from fedgl.data.vertical import VerticalClientData

    metas = [read_manifest(m) for m in manifests]
    shards = [read_shard(m) for m in manifests]
    if not all(isinstance(s, VerticalClientData) for s in shards):
        raise DataError("these shards are not all vertical; give the shards `fedgl psi place` "
                        "wrote")
    order = sorted(range(len(shards)), key=lambda i: shards[i].client_id)
    shards, metas = [shards[i] for i in order], [metas[i] for i in order]
    if [s.client_id for s in shards] != list(range(len(shards))):
        raise DataError(f"the shards are clients {[s.client_id for s in shards]}; give one "
                        f"shard of every party 0..{len(shards) - 1}")
    sources = [m.get("source") or {} for m in metas]
    for key, what in (("common_sha256", "were aligned by different PSI results (their common "
                                        "entities differ); run the PSI again with every party"),
                      ("dataset", "name different data sets"),
                      ("clients", "disagree on the number of parties")):
        if len({str(s.get(key)) for s in sources}) != 1 or sources[0].get(key) is None:
            raise DataError(f"the shards {what}")
    holders = [s.client_id for s in shards if s.has_labels]
    return shards, {"name": str(sources[0]["dataset"]).removeprefix("own:"),
                    "label_holders": "all" if len(holders) == len(shards) else "one",
                    "common_sha256": sources[0]["common_sha256"],
                    "provenance": [{"client_id": s.client_id, "provenance": src.get("provenance")}
                                   for s, src in zip(shards, sources, strict=True)]}
