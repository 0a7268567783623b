"""fedgl's paced SuperNode (:mod:`fedgl.federation.flower.supernode`), the proportional waits
(:mod:`fedgl.federation.flower.pacing`), the relay runner's line per answered exchange and the
server's quick object pulls. The loopback tests (tests/test_flower_*.py, ``-m slow``) run the
whole deployment through them."""

from __future__ import annotations

import functools
import importlib
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.flower_helpers import needs_flwr, tiny_shard

pytestmark = needs_flwr


def test_pause_is_a_quarter_of_the_idle_time_between_the_floor_and_the_cap() -> None:
    from fedgl.federation.flower.pacing import FLOOR, RATIO, pause

    assert (RATIO, FLOOR) == (0.25, 0.03)
    assert pause(0.0, cap=3.0) == FLOOR
    assert pause(-5.0, cap=3.0) == FLOOR          # a clock step back waits the floor
    assert pause(0.1, cap=3.0) == FLOOR           # 0.025 < floor
    assert pause(1.0, cap=3.0) == 0.25
    assert pause(8.0, cap=3.0) == 2.0
    assert pause(100.0, cap=3.0) == 3.0           # never longer than Flower's own wait
    assert pause(100.0, cap=0.5) == 0.5


class FakeExchange:
    """A fake grid for ``runtime.exchange_keyed`` on a fake clock: message ``m<i>``'s reply is
    there from ``ready["m<i>"]`` seconds; ``checks`` and ``sleeps`` record when the server
    checked for replies and how long it slept."""

    def __init__(self) -> None:
        self.now, self.ready = 0.0, {}
        self.checks: list[float] = []
        self.sleeps: list[float] = []

    def start(self, ready: dict[str, float]) -> FakeExchange:
        self.now, self.ready, self.checks, self.sleeps = 0.0, ready, [], []
        return self

    @staticmethod
    def message(reply_to: str = "") -> Any:
        meta = type("Meta", (), {"message_type": "query.fit", "reply_to_message_id": reply_to})
        return type("Msg", (), {"metadata": meta})()

    def push_messages(self, messages: list[Any]) -> list[str]:
        return [f"m{i}" for i in range(len(messages))]

    def pull_messages(self, ids: Any) -> list[Any]:
        self.checks.append(self.now)
        return [self.message(i) for i in ids if self.now >= self.ready[i]]

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


@pytest.fixture
def grid(monkeypatch: pytest.MonkeyPatch) -> FakeExchange:
    from fedgl.federation.flower import runtime

    fake = FakeExchange()
    monkeypatch.setattr(runtime.time, "monotonic", lambda: fake.now)
    monkeypatch.setattr(runtime.time, "sleep", fake.sleep)
    monkeypatch.setattr(runtime, "quick_object_pulls",
                        runtime.contextmanager(lambda *_: iter([None])))
    return fake


def test_the_server_checks_for_replies_at_a_quarter_of_the_time_waited(grid: FakeExchange
                                                                        ) -> None:
    """A reply that comes after ``t`` seconds is seen at most ``t / 4`` (and the 10 ms floor)
    late, with checks at most :data:`PULL_INTERVAL` apart."""
    from fedgl.federation.flower import runtime

    two = [grid.message(), grid.message()]
    for last in (0.17, 0.6, 5.0):
        seen = runtime.exchange_keyed(grid.start({"m0": 0.05, "m1": last}), two, None)
        assert set(seen.replies) == {"m0", "m1"} and seen.after["m0"] < seen.after["m1"]
        assert last <= seen.elapsed <= last + max(runtime.FIRST_PULL_INTERVAL, last / 4) + 1e-9
        sleeps = grid.sleeps
        assert sleeps[0] == runtime.FIRST_PULL_INTERVAL and max(sleeps) <= runtime.PULL_INTERVAL
    assert len(grid.sleeps) <= 40   # 5 s: checks every 0.2 s once a quarter of the wait is longer


