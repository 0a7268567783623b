"""A party's record of its private inputs: the one aggregate each input entered, the DP noise
drawn for it, and the ε spent per data set (docs/threat-model.md, "one aggregate per input").

*Input.* A private value is named by its content, never by the server's label for a sum:
FedGCN's pre-training release is ``H("pretrain", data, DP settings)`` and a model update
``H("model", global weights received, data)`` (:func:`digest`). Whatever sessions, plans,
round labels or repeated fits the server asks for, the same data gives the same name.

*Aggregate.* What a secure sum reveals about the input: the clients it is summed with and,
for every segment of the upload, its co-members and the values this client put there
(:func:`aggregate_id`). Two sums over one input with different aggregates can be differenced
(``(x₀+x₁) − (x₁+x₂) + (x₀+x₂) = 2x₀``); the same aggregate asked again (a session restarted
after a client restart, a re-run over the same data) reveals the same sums, nothing new.

Rule: an input enters one aggregate; the same aggregate may be asked again, any other is
refused with :class:`InputReused` before a masked value (mask) or a share (robust) leaves.

*DP noise.* Drawn once per input (its seed kept here, keyed by the input's name) and reused:
a re-run over the same data re-releases the same noisy values, so averaging runs cannot shrink
the noise. Every new draw adds its ε to the data set's total (basic composition); a draw that
would take the total above the organisation's ``dp_budget`` is refused
(:class:`BudgetExceeded`) before any value is released.

*Pre-training releases.* Every pre-training release is counted per data set by its content
(:meth:`InputRecord.pretrain_release`): the same data again (a re-run, a restarted exchange,
scoring with the same tables) is the same release; the data changed (nodes that arrived after
training, re-ingested) is a new one. An organisation's ``pretrain_releases`` caps their number:
1 takes part in training only, each scoring of new nodes (its own or another organisation's)
needs one more.

*Storage.* With a folder (``fedgl client --state-dir DIR``, or ``privacy.state_dir`` for
simulated clients: ``<state_dir>/client-<k>``): three JSON-lines files, ``inputs.jsonl``,
``dp-noise.jsonl`` and ``pretrain-releases.jsonl``, each line appended and fsync'ed
(:func:`fedgl.privacy.dp.append_durably`) before the value it covers leaves the party, under an
exclusive lock (two processes sharing the folder see each other's lines). A last line torn by a
crash is ignored (and cut before the next append): it was never followed by a release. Without a
folder the record lives in memory, as long as the party object (a simulated client: its run; a
``fedgl client`` process: until it stops).

*Rollback.* Restoring an older copy of the folder (a backup) forgets every aggregate and DP
draw made since: each of those inputs could then enter a second aggregate and draw fresh noise.
So every append also writes a stamp, the number of entries of each file, **outside** the folder
(:func:`stamp_path`: ``$FEDGL_STAMP_DIR``, default ``~/.local/state/fedgl/record-stamps``, one
small file per record folder, replaced atomically). Opening a record with fewer entries than
its stamp counts is refused (:class:`RecordRolledBack`, one line naming both files). The stamp
must stay out of the backups it judges; deleting it accepts the folder as it is."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from fedgl.errors import OutputError, RunAborted
from fedgl.privacy.identity import AttackDetected, frame, part_bytes

INPUTS_FILE = "inputs.jsonl"
NOISE_FILE = "dp-noise.jsonl"
RELEASES_FILE = "pretrain-releases.jsonl"
_LOCK_FILE = ".lock"
_SLACK = 1e-9  # relative float slack of the budget check (0.1 + 0.2 <= 0.3 holds)


class InputReused(AttackDetected):
    """The server asked for a private input in a second, different aggregate."""


class RecordRolledBack(OutputError):
    """The record holds fewer entries than its stamp counts: an older copy was restored."""


#: where record stamps are kept, unless ``$FEDGL_STAMP_DIR`` says otherwise
DEFAULT_STAMP_DIR = Path("~/.local/state/fedgl/record-stamps")


def stamp_path(folder: str | Path) -> Path:
    """The stamp file of the record in ``folder`` (see the module docstring, "Rollback")."""
    root = Path(os.environ.get("FEDGL_STAMP_DIR") or DEFAULT_STAMP_DIR).expanduser()
    name = hashlib.sha256(str(Path(folder).absolute()).encode()).hexdigest()[:32]
    return root / f"{name}.json"


class BudgetExceeded(RunAborted):
    """A new DP release would take the ε spent on a data set above the organisation's budget."""


