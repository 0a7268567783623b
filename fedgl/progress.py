"""Progress of long phases on stderr: one mechanism for rounds and every other long phase.

In a terminal each task is a rich bar with its count, elapsed time and ETA; when stderr is not a
terminal (a log file, CI, a pipe) a task prints one line every ``FEDGL_PROGRESS_EVERY`` seconds
(default 10) while it runs, and a last line when it ends if it printed any::

    fedgl: FedSage+ generator training: 37/200 (18%), 0:00:55 elapsed, ETA 0:04:03

A run opens the reporter (:func:`round_progress`, disabled by ``--no-progress``); code deep inside
the run reports a phase without being handed anything::

    from fedgl import progress

    with progress.phase("METIS partition") as bar:     # no total: elapsed time only
        ...
    for block in progress.track(blocks, "pre-training blocks", total=len(blocks)):
        ...

With no reporter open (library calls, ``--no-progress``, tests) every call is a no-op.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import IO, Any, TypeVar

T = TypeVar("T")

DEFAULT_EVERY = 10.0


def _fmt(seconds: float) -> str:
    s = int(max(seconds, 0))
    return f"{s // 3600}:{s % 3600 // 60:02d}:{s % 60:02d}"


class Task:
    """One phase: ``advance()`` as work completes; ``total`` None shows elapsed time only."""

    def __init__(self, reporter: Reporter | None, description: str, total: int | None) -> None:
        self._reporter = reporter
        self.description = description
        self.total = total
        self.done = 0
        self.info = ""
        self._started = time.monotonic()
        self._last_line = self._started
        self._printed = False
        self._printed_done = -1
        self._finished = False
        self._rich_id: Any = None

    # ------------------------------------------------------------------ public
    def advance(self, n: int = 1, info: str = "") -> None:
        self.done += n
        if info:
            self.info = info
        r = self._reporter
        if r is None:
            return
        if r.rich is not None:
            r.rich.update(self._rich_id, advance=n, info=info or self.info)
        elif time.monotonic() - self._last_line >= r.every:
            self._line()

    def line(self) -> str:
        """The one-line form of this task's state."""
        elapsed = time.monotonic() - self._started
        text = f"fedgl: {self.description}: "
        if self.total:
            text += (f"{self.done}/{self.total} ({100 * self.done / self.total:.0f}%), "
                     f"{_fmt(elapsed)} elapsed")
            if 0 < self.done < self.total:
                text += f", ETA {_fmt(elapsed / self.done * (self.total - self.done))}"
        elif self._finished:
            text += f"finished in {_fmt(elapsed)}"
        else:
            text += f"{self.done} done, " if self.done else "running, "
            text += f"{_fmt(elapsed)} elapsed"
        return text + (f" ({self.info})" if self.info else "")

    # ------------------------------------------------------------------ reporter side
    def _line(self) -> None:
        assert self._reporter is not None
        self._last_line = time.monotonic()
        self._printed = True
        self._printed_done = self.done
        self._reporter.write(self.line())

    def _open(self) -> None:
        r = self._reporter
        if r is None:
            return
        if r.rich is not None:
            self._rich_id = r.rich.add_task(self.description, total=self.total, info="")
        r.open_task(self)
        if r.rich is None and r.every == 0:   # every change printed: the start too
            self._line()

    def _close(self) -> None:
        r = self._reporter
        if r is None or not r.close_task(self):
            return
        self._finished = True
        if r.rich is not None:
            r.rich.remove_task(self._rich_id)
        elif self._printed and (self.total is None or self._printed_done != self.done):
            self._line()