@pytest.fixture
def flower_loop(monkeypatch: pytest.MonkeyPatch) -> Any:
    """Flower's SuperNode loop module with fakes for the two steps the pacing wraps; every
    attribute install() replaces is restored afterwards."""
    loop = importlib.import_module("flwr.supernode.start_client_internal")
    for name in ("time", "pull_objects", "_pull_and_store_message", "_push_messages"):
        monkeypatch.setattr(loop, name, getattr(loop, name))
    from flwr.supercore import heartbeat
    from flwr.supernode import fleet_http_connection

    for module in (heartbeat, fleet_http_connection):   # install() shortens the heartbeat
        monkeypatch.setattr(module, "HEARTBEAT_DEFAULT_INTERVAL",
                            module.HEARTBEAT_DEFAULT_INTERVAL)
    results: list[Any] = []
    monkeypatch.setattr(loop, "_pull_and_store_message", lambda **_: results.pop(0))
    pushed: list[int] = []
    monkeypatch.setattr(loop, "_push_messages", lambda **_: pushed.append(1))
    loop.fake_results, loop.fake_pushed = results, pushed
    yield loop
    del loop.fake_results, loop.fake_pushed


def _pending(fd: int) -> bytes:
    try:
        return os.read(fd, 100)
    except BlockingIOError:
        return b""


def test_install_announces_each_stored_message_and_paces_flowers_waits(flower_loop: Any) -> None:
    from flwr.supercore.inflatable.inflatable_utils import pull_objects

    from fedgl.federation.flower.supernode import OBJECT_FIRST_BACKOFF, install

    task_read, task_write = os.pipe()
    reply_read, reply_write = os.pipe()
    try:
        os.set_blocking(task_read, False)
        clock = install(task_fd=task_write, reply_fd=reply_read)
        assert flower_loop.time is clock
        assert isinstance(flower_loop.pull_objects, functools.partial)
        assert flower_loop.pull_objects.func is pull_objects
        assert flower_loop.pull_objects.keywords == {"initial_backoff": OBJECT_FIRST_BACKOFF}
        assert clock.monotonic is time.monotonic   # every other attribute is time's
        # the node's heartbeat: Flower's shortest, so a SuperNode that stops is taken for gone
        # about 20 s after its last heartbeat (two intervals), not 60 s
        from flwr.common.constant import HEARTBEAT_MIN_INTERVAL
        from flwr.supercore import heartbeat
        from flwr.supernode import fleet_http_connection

        assert fleet_http_connection.HEARTBEAT_DEFAULT_INTERVAL == HEARTBEAT_MIN_INTERVAL
        assert heartbeat.HEARTBEAT_DEFAULT_INTERVAL == HEARTBEAT_MIN_INTERVAL

        flower_loop.fake_results.extend([None, 42])
        before = clock.since
        assert flower_loop._pull_and_store_message(state=None) is None   # nothing pulled
        assert _pending(task_read) == b"" and clock.since == before
        assert flower_loop._pull_and_store_message(state=None) == 42     # a message stored
        assert _pending(task_read) == b"."
        assert clock.since >= before
        flower_loop._push_messages(state=None)
        assert flower_loop.fake_pushed == [1]

        # a reply announced on the pipe ends the wait and is consumed by it
        os.write(reply_write, b"..")
        clock.sleep(3.0)
        assert _pending(reply_read) == b"" and clock.wake == reply_read
        # once the runner is gone (its end closed), the SuperNode stops watching the pipe
        os.close(reply_write)
        reply_write = -1
        clock.sleep(3.0)
        assert clock.wake is None
        assert clock.sleeps == 2
    finally:
        for fd in (task_read, task_write, reply_read, reply_write):
            if fd >= 0:
                os.close(fd)