class ReleasesExceeded(RunAborted):
    """A pre-training release over new content would exceed the organisation's count of them."""


# ---------------------------------------------------------------------- naming
Pieces = list[bytes | memoryview]


def _size(pieces: Pieces) -> int:
    return sum(p.nbytes if isinstance(p, memoryview) else len(p) for p in pieces)


def _framed(*parts: Pieces) -> Pieces:
    """The pieces of :func:`fedgl.privacy.identity.frame` of the parts (each given by its
    pieces): every part length-prefixed, nothing copied."""
    out: Pieces = []
    for pieces in parts:
        out.append(_size(pieces).to_bytes(4, "little"))
        out.extend(pieces)
    return out


def _atom(part: bytes | str | int) -> Pieces:
    return [part_bytes(part)]


def _part_pieces(part: Any) -> Pieces:
    """The bytes naming ``part``, in pieces (an array's values as a view of its memory)."""
    if hasattr(part, "detach"):  # a torch tensor
        part = part.detach().cpu().contiguous().numpy()
    if isinstance(part, np.ndarray):
        a = np.ascontiguousarray(part)
        return _framed(_atom(a.dtype.str), _atom(repr(a.shape)),
                       [memoryview(a.reshape(-1).view(np.uint8))])
    if isinstance(part, Mapping):  # a model state: names, then values, in order
        return _framed(*[_framed(_atom(str(k)), _part_pieces(v)) for k, v in part.items()])
    if isinstance(part, bytes | str | int):
        return _framed(_atom(part))
    return _framed(_atom(repr(part)))


def digest(tag: str, *parts: Any) -> str:
    """``tag:`` + SHA-256 (hex) of the parts: tensors and arrays by dtype, shape and bytes, model
    states by names and values, other values by ``repr``. The hash reads the parts' framing
    (:func:`~fedgl.privacy.identity.frame`, nested) piece by piece, arrays where they lie."""
    h = hashlib.sha256()
    for piece in _framed(_atom(tag), *[_part_pieces(p) for p in parts]):
        h.update(piece)
    return f"{tag}:{h.hexdigest()}"


def data_digest(data: Any) -> str:
    """Name of one version of a client's data (every field of its ``ClientData``)."""
    from dataclasses import fields

    # own data's row keys, where a shard has them, are part of its version; a shard without
    # them is named as before they existed
    return digest("data", *[getattr(data, f.name) for f in fields(data)
                            if not (f.name == "keys" and getattr(data, "keys", None) is None)])


def feature_digest(data: Any) -> str:
    """Name of the data set whose features DP protects (own node ids and feature rows): the
    key of the ε spent."""
    return digest("features", data.node_ids, data.x)


def values_hash(encoded: np.ndarray) -> bytes:
    """SHA-256 of a client's fixed-point upload before masking."""
    return hashlib.sha256(np.ascontiguousarray(encoded).tobytes()).digest()


def aggregate_id(mode: str, members: Sequence[int], segments: Sequence[tuple[int, Any]],
                 values: bytes) -> str:
    """What a secure sum reveals about one client's input: mode, the clients summed, each
    segment's length and co-members (those among ``members``), and the fixed-point values
    (their :func:`values_hash`, or the name of the selection that picked them from the named
    input, e.g. FedGCN's plan rows)."""
    inside = set(int(m) for m in members)
    layout = [frame(int(n), *sorted(int(p) for p in ps if int(p) in inside))
              for n, ps in segments]
    return digest("aggregate", mode, sorted(inside), *layout, values)


def short(name: str) -> str:
    """A name for messages: its tag and the first 12 hex digits."""
    tag, _, hexd = name.partition(":")
    return f"{tag}:{hexd[:12]}" if hexd else name


# ---------------------------------------------------------------------- the record
@dataclass(frozen=True)
class NoiseDraw:
    """The DP noise of one input: its secret seed and the release's public name."""

    seed: int
    release: str
    new: bool  # drawn by this call (its ε was just spent)


