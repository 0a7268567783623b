"""The results folder of a run: checked before any work, locked for the run, written atomically.

A run with ``out`` set goes through :class:`OutputFolder`:

1. ``open()`` (before the data is loaded): the path must be a creatable folder; an existing
   folder holding results is refused unless ``overwrite``, one holding only a checkpoint is
   refused unless the run resumes it; an exclusive ``fcntl`` lock is taken on
   ``<parent>/.<name>.lock`` (a sibling, so the folder itself can be swapped); a private staging
   folder ``<parent>/.<name>.staging-*`` is created on the same filesystem, which also proves
   the parent is writable.
2. During the run the checkpoint (if any) is written into ``out`` itself, so ``--resume out``
   finds it.
3. ``commit(writer)``: ``writer(staging)`` writes the whole result set, every file is flushed
   to disk, and the staging folder is exchanged with ``out`` in one ``renameat2(RENAME_EXCHANGE)``
   (plain ``rename`` when ``out`` does not exist; two renames where the filesystem cannot
   exchange). The old content (a checkpoint, replaced results) is then deleted. A reader sees
   either the complete new set or none of it.
4. ``close()`` on any failure removes the staging folder, the lock file and the folders this
   run created, keeping ``out`` only where it holds a checkpoint a later ``--resume`` can use.

Files and folders get the modes the umask allows (0666 / 0777 minus the umask), like any
program's output. A write that fails for lack of space, permission or a read-only filesystem
becomes a one-line :class:`~fedgl.errors.OutputError`.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from fedgl.errors import OutputError

RESULT_FILES = ("result.json", "history.csv", "prediction.json")
CHECKPOINT_NAME = "checkpoint.pt"
DP_RELEASE_LOG = "dp-releases"  # fedgl.privacy.dp.RELEASE_LOG_DIR
_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def umask() -> int:
    """The process's umask (read without changing it for longer than one call)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def apply_umask(path: str | Path, *, folder: bool = False) -> None:
    """Give a file created private (``mkstemp``/``mkdtemp``) the mode the umask allows."""
    os.chmod(path, (0o777 if folder else 0o666) & ~umask())


def describe_os_error(exc: OSError, what: str, fix: str) -> OutputError:
    """One line naming the failed path, the reason (e.g. 'No space left on device') and the fix."""
    reason = exc.strerror or type(exc).__name__
    if exc.errno in (errno.ENOSPC, errno.EDQUOT):
        fix = "free some space or choose a folder on another disk"
    return OutputError(f"{what} could not be written ({reason}); {fix}")