def test_a_message_the_relay_could_not_answer_does_not_stop_the_node(flower_loop: Any) -> None:
    """Flower's loop pushes after every stored message and waits for a reply until one is
    stored: a message with no task to claim (its run ended) or whose task failed before its
    reply would stop the node for good. The wrapped pull reports no message instead, and the
    node polls on."""
    from fedgl.federation.flower.supernode import install

    answered = [True, False, True]
    calls: list[Any] = []

    def relay(state: Any) -> bool:
        calls.append(state)
        return answered.pop(0)

    install(relay=relay)
    state, store = _node_state()
    flower_loop.fake_results.extend([3, 4, 5])
    step = functools.partial(flower_loop._pull_and_store_message, state=state,
                             object_store=store)
    assert step() == 3      # answered: push follows
    assert step() is None   # not: no push, poll again
    assert step() == 5
    assert calls == [state, state, state]


def _node_state() -> tuple[Any, Any]:
    """Flower's own in-memory SuperNode state and object store."""
    from flwr.supercore.object_store.in_memory_object_store import InMemoryObjectStore
    from flwr.supernode.nodestate.in_memory_nodestate import InMemoryNodeState

    store = InMemoryObjectStore()
    return InMemoryNodeState(store), store


def test_a_message_left_by_a_run_that_stopped_is_dropped_before_the_next_is_answered(
        flower_loop: Any) -> None:
    """Flower's SuperNode leaves a message whose run stopped while it was being received stored,
    its task pending and its objects unpulled (a ServerApp killed mid-run): the relay could
    claim that task for the next run's first message and wait for its objects for good. The
    paced SuperNode finishes such a task (failed) and deletes its message before answering."""
    from flwr.app import Metadata, RecordDict
    from flwr.app.message import make_message
    from flwr.common.constant import Status
    from flwr.supercore.constant import TaskType

    from fedgl.federation.flower.supernode import drop_stale_tasks, install

    state, store = _node_state()
    state.set_node_id(9)
    stale = make_message(metadata=Metadata(
        run_id=1, message_id="", src_node_id=1, dst_node_id=9, reply_to_message_id="",
        group_id="", ttl=60.0, message_type="train.x", created_at=time.time()),
        content=RecordDict())
    stale.metadata.__dict__["_message_id"] = stale.object_id
    state.create_task(task_type=TaskType.CLIENT_APP, run_id=1)
    state.store_message(stale)                       # what Flower leaves behind
    pending = [t.run_id for t in state.get_tasks(statuses=[Status.PENDING])]
    assert pending == [1]
    assert drop_stale_tasks(state, store, keep_run=1) == 0    # the run's own task stays

    claimed: list[list[int]] = []

    def relay(s: Any) -> bool:
        claimed.append([t.run_id for t in s.get_tasks(statuses=[Status.PENDING])])
        return True

    install(relay=relay)
    state.create_task(task_type=TaskType.CLIENT_APP, run_id=2)   # the next run's message
    flower_loop.fake_results.append(2)
    assert flower_loop._pull_and_store_message(state=state, object_store=store) == 2
    assert claimed == [[2]]                          # only the new run's task is left to claim
    assert state.get_messages_legacy(run_ids=[1]) == []
    finished = state.get_tasks(run_ids=[1])
    assert [t.status.status for t in finished] == [Status.FINISHED]
    assert drop_stale_tasks(state, store, keep_run=None) == 1   # after a poll: every leftover


def test_a_full_or_closed_pipe_is_no_error() -> None:
    from fedgl.federation.flower.supernode import drain, signal_pipe

    read, write = os.pipe()
    os.set_blocking(read, False)
    os.set_blocking(write, False)
    for _ in range(70_000):          # beyond a pipe's 64 KiB buffer
        signal_pipe(write)
    signal_pipe(None)
    assert drain(read) is True       # all read, the writer still there
    os.close(write)
    assert drain(read) is False      # the writer has gone
    os.close(read)
    signal_pipe(write)               # a closed descriptor: ignored


