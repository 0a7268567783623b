"""What a deployed run shows while it runs: the ServerApp's log.

The ServerApp runs inside Flower (started by the SuperLink), so its progress cannot go to the
terminal of ``fedgl server`` directly. It writes one line per event to ``server.log`` in the
command's working folder; ``fedgl server`` prints each new line as it appears (to stderr, as
``fedgl run`` prints its progress; ``--no-progress`` keeps it quiet) and keeps the whole log in
``--out`` at the end. Lines::

    17:52:03 waiting for SuperNodes: 2/3 joined (10 s)
    17:52:09 3 organisations joined and proved their roster keys: clients 0, 1, 2
    17:52:11 pre-training: 2 exchanges, 1.3 MB, 1.9 s
    17:52:20 round 1/100: loss 1.9431, val acc 0.3120, test acc 0.3050; 2.1 MB sent in all; 9 s
    17:52:41 waiting for clients 2 (fedavg.fit, 20 s)
    17:52:50 client 2 dropped during 'fedavg.fit': its SuperNode stopped reporting ...
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import IO, Any

#: seconds between two "waiting for clients ..." lines of one exchange
WAIT_LINE_EVERY = 10.0


def megabytes(n: int | float) -> str:
    return f"{n / 1e6:.1f} MB" if n >= 1e5 else f"{n / 1e3:.1f} kB"


class ServerLog:
    """Append-only, line-buffered: each line is on disk as soon as it is written."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path else None
        self._file: IO[str] | None = (open(self.path, "a", buffering=1, encoding="utf-8")
                                      if self.path is not None else None)
        self._t0 = time.monotonic()

    def __call__(self, text: str) -> None:
        if self._file is not None:
            self._file.write(f"{time.strftime('%H:%M:%S')} {text}\n")

    def elapsed(self) -> float:
        return time.monotonic() - self._t0

    def round_line(self, t: int, total: int, row: dict[str, Any], sent: int) -> None:
        """One finished round: its losses and accuracies where it evaluated, bytes so far."""
        parts = []
        for key, name in (("train_loss", "loss"), ("val_acc", "val acc"),
                          ("test_acc", "test acc")):
            value = row.get(key)
            if isinstance(value, int | float) and value == value:
                parts.append(f"{name} {value:.4f}")
        self(f"round {t}/{total}: {', '.join(parts) or 'trained'}; {megabytes(sent)} sent in "
             f"all; {self.elapsed():.0f} s")

    def phase_line(self, name: str, messages: int, sent: int) -> None:
        """One finished phase: the messages the server sent in it, the bytes, the time so far."""
        self(f"{name}: {messages} messages, {megabytes(sent)}, {self.elapsed():.0f} s")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class Tail:
    """Follows a log file another process writes: :meth:`new_lines` returns the complete lines
    added since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0
        self._partial = b""

    def new_lines(self) -> list[str]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self._offset)
                data = f.read()
        except OSError:
            return []
        self._offset += len(data)
        data = self._partial + data
        *lines, self._partial = data.split(b"\n")
        return [line.decode("utf-8", "replace") for line in lines]