class InputRecord:
    """One party's record (see the module docstring); ``folder`` None keeps it in memory."""

    def __init__(self, folder: str | Path | None = None) -> None:
        self.folder = Path(folder) if folder is not None else None
        self._aggregates: dict[str, dict] = {}
        self._noise: dict[str, dict] = {}
        self._releases: dict[str, dict] = {}
        if self.folder is not None:
            self._reload()  # the folder itself is made by the first line written

    # -- queries
    def aggregate_of(self, input_id: str) -> dict | None:
        """The aggregate ``input_id`` entered (``{"aggregate", "members"}``), or None."""
        return self._aggregates.get(input_id)

    def spent(self, data: str) -> float:
        """ε spent on the data set ``data`` (basic composition over its distinct releases)."""
        return sum(float(e["epsilon"]) for e in self._noise.values() if e["data"] == data)

    def releases(self, data: str | None = None) -> list[dict]:
        """Every DP release recorded (of one data set, if given), oldest first."""
        return [dict(e) for e in self._noise.values() if data is None or e["data"] == data]

    # -- commitments
    def commit(self, input_id: str | Sequence[str], aggregate: str, members: Sequence[int],
               what: str) -> None:
        """Record that ``input_id`` enters ``aggregate``; the same again is a no-op, another
        aggregate raises :class:`InputReused` (nothing is written). Several names (one upload
        that holds several inputs, e.g. a model update and the counts of the model it started
        from) are committed together: each must be new or already in this very aggregate,
        else none is written."""
        ids = [input_id] if isinstance(input_id, str) else list(input_id)
        with self._locked():
            for name in ids:
                prior = self._aggregates.get(name)
                if prior is not None and prior["aggregate"] != aggregate:
                    raise InputReused(
                        f"{what} ('{short(name)}') already went into another secure sum "
                        f"(with clients {prior['members']}); a second, different sum over it "
                        "would let the server difference the two; the run stops")
            entries = [{"input": name, "aggregate": aggregate,
                        "members": sorted(int(m) for m in members)}
                       for name in dict.fromkeys(ids) if name not in self._aggregates]
            if not entries:
                return
            self._append(INPUTS_FILE, *entries)
            for entry in entries:
                self._aggregates[entry["input"]] = entry
            if self.folder is not None:
                self._write_stamp()

    def noise(self, input_id: str, data: str, epsilon: float, delta: float, clip: float,
              budget: float | None, who: str) -> NoiseDraw:
        """The DP noise seed of ``input_id``: the recorded one, or a fresh one whose ε is
        recorded against ``data`` first; refused when that would exceed ``budget``."""
        with self._locked():
            prior = self._noise.get(input_id)
            if prior is not None:
                return NoiseDraw(int(prior["seed"], 16), str(prior["release"]), False)
            spent = self.spent(data)
            if budget is not None and spent + epsilon > budget * (1 + _SLACK):
                raise BudgetExceeded(
                    f"{who}: a new DP release (ε = {epsilon:g}) would bring the ε spent on its "
                    f"data to {spent + epsilon:g}, above its dp_budget {budget:g} (spent so "
                    f"far: {spent:g}); nothing was released: raise --dp-budget, or re-run "
                    "with the settings of an earlier release (its noise is re-used)")
            seed, release = secrets.randbits(128), secrets.token_hex(8)
            entry = {"input": input_id, "data": data, "seed": f"{seed:032x}",
                     "release": release, "epsilon": float(epsilon), "delta": float(delta),
                     "clip": float(clip)}
            self._append(NOISE_FILE, entry)
            self._noise[input_id] = entry
            if self.folder is not None:
                self._write_stamp()
            return NoiseDraw(seed, release, True)

    def pretrain_release(self, input_id: str, data: str, limit: int | None, who: str) -> int:
        """Count the pre-training release ``input_id`` (a release over this content) against
        ``data`` (the organisation's data set): the same content again is free (the same
        values, nothing new); a release over new content (the data changed: nodes that arrived
        after training) is one more, refused with :class:`ReleasesExceeded` before any value
        leaves where it would exceed ``limit`` (the policy's ``pretrain_releases``). Returns
        how many distinct releases ``data`` has had, this one included."""
        with self._locked():
            mine = [e for e in self._releases.values() if e["data"] == data]
            if input_id in self._releases:
                return len(mine)
            if limit is not None and len(mine) >= limit:
                raise ReleasesExceeded(
                    f"{who}: this exchange would release pre-training sums over changed data, "
                    f"its release {len(mine) + 1} for '{data}', above its pretrain_releases "
                    f"{limit}; nothing was released: the organisation raises "
                    "--pretrain-releases to take part (each scoring of new nodes is one)")
            entry = {"input": input_id, "data": data}
            self._append(RELEASES_FILE, entry)
            self._releases[input_id] = entry
            if self.folder is not None:
                self._write_stamp()
            return len(mine) + 1

    # -- storage
    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        if self.folder is None:
            yield
            return
        import fcntl

        try:
            self.folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            fd = os.open(self.folder / _LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)
        except OSError as exc:
            raise OutputError(f"the input record folder '{self.folder}' cannot be used "
                              f"({exc.strerror or type(exc).__name__}); nothing was sent; "
                              "choose a writable state folder") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            self._reload()  # another process of this party may have written since
            yield
        finally:
            os.close(fd)  # releases the lock

    def _reload(self) -> None:
        assert self.folder is not None
        inputs = self._read(INPUTS_FILE, ("aggregate", "members"))
        noise = self._read(NOISE_FILE, ("data", "seed", "release", "epsilon"))
        releases = self._read(RELEASES_FILE, ("data",))
        self._check_stamp({INPUTS_FILE: len(inputs), NOISE_FILE: len(noise),
                           RELEASES_FILE: len(releases)})
        self._aggregates = {e["input"]: e for e in inputs}
        self._noise = {e["input"]: e for e in noise}
        self._releases = {e["input"]: e for e in releases}

    def _counts(self) -> dict[str, int]:
        return {INPUTS_FILE: len(self._aggregates), NOISE_FILE: len(self._noise),
                RELEASES_FILE: len(self._releases)}

    def _check_stamp(self, found: Mapping[str, int]) -> None:
        """Refuse a record with fewer entries than its stamp counts (a restored backup)."""
        path = stamp_path(self.folder)
        try:
            stamp = json.loads(path.read_text())
            # a file the stamp does not name is newer than the stamp: none of it was counted
            counted = {name: int(stamp["entries"].get(name, 0)) for name in found}
        except FileNotFoundError:
            return
        except (OSError, ValueError, KeyError, TypeError):
            raise OutputError(f"the input record's stamp '{path}' is unreadable; delete it to "
                              f"accept the record in '{self.folder}' as it is") from None
        short_of = [name for name in found if found[name] < counted[name]]
        if short_of:
            name = short_of[0]
            raise RecordRolledBack(
                f"the input record '{self.folder / name}' holds {found[name]} entries but "
                f"{counted[name]} were recorded (stamp '{path}'): an older copy was restored, "
                "which reopens every input released since; restore the latest record, or "
                "delete the stamp to accept this one")

    def _write_stamp(self) -> None:
        path = stamp_path(self.folder)
        entry = {"folder": str(self.folder.absolute()), "entries": self._counts()}
        try:
            path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(entry, sort_keys=True) + "\n")
            os.replace(tmp, path)
        except OSError as exc:
            raise OutputError(f"the input record's stamp '{path}' could not be written "
                              f"({exc.strerror or type(exc).__name__}); set FEDGL_STAMP_DIR to "
                              "a writable folder outside the state folder's backups") from None

    def _read(self, name: str, keys: tuple[str, ...]) -> list[dict]:
        path = self.folder / name
        try:
            text = path.read_text()
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as exc:
            raise OutputError(f"the input record '{path}' cannot be read "
                              f"({exc.strerror or type(exc).__name__})") from None
        lines = text.split("\n")
        out = []
        for n, line in enumerate(lines):
            if not line:
                continue
            try:
                entry = json.loads(line)
                ok = isinstance(entry, dict) and all(k in entry for k in ("input", *keys))
            except ValueError:
                ok = False
            if ok:
                out.append(entry)
            elif n != len(lines) - 1:  # only the last line can be torn by a crash
                raise OutputError(f"the input record '{path}' is damaged (line {n + 1}); "
                                  "restore its latest backup (an older one reopens the inputs "
                                  "released since): without it this party cannot tell which "
                                  "aggregates its inputs entered")
        return out

    def _append(self, name: str, *entries: dict) -> None:
        """Append ``entries`` (one line each) in one durable write."""
        if self.folder is None:
            return
        from fedgl.privacy.dp import append_durably

        path = self.folder / name
        try:
            # a last line torn by a crash (no newline) was never followed by a release: cut it
            if path.exists() and path.stat().st_size:
                data = path.read_bytes()
                if not data.endswith(b"\n"):
                    os.truncate(path, data.rfind(b"\n") + 1)
            append_durably(path, "".join(json.dumps(entry, sort_keys=True) + "\n"
                                         for entry in entries).encode())
        except OSError as exc:  # not recorded: the value it covers is not sent
            raise OutputError(f"the input record '{path}' could not be written "
                              f"({exc.strerror or type(exc).__name__}); nothing was sent; "
                              "free space or choose a writable state folder") from None


def party_record(state_dir: str | Path | None, client_id: int) -> InputRecord:
    """Client ``client_id``'s record under a run's ``privacy.state_dir`` (in memory if None)."""
    return InputRecord(None if state_dir is None else Path(state_dir) / f"client-{int(client_id)}")