class _Message:
    """The parts of a Flower message the runner's line reads (a real ``Message`` needs a
    running task's identity): its type, whether it is an error, its records."""

    def __init__(self, body: bytes | None, refused: str | None = None,
                 error: bool = False) -> None:
        from flwr.app import ConfigRecord, RecordDict

        from fedgl.federation.flower.client_app import body_record

        self.content = RecordDict({"fedgl-meta": ConfigRecord(
            {"refused": refused} if refused else {})})
        if body is not None:
            self.content["fedgl"] = body_record(body)
        self.error = error
        self.metadata = type("Metadata", (), {"message_type": "train.fedgcn__fit"})()

    def has_error(self) -> bool:
        return self.error


def test_the_runner_prints_one_line_per_answered_exchange() -> None:
    from fedgl.federation.flower.relay_runner import exchange_line

    message = _Message(bytes(1234))
    assert exchange_line(5, message, _Message(bytes(56789)), 0.0421) == (
        "fedgl relay: run 5: 'train.fedgcn__fit' 1,234 bytes in, 56,789 bytes out, 0.042 s")
    refused = _Message(None, refused="client 0 refused a message: no")
    assert exchange_line(5, message, refused, 0.5) == (
        "fedgl relay: run 5: 'train.fedgcn__fit' 1,234 bytes in, 0 bytes out, 0.500 s; "
        "refused: client 0 refused a message: no")
    failed = _Message(None, error=True)
    assert exchange_line(5, message, failed, 1.0, "fedgl's relay: OSError: gone") == (
        "fedgl relay: run 5: 'train.fedgcn__fit' 1,234 bytes in, 0 bytes out, 1.000 s; "
        "fedgl's relay: OSError: gone")


def test_the_server_pulls_objects_quickly_only_inside_an_exchange() -> None:
    from flwr.superlink.grid import http_grid

    from fedgl.federation.flower.runtime import OBJECT_FIRST_BACKOFF, quick_object_pulls

    original = http_grid.pull_objects
    with quick_object_pulls():
        assert http_grid.pull_objects.func is original
        assert http_grid.pull_objects.keywords == {"initial_backoff": OBJECT_FIRST_BACKOFF}
    assert http_grid.pull_objects is original
    with quick_object_pulls(12.5):   # an exchange's time left bounds its object pulls
        assert http_grid.pull_objects.keywords == {"initial_backoff": OBJECT_FIRST_BACKOFF,
                                                   "max_time": 12.5}
    assert http_grid.pull_objects is original


def test_the_runners_object_pulls_are_quick(monkeypatch: pytest.MonkeyPatch) -> None:
    from flwr.supercore.inflatable import inflatable_utils

    from fedgl.federation.flower.relay_runner import quick_object_pulls
    from fedgl.federation.flower.supernode import OBJECT_FIRST_BACKOFF

    original = inflatable_utils.pull_objects
    monkeypatch.setattr(inflatable_utils, "pull_objects", original)
    quick_object_pulls()
    quick_object_pulls()             # twice: wrapped once
    assert inflatable_utils.pull_objects.func is original
    assert inflatable_utils.pull_objects.keywords == {"initial_backoff": OBJECT_FIRST_BACKOFF}


