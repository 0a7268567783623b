"""Private scratch folders of ``fedgl client`` and ``fedgl server`` that never outlive them.

``fedgl client`` keeps its party's socket and Flower's home in a folder only its user can open
(``fedgl-party-*``), ``fedgl server`` its app, Flower's home and the run's status
(``fedgl-server-*``). :func:`scratch_folder` removes the folder on every way out the process
itself sees (a return, an error, Ctrl-C, and, through :func:`terminate_as_interrupt`, SIGTERM and
SIGHUP). A process killed outright (SIGKILL, a power cut) cannot clean up after itself: each
folder names its owner (``owner.pid``: the process id and its start time), and the next
:func:`scratch_folder` of the same kind removes the folders of owners that no longer run.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

OWNER = "owner.pid"


def _started(pid: int) -> str | None:
    """The start time of process ``pid`` (Linux ``/proc``: field 22 of its stat line), or None
    where it does not run (or this system has no ``/proc``)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[19]


def _owner_gone(folder: Path) -> bool:
    """Whether ``folder``'s owner (its ``owner.pid``) no longer runs; False where it cannot
    tell (no owner file, another user's folder, no ``/proc``)."""
    try:
        if folder.stat().st_uid != os.getuid() or not Path("/proc/self/stat").exists():
            return False
        pid, started = (folder / OWNER).read_text().split()
    except (OSError, ValueError):
        return False
    return _started(int(pid)) != started


def sweep(prefix: str, parent: Path | None = None) -> list[Path]:
    """Remove this user's ``<prefix>*`` folders whose owner no longer runs; those removed."""
    parent = Path(parent or tempfile.gettempdir())
    gone = [p for p in parent.glob(f"{prefix}*") if p.is_dir() and _owner_gone(p)]
    for p in gone:
        shutil.rmtree(p, ignore_errors=True)
    return gone


@contextlib.contextmanager
def scratch_folder(prefix: str, parent: Path | None = None) -> Iterator[Path]:
    """A new folder ``<prefix>*`` only this user can open, removed when the block ends (however
    it ends); the stale folders of owners killed outright are removed first (:func:`sweep`)."""
    sweep(prefix, parent)
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
    try:
        folder.chmod(0o700)
        (folder / OWNER).write_text(f"{os.getpid()} {_started(os.getpid()) or 0}\n")
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@contextlib.contextmanager
def terminate_as_interrupt() -> Iterator[None]:
    """Inside the block, SIGTERM and SIGHUP end the command as Ctrl-C does (KeyboardInterrupt:
    its clean-up runs); the previous handlers come back after it."""

    def interrupt(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(signal.Signals(signum).name)

    if threading.current_thread() is not threading.main_thread():   # signals go to the main one
        yield
        return
    previous = {s: signal.signal(s, interrupt) for s in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
