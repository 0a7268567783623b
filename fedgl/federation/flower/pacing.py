"""Proportional waits: how long a poll that found nothing waits before it asks again.

Flower's SuperNode waits a fixed 3 s after a pull from the SuperLink that found no message and
checks for its ClientApp's reply every 0.5 s; its object pulls back off from 1 s. Every exchange
of a deployment pays these waits, whatever it carries. A poll paced by :func:`pause` instead
waits a fixed fraction of the time it has already waited::

    pause(idle) = min(cap, max(FLOOR, RATIO * idle))

where ``idle`` is the time since the last thing happened (a message received, a reply pushed).
A message that comes ``idle`` seconds after the last one is therefore seen at most
``max(RATIO * idle, FLOOR)`` seconds late (and never later than ``cap``, Flower's own wait),
while a wait of ``T`` seconds costs about ``4 + log(T / 0.12 s) / log(1.25)`` polls (with the
defaults: 4 quick ones of ``FLOOR`` until ``idle`` reaches ``FLOOR / RATIO``, then each 25 %
longer): a node that idles polls as rarely as Flower's does, and one in the middle of a run sees
a message within a few tens of milliseconds.

The floor is 30 ms: the next message of a run never comes within tens of milliseconds of a
reply (the server first collects every client's reply), so quicker polls found nothing and only
cost the SuperLink a request each (a Cora FedGCN 100-round loopback run: 3.9 polls per message
at 30 ms, 6.2 at 10 ms; docs/performance.md, "The paced SuperNode, answering in its own process").

In a run the same wait recurs: a SuperNode waits about as long after each reply for the next
message, the server about as long for the first reply to each message of a type. An
:class:`Anticipation` remembers, for the last :data:`KEEP` waits, the latest moment a poll found
nothing (a lower bound of when the awaited thing came) and makes the next wait's first poll no
sooner than the least of them (at most :data:`ANTICIPATE_CAP`); the paced polls follow. A steady
wait then costs about two polls (one just before the thing comes, one just after) instead of
four to six; a thing that comes sooner than the recent ones is seen at most
:data:`ANTICIPATE_CAP` late, and the next first waits are halved until a poll finds nothing
again. Waits longer than the cap are not remembered.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

#: the fraction of the time already waited that the next wait lasts
RATIO = 0.25
#: the shortest wait, in seconds
FLOOR = 0.03


#: how many recent waits an :class:`Anticipation` remembers
KEEP = 4
#: the longest first wait an :class:`Anticipation` makes, in seconds
ANTICIPATE_CAP = 0.5
#: where the first poll already found what it waited for, the bound remembered is this share of
#: the first wait (the thing may have come sooner: a wait that shrinks is learned within a few)
SHRINK = 0.5


class Anticipation:
    """When to poll first for something that recently took a while to come.

    ``first_wait()`` is the least of the last :data:`KEEP` lower bounds (0 before any);
    ``found(last_empty, first_wait)`` records one: ``last_empty`` is when (seconds since the
    wait began) the latest poll that found nothing began, None where the first poll, after
    ``first_wait`` seconds, found it (then ``SHRINK * first_wait``). A bound over
    :data:`ANTICIPATE_CAP` is not remembered: a long wait (an idle node between runs, a long
    computation) says nothing of the next one, and its polls are few anyway."""

    def __init__(self) -> None:
        self.bounds: deque[float] = deque(maxlen=KEEP)

    def first_wait(self) -> float:
        return min(self.bounds) if self.bounds else 0.0

    def found(self, last_empty: float | None, first_wait: float) -> None:
        bound = SHRINK * first_wait if last_empty is None else last_empty
        if bound <= ANTICIPATE_CAP:
            self.bounds.append(max(0.0, bound))


def pause(idle: float, cap: float, *, ratio: float = RATIO, floor: float = FLOOR) -> float:
    """Seconds to wait before the next poll, ``idle`` seconds after the last activity."""
    return min(cap, max(floor, ratio * max(idle, 0.0)))


class PacedClock:
    """A stand-in for the ``time`` module inside one Flower module: its ``sleep(s)`` waits
    :func:`pause` of the time since :meth:`mark` (at most ``s``, Flower's own wait); every other
    attribute is the ``time`` module's."""

    def __init__(self) -> None:
        self.since = time.monotonic()
        self.sleeps = 0

    def mark(self) -> None:
        """Something happened: the next waits start short again."""
        self.since = time.monotonic()

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        time.sleep(pause(time.monotonic() - self.since, cap=seconds))

    def __getattr__(self, name: str) -> Any:
        return getattr(time, name)