def test_the_in_process_runtime_calls_flowers_handlers_with_the_nodes_state_and_task(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from flwr.supercore.servicer.runtime import runtime_handlers as core
    from flwr.supernode.servicer.runtime import runtime_handlers as node

    from fedgl.federation.flower.supernode import InProcessRuntime

    calls: list[tuple[str, Any, Any, Any]] = []
    for name in (*InProcessRuntime.METHODS.values(),):
        monkeypatch.setattr(node, name, lambda r, s, t, name=name: calls.append((name, r, s, t)))
    monkeypatch.setattr(core, "send_task_heartbeat",
                        lambda r, s, t: calls.append(("send_task_heartbeat", r, s, t)))
    runtime = InProcessRuntime("STATE", "TASK")
    for method in (*InProcessRuntime.METHODS, "SendTaskHeartbeat"):
        getattr(runtime, method)(f"request-{method}")
    assert calls == [(h, f"request-{m}", "STATE", "TASK") for m, h in
                     [*InProcessRuntime.METHODS.items(),
                      ("SendTaskHeartbeat", "send_task_heartbeat")]]
    with pytest.raises(AttributeError):
        runtime.AcquireTask   # noqa: B018 - a task's client cannot claim another task


def test_an_unknown_supernode_layout_is_refused_in_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture) -> None:
    from fedgl.cli import main
    from fedgl.data.shard_format import write_shard
    from fedgl.privacy.identity import write_keys

    write_keys(tmp_path / "keys", 1)
    write_shard(tiny_shard(0), tmp_path / "shards")
    monkeypatch.setenv("FEDGL_SUPERNODE", "fast")
    assert main(["client", "--superlink", "127.0.0.1:9", "--insecure",
                 "--data", str(tmp_path / "shards" / "client-0.json"),
                 "--key", str(tmp_path / "keys" / "client-0.key"),
                 "--roster", str(tmp_path / "keys" / "roster.json")]) == 2
    assert capsys.readouterr().err.strip() == (
        "fedgl: error: FEDGL_SUPERNODE='fast' is not a SuperNode layout; unset it (or use one "
        "of relay, runner, flower)")


def test_an_anticipation_waits_for_the_least_recent_lower_bound() -> None:
    from fedgl.federation.flower.pacing import ANTICIPATE_CAP, KEEP, SHRINK, Anticipation

    a = Anticipation()
    assert a.first_wait() == 0.0                  # nothing remembered: poll at once
    a.found(0.12, 0.0)                            # a poll at 0.12 s found nothing
    assert a.first_wait() == 0.12
    a.found(0.30, 0.12)
    assert a.first_wait() == 0.12                 # the least of the recent bounds
    a.found(None, 0.12)                           # the first poll found it: it may come sooner
    assert a.first_wait() == SHRINK * 0.12
    for _ in range(KEEP):
        a.found(5.0, 0.1)                         # long waits (an idle node) are not remembered
    assert a.first_wait() == SHRINK * 0.12
    for _ in range(KEEP):
        a.found(ANTICIPATE_CAP, 0.1)
    assert a.first_wait() == ANTICIPATE_CAP       # the longest first wait
    assert Anticipation().first_wait() == 0.0


def test_the_server_first_checks_about_when_the_first_reply_came_before(grid: FakeExchange
                                                                          ) -> None:
    """With an anticipation, an exchange like the last ones checks for replies about when its
    first reply came in them: a few checks instead of a dozen and more, each reply still seen at
    most the floor (or a quarter of the time since the first check) late."""
    from fedgl.federation.flower import runtime
    from fedgl.federation.flower.pacing import Anticipation

    two = [grid.message(), grid.message()]
    anticipation = Anticipation()
    counts = []
    for _ in range(4):
        seen = runtime.exchange_keyed(grid.start({"m0": 0.30, "m1": 0.32}), two, None,
                                      anticipation=anticipation)
        assert set(seen.replies) == {"m0", "m1"}
        assert 0.32 <= seen.elapsed <= 0.32 + 0.3 / 4 + 1e-9
        counts.append(len(grid.checks))
    assert counts[0] >= 12 and max(counts[1:]) <= 4, counts   # 15 checks, then 4
    assert 0.2 < grid.checks[0] < 0.30            # later than the first check, before the reply

    # a reply that now comes far sooner than before is seen at most the cap late
    seen = runtime.exchange_keyed(grid.start({"m0": 0.01, "m1": 0.01}), two, None,
                                  anticipation=anticipation)
    assert seen.elapsed <= 0.5 + 1e-9 and len(grid.checks) == 1