class Reporter:
    """Where tasks report: a rich live display in a terminal, periodic lines otherwise."""

    def __init__(self, stream: IO[str] | None = None, every: float | None = None,
                 terminal: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stderr
        if every is None:
            try:
                every = float(os.environ.get("FEDGL_PROGRESS_EVERY", DEFAULT_EVERY))
            except ValueError:
                every = DEFAULT_EVERY
        self.every = max(every, 0.0)
        tty = terminal if terminal is not None else bool(getattr(self.stream, "isatty",
                                                                 lambda: False)())
        self.rich: Any = None
        self.tasks: list[Task] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None
        if tty:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                MofNCompleteColumn,
                Progress,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
            )
            self.rich = Progress(TextColumn("{task.description}"), BarColumn(),
                                 MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("ETA"),
                                 TimeRemainingColumn(), TextColumn("{task.fields[info]}"),
                                 console=Console(file=self.stream, force_terminal=True),
                                 transient=True)

    def open_task(self, task: Task) -> None:
        with self._lock:
            self.tasks.append(task)
            if self.rich is None and self._ticker is None:
                # one thread prints the periodic lines, so a step that blocks for long (METIS,
                # a slow block) still reports while it runs
                self._ticker = threading.Thread(target=self._tick, daemon=True,
                                                name="fedgl-progress")
                self._ticker.start()

    def close_task(self, task: Task) -> bool:
        """Forget ``task``; False if it was closed already."""
        with self._lock:
            if task not in self.tasks:
                return False
            self.tasks.remove(task)
            return True

    def _tick(self) -> None:
        while not self._stop.wait(min(max(self.every, 0.05), 1.0)):
            with self._lock:
                due = [t for t in self.tasks if time.monotonic() - t._last_line >= self.every]
            for t in due:
                t._line()

    def stop(self) -> None:
        """Close what is still open and stop the ticker."""
        for task in list(self.tasks):
            task._close()
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None

    def write(self, text: str) -> None:
        with self._lock:
            if self.rich is not None:
                self.rich.console.print(text, markup=False, highlight=False)
            else:
                self.stream.write(text + "\n")
                self.stream.flush()


_REPORTERS: list[Reporter | None] = []


def active() -> Reporter | None:
    """The reporter of the run in progress (None: progress is off)."""
    return _REPORTERS[-1] if _REPORTERS else None


@contextmanager
def reporting(enabled: bool, **kwargs: Any) -> Iterator[Reporter | None]:
    """Open a reporter for the enclosed code (nothing when ``enabled`` is False)."""
    if not enabled:
        _REPORTERS.append(None)  # an explicit "off" hides what an outer reporter would show
        try:
            yield None
        finally:
            _REPORTERS.pop()
        return
    rep = Reporter(**kwargs)
    _REPORTERS.append(rep)
    try:
        if rep.rich is not None:
            with rep.rich:
                yield rep
        else:
            yield rep
    finally:
        rep.stop()   # tasks an exception left open end here too
        _REPORTERS.pop()


@contextmanager
def phase(description: str, total: int | None = None, *, show: bool = True) -> Iterator[Task]:
    """A task for the enclosed work (a no-op task when no reporter is open or ``show`` is
    False, e.g. for a phase that is long only at scale)."""
    task = Task(active() if show else None, description, total)
    task._open()
    try:
        yield task
    finally:
        task._close()


def track(items: Iterable[T], description: str, total: int | None = None) -> Iterator[T]:
    """Iterate ``items``, advancing a task per item."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with phase(description, total) as task:
        for item in items:
            yield item
            task.advance()


def notice(text: str) -> None:
    """One line for the user on the open reporter (nothing when progress is off)."""
    rep = active()
    if rep is not None:
        rep.write(f"fedgl: {text}")


class RoundProgress:
    """The round bar of one repeat (``RoundProgress(None)``: silent)."""

    def __init__(self, reporter: Reporter | None) -> None:
        self._reporter = reporter
        self._task: Task | None = None

    def start(self, description: str, total: int) -> None:
        if self._task is not None:
            self._task._close()
        self._task = Task(self._reporter, description, total)
        self._task._open()

    def advance(self, info: str = "") -> None:
        if self._task is not None:
            self._task.advance(1, info)
            if self._task.total is not None and self._task.done >= self._task.total:
                self._task._close()
                self._task = None


@contextmanager
def round_progress(enabled: bool) -> Iterator[RoundProgress]:
    """Open the run's reporter; yields the round bar every algorithm advances."""
    with reporting(enabled) as rep:
        yield RoundProgress(rep)
