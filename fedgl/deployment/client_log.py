"""What ``fedgl client`` shows of its SuperNode: every line goes to the organisation's log file,
the terminal gets fedgl's own lines (one per exchange, refusals) and, with ``--verbose``,
Flower's too; a traceback and Flower's exit explanation go to the log file only (``fedgl
client`` says what happened in one line of its own).

Two things Flower only logs are turned into one line each and change what ``fedgl client``
does (:class:`SupernodeLines`):

- ``Giving up reconnection``: the SuperNode has stopped trying to reach the SuperLink (it
  came back with another CA, or stayed away too long) but its process lives on, answering
  nothing; ``fedgl client`` says so and stops, exit 1, instead of looking alive.
- ``Failed to activate SuperNode``: the SuperLink would not take this node: a SuperNode with
  the same node key is already connected (a second ``fedgl client`` of this organisation), or
  the key is not registered on a SuperLink with ``--enable-supernode-auth``.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO

#: a line of Flower's logger (``INFO :      ...``, possibly coloured)
_FLOWER = re.compile(r"^(\x1b\[[0-9;]*m)*\s*(DEBUG|INFO|WARNING|ERROR|CRITICAL)\s*(\x1b\[[0-9;]*m)*"
                     r"\s*:")
GAVE_UP = "gave-up"
NOT_ACTIVATED = "not-activated"


def gave_up_line(client_id: int, log: Path | None) -> str:
    """The one line ``fedgl client`` ends with when its SuperNode stopped reconnecting."""
    where = f"; its lines are in {log}" if log else ""
    return (f"fedgl: client {client_id}: the SuperNode gave up reconnecting to the SuperLink "
            "(it is down, or came back with another certificate or without this node)"
            f"{where}; restart `fedgl client` once the SuperLink is back")


def not_activated_line(client_id: int, log: Path | None) -> str:
    """The one line for a SuperNode the SuperLink would not activate."""
    where = f" (see {log})" if log else ""
    return (f"fedgl: client {client_id}: the SuperLink refused to activate this SuperNode"
            f"{where}: a SuperNode with the same node key is already connected (stop the other "
            "`fedgl client` of this organisation, or wait for the SuperLink to see it gone, "
            "about a minute), or the SuperLink runs --enable-supernode-auth and this --auth-key "
            "is not registered (`flwr supernode register KEY.pub`)")


class SupernodeLines:
    """Sort the SuperNode's output lines (see the module docstring). ``show`` prints a line to
    the terminal; ``on_event`` is called once per event (:data:`GAVE_UP`,
    :data:`NOT_ACTIVATED`)."""

    def __init__(self, log: IO[str] | None, verbose: bool,
                 show: Callable[[str], None] | None = None,
                 on_event: Callable[[str], None] | None = None) -> None:
        self.log = log
        self.verbose = verbose
        self.show = show or (lambda line: print(line, flush=True))
        self.on_event = on_event or (lambda event: None)
        self.events: list[str] = []
        self._in_traceback = False
        self._in_exit_block = False

    def feed(self, line: str) -> None:
        """One line of the SuperNode's output (without its newline)."""
        if self.log is not None:
            self.log.write(line + "\n")
            self.log.flush()
        flower = bool(_FLOWER.match(line))
        for needle, event in (("Giving up reconnection", GAVE_UP),
                              ("Failed to activate SuperNode", NOT_ACTIVATED)):
            if needle in line and event not in self.events:
                self.events.append(event)
                self.on_event(event)
        if flower and "Exit Code:" in line:
            self._in_exit_block = True   # Flower's exit explanation, up to its link
        if self._in_exit_block:
            if line.startswith("For more information, visit:"):
                self._in_exit_block = False
            if self.verbose:
                self.show(line)
            return
        if line.startswith("Traceback (most recent call last)"):
            self._in_traceback = True
        if self._in_traceback:
            # a traceback ends with the exception's line, the first one not indented
            if line and not line[0].isspace() and not line.startswith("Traceback") \
                    and not line.startswith("During handling") \
                    and not line.startswith("The above exception"):
                self._in_traceback = False
            if self.verbose:
                self.show(line)
            return
        if not line.strip():
            return
        if not flower or self.verbose:
            self.show(line)

    def pump(self, stream: IO[str]) -> None:
        """Feed every line of ``stream`` until it closes."""
        for line in iter(stream.readline, ""):
            self.feed(line.rstrip("\n"))

    def start(self, stream: IO[str]) -> threading.Thread:
        """:meth:`pump` in a daemon thread."""
        thread = threading.Thread(target=self.pump, args=(stream,), daemon=True)
        thread.start()
        return thread


def open_log(path: Path) -> IO[str] | None:
    """The client's log file, appended to (0600: it names the organisation's files); None with a
    warning when it cannot be written."""
    import os

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        return os.fdopen(fd, "a", buffering=1)
    except OSError as exc:
        print(f"fedgl: the client log '{path}' cannot be written ({exc.strerror or exc}); "
              "going on without it (pass --log FILE)", file=sys.stderr, flush=True)
        return None