def test_the_supernode_first_polls_about_when_the_next_message_came_before(
        flower_loop: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a reply, Flower's loop polls the SuperLink at once; the paced SuperNode first waits
    about as long as the next message took to come after the recent replies (the latest poll
    that found nothing, remembered), then polls from the floor again."""
    from fedgl.federation.flower import pacing, supernode

    now, slept = [0.0], []

    class Clock:
        @staticmethod
        def monotonic() -> float:
            return now[0]

        @staticmethod
        def sleep(seconds: float) -> None:
            slept.append(seconds)
            now[0] += seconds

    monkeypatch.setattr(supernode, "time", Clock)
    monkeypatch.setattr(pacing, "time", Clock)
    clock = supernode.install()
    monkeypatch.setattr(clock, "sleep", Clock.sleep)
    flower_loop._push_messages(state=None)
    assert slept == []                                  # nothing learned yet: poll at once
    for polled_at, result in ((0.05, None), (0.15, None), (0.20, 7)):
        now[0] = polled_at
        flower_loop.fake_results.append(result)
        flower_loop._pull_and_store_message(state=None)
    now[0] = 0.25                                       # the reply to message 7 is pushed
    flower_loop._push_messages(state=None)
    assert slept == [pytest.approx(0.15 - 0.0)]         # its first poll comes 0.15 s later ...
    assert clock.since == now[0]                        # ... and the paced polls start there


def test_the_party_warms_up_torch_so_that_its_first_fit_imports_nothing() -> None:
    """The first optimizer a process builds imports torch's compiler stack (about a CPU second):
    after :func:`~fedgl.deployment.party.warm_up` (``fedgl client`` runs it as it starts), the
    first fit's optimizer imports no module."""
    import subprocess
    import sys

    probe = ("import sys, torch\n"
             "from fedgl.deployment.party import warm_up\n"
             "warm_up()\n"
             "before = set(sys.modules)\n"
             "torch.optim.Adam([torch.zeros(2, requires_grad=True)], lr=0.1)\n"
             "torch.optim.SGD([torch.zeros(2, requires_grad=True)], lr=0.1)\n"
             "print(sorted(set(sys.modules) - before))\n")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                         timeout=120, check=True)
    assert out.stdout.strip() == "[]", out.stdout
    cold = subprocess.run([sys.executable, "-c", probe.replace("warm_up()\n", "")],
                          capture_output=True, text=True, timeout=120, check=True)
    assert "torch._dynamo" in cold.stdout          # what the warm-up spares the first fit


def test_a_reply_whose_objects_never_come_holds_no_check_past_the_timeout(
        grid: FakeExchange, monkeypatch: pytest.MonkeyPatch) -> None:
    """A SuperNode killed after announcing its reply: Flower's grid pulls that reply's objects
    until its limit, which is the exchange's time left (not the SuperLink's minutes); a last
    check at the timeout still collects the replies that came meanwhile (a healthy client
    whose reply came while the check waited is not reported silent)."""
    from fedgl.federation.flower import runtime

    limits: list[float | None] = []

    @runtime.contextmanager
    def record(max_time: float | None = None) -> Any:
        limits.append(max_time)
        yield

    stuck: list[float] = []

    def pull_messages(ids: Any) -> list[Any]:
        grid.checks.append(grid.now)
        if grid.now >= 0.5 and not stuck:     # m1's objects never come: the pull waits it out
            stuck.append(grid.now)
            grid.now += limits[-1]
            return [grid.message("m1")]       # Flower's "objects unavailable" error reply
        return [grid.message(i) for i in ids if grid.now >= grid.ready[i]]

    monkeypatch.setattr(runtime, "quick_object_pulls", record)
    monkeypatch.setattr(grid, "pull_messages", pull_messages)
    seen = runtime.exchange_keyed(grid.start({"m0": 1.0, "m1": float("inf")}),
                                  [grid.message(), grid.message()], 5.0)
    assert set(seen.replies) == {"m0", "m1"}          # m0 came while the stuck check waited
    assert seen.elapsed == pytest.approx(5.0)
    assert limits[len(grid.checks) - 2] == pytest.approx(5.0 - stuck[0])   # the time left
    assert limits[-1] == runtime.LAST_CHECK_TIME