class OutputFolder:
    """The results folder ``out`` of one run (see the module docstring for the protocol)."""

    def __init__(self, out: str | Path, *, overwrite: bool = False, resume: bool = False,
                 flag: str = "--out") -> None:
        self.out = Path(out)
        self.overwrite = overwrite
        self.resume = resume
        self.flag = flag
        self._lock_fd: int | None = None
        self._lock_path: Path | None = None
        self._staging: Path | None = None
        self._created: list[Path] = []   # folders this run created, deepest last
        self.committed = False

    # ------------------------------------------------------------------ open
    def open(self) -> OutputFolder:
        try:
            self._open()
        except OutputError:
            self.close()
            raise
        except OSError as exc:
            self.close()
            raise describe_os_error(exc, f"{self.flag} '{self.out}'",
                                    "choose a writable folder") from None
        except BaseException:
            self.close()
            raise
        return self

    def _open(self) -> None:
        out = self.out
        if str(out).strip() == "":
            raise OutputError(f"{self.flag} is empty; give a folder path")
        for part in out.absolute().parts:
            if len(os.fsencode(part)) > 255 - 40:   # room for the staging/lock suffixes
                raise OutputError(f"{self.flag} '{str(out)[:60]}...' has a name of "
                                  f"{len(part)} characters; use names of at most 200")
        if out.exists() and not out.is_dir():
            raise OutputError(f"{self.flag} '{out}' exists and is not a folder; choose another path")
        if self.resume and not (out / CHECKPOINT_NAME).is_file():
            raise OutputError(f"no checkpoint at '{out / CHECKPOINT_NAME}'; pass the --out folder "
                              "of a run started with --checkpoint-every")
        parent = out.absolute().parent
        probe = parent
        while not probe.exists():
            probe = probe.parent
        if not probe.is_dir():
            raise OutputError(f"{self.flag} '{out}' lies under '{probe}', which is a file, not a "
                              "folder; choose another path")
        self._make_parents(parent)
        self._lock(parent / f".{out.name}.lock")
        for stale in parent.glob(f".{out.name}.staging-*"):   # left by a killed run; ours now
            shutil.rmtree(stale, ignore_errors=True)
        for stale in parent.glob(f".{out.name}.old-*"):
            shutil.rmtree(stale, ignore_errors=True)
        self._check_existing()
        self._staging = Path(tempfile.mkdtemp(dir=parent, prefix=f".{out.name}.staging-"))

    def _make_parents(self, parent: Path) -> None:
        missing = []
        p = parent
        while not p.exists():
            missing.append(p)
            p = p.parent
        for folder in reversed(missing):
            try:
                folder.mkdir()
            except FileExistsError:   # another run made it meanwhile: not ours to remove
                continue
            self._created.append(folder)

    def _lock(self, path: Path) -> None:
        """Exclusive lock on ``path``; retried if the file was replaced while we waited."""
        for _ in range(10):
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666 & ~umask())
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.read(fd, 64).decode(errors="replace").strip() or "another process"
                os.close(fd)
                raise OutputError(f"{self.flag} '{self.out}' is in use by another fedgl run "
                                  f"({holder}); wait for it to finish or choose another folder"
                                  ) from None
            try:
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                self._lock_fd, self._lock_path = fd, path
                os.ftruncate(fd, 0)
                os.write(fd, f"pid {os.getpid()}\n".encode())
                return
            os.close(fd)   # the previous holder removed the file: lock the new one
        raise OutputError(f"could not lock {self.flag} '{self.out}'; try again")

    def _check_existing(self) -> None:
        out = self.out
        if not out.is_dir():
            return
        # a DP release log left by an attempt that crashed before its first checkpoint is part
        # of this run's account (fedgl.privacy.dp), not someone else's files
        names = {p.name for p in out.iterdir()} - {DP_RELEASE_LOG}
        has_results = bool(names & set(RESULT_FILES))
        if self.resume:
            if has_results:
                raise OutputError(f"'{out}' holds a finished run (result.json); nothing to resume")
            return
        if not names:
            return
        if has_results or CHECKPOINT_NAME in names:
            if self.overwrite:
                return
            what = "results" if has_results else "an unfinished run's checkpoint"
            hint = "" if has_results else f", `fedgl run --resume {out}` to continue it"
            raise OutputError(f"{self.flag} '{out}' already holds {what}; pass --overwrite to "
                              f"replace it{hint}, or choose another folder")
        raise OutputError(f"{self.flag} '{out}' is a folder holding other files; choose a new or "
                          "empty folder")

    # ------------------------------------------------------------------ during the run
    def prepare_checkpoints(self) -> None:
        """Create ``out`` (if absent) so the checkpoint can live where ``--resume`` finds it."""
        if not self.out.exists():
            self.out.mkdir()
            self._created.append(self.out)

    # ------------------------------------------------------------------ commit
    def commit(self, writer: Callable[[Path], None]) -> None:
        """Write the result set with ``writer(folder)`` and put it in place atomically."""
        assert self._staging is not None, "open() first"
        staging = self._staging
        try:
            writer(staging)
            for p in sorted(staging.rglob("*"), reverse=True):   # files before their folders
                if p.is_dir():
                    apply_umask(p, folder=True)
                    _fsync_dir(p)
                    continue
                apply_umask(p)
                with open(p, "rb") as f:
                    os.fsync(f.fileno())
            apply_umask(staging, folder=True)
            _fsync_dir(staging)
            self._swap(staging)
        except OSError as exc:
            raise describe_os_error(exc, f"results in {self.flag} '{self.out}'",
                                    "choose a writable folder") from None
        self.committed = True

    def _swap(self, staging: Path) -> None:
        out = self.out
        if not out.exists():
            os.rename(staging, out)
            self._staging = None
        elif _exchange(staging, out):
            shutil.rmtree(staging, ignore_errors=True)   # now holds the old content
            self._staging = None
        else:
            old = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.old-"))
            os.rename(out, old / "content")
            os.rename(staging, out)
            self._staging = None
            shutil.rmtree(old, ignore_errors=True)
        if out in self._created:
            self._created.remove(out)
        _fsync_dir(out.absolute().parent)

    # ------------------------------------------------------------------ close
    def close(self) -> None:
        """Release the lock; after a failure remove everything this run created except a
        checkpoint that ``--resume`` can continue from."""
        if self._staging is not None:
            shutil.rmtree(self._staging, ignore_errors=True)
            self._staging = None
        if self._lock_fd is not None:
            if self._lock_path is not None:
                self._lock_path.unlink(missing_ok=True)
            os.close(self._lock_fd)
            self._lock_fd = None
        for folder in reversed(self._created):
            try:
                folder.rmdir()   # only if empty: a checkpoint in out is kept
            except OSError:
                pass
        self._created = []

    def __enter__(self) -> OutputFolder:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths with ``renameat2(RENAME_EXCHANGE)``; False if unsupported."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    rc = fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    if rc == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))
