"""A progress bar over rounds (rich), silent when disabled."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class RoundProgress:
    def __init__(self, progress: Progress | None) -> None:
        self._progress = progress
        self._task = None

    def start(self, description: str, total: int) -> None:
        if self._progress is not None:
            if self._task is not None:
                self._progress.remove_task(self._task)
            self._task = self._progress.add_task(description, total=total, info="")

    def advance(self, info: str = "") -> None:
        if self._progress is not None and self._task is not None:
            self._progress.update(self._task, advance=1, info=info)


@contextmanager
def round_progress(enabled: bool) -> Iterator[RoundProgress]:
    if not enabled:
        yield RoundProgress(None)
        return
    prog = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TextColumn("{task.fields[info]}"),
                    console=Console(stderr=True), transient=True)
    with prog:
        yield RoundProgress(prog)
