"""Watched calls, a declared stall, and the watchdog that ends a stuck process."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

from framebus.telemetry.health import Health
from framebus.telemetry.watchdog import EXIT_STALLED, Watchdog
from tests.unit.framebus.test_telemetry import FakeClock


def test_health_when_call_runs_past_budget_then_not_alive_naming_loop_and_call() -> None:
    clock = FakeClock()
    health = Health(clock)
    health.heartbeat("MainThread", 100)
    with health.call("commit_transaction", 10):
        clock.now = 9
        health.heartbeat("MainThread", 100)  # a thread that polls while it waits still waits
        assert health.liveness()[0]
        clock.now = 11
        alive, body = health.liveness()
    assert not alive
    assert body["stuck_calls"] == ["MainThread stuck in commit_transaction for 11 s (budget 10 s)"]
    assert "stuck_loops_s" not in body
    assert health.liveness()[0]  # the call returned


def test_health_when_nested_calls_then_each_watched_against_its_own_budget() -> None:
    clock = FakeClock()
    health = Health(clock)
    with health.call("outer", 100):
        clock.now = 1
        with health.call("inner", 5):
            clock.now = 7
            assert [s.call for s in health.stalls()] == ["inner"]
        assert health.stalls() == []


def test_health_when_failed_then_live_and_ready_answer_the_reason_until_exit() -> None:
    health = Health()
    health.add_check("kafka", lambda: None)
    health.fail("publish stuck in send_offsets_to_transaction for 61 s")
    health.fail("a later reason does not replace the first")
    alive, body = health.liveness()
    ready, why = health.readiness()
    assert not alive and not ready
    assert body["stalled"] == why["reasons"]["stalled"]
    assert why["reasons"]["stalled"].startswith("publish stuck in send_offsets_to_transaction")


def test_watchdog_when_nothing_stuck_then_never_exits() -> None:
    health = Health()
    exits: list[int] = []
    health.heartbeat("consume", 60)
    with Watchdog(health, check_every_s=0.05, exit_process=exits.append), health.call("flush", 60):
        time.sleep(0.3)
    assert exits == []
    assert health.failed is None


def test_watchdog_when_loop_stops_beating_then_exit_70_with_reason() -> None:
    clock = FakeClock()
    health = Health(clock)
    health.heartbeat("consume", 5)
    exits: list[int] = []
    with open("/dev/null", "w") as devnull:
        dog = Watchdog(health, grace_s=0, exit_process=exits.append, stack_out=devnull)
        assert not dog.check()
        clock.now = 6
        assert dog.check()
    assert exits == [EXIT_STALLED]
    assert health.failed == "loop consume has not come round for 6 s"


def test_watchdog_when_thread_stuck_in_a_call_then_process_exits_70_with_every_stack() -> None:
    # The real exit: a process whose thread never returns from a watched call.
    script = textwrap.dedent(
        """
        import threading
        from framebus.logs import configure_logging
        from framebus.telemetry.health import Health
        from framebus.telemetry.watchdog import Watchdog

        configure_logging("info")
        health = Health()

        def never_returns():
            with health.call("send_offsets_to_transaction", 0.5):
                threading.Event().wait()

        threading.Thread(target=never_returns, name="fb-publish").start()
        Watchdog(health, check_every_s=0.1, grace_s=0.1).start()
        threading.Event().wait(30)
        """
    )
    started = time.monotonic()
    done = subprocess.run(  # noqa: S603 - this interpreter, a fixed script
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == EXIT_STALLED, done.stderr[-2000:]
    assert time.monotonic() - started < 20
    assert "publish stuck in send_offsets_to_transaction" in done.stderr
    assert "most recent call first" in done.stderr
    assert "in never_returns" in done.stderr


def test_health_when_call_ends_on_another_thread_then_only_its_own_calls_removed() -> None:
    clock = FakeClock()
    health = Health(clock)
    inside = threading.Event()
    leave = threading.Event()

    def other() -> None:
        with health.call("flush", 1):
            inside.set()
            leave.wait(5)

    t = threading.Thread(target=other, name="fb-publish")
    t.start()
    inside.wait(5)
    with health.call("commit", 100):
        clock.now = 2
        assert [(s.loop, s.call) for s in health.stalls()] == [("publish", "flush")]
    leave.set()
    t.join(5)
    assert health.stalls() == []


def test_health_when_loop_overdue_inside_a_call_then_reported_as_stuck_in_that_call() -> None:
    clock = FakeClock()
    health = Health(clock)
    health.heartbeat("MainThread", 20)
    with health.call("send_offsets_to_transaction", 20):
        clock.now = 20.5  # the loop's allowance ran out first: its beat is older than the call
        [stall] = health.stalls()
    assert (
        stall.describe() == "MainThread stuck in send_offsets_to_transaction for 20 s (budget 20 s)"
    )


def test_watchdog_when_a_log_handler_stream_is_closed_then_still_exits_70() -> None:
    import io
    import logging

    clock = FakeClock()
    health = Health(clock)
    health.heartbeat("consume", 5)
    closed = io.StringIO()
    handler = logging.StreamHandler(closed)
    closed.close()
    logging.getLogger().addHandler(handler)
    exits: list[int] = []
    try:
        with open("/dev/null", "w") as devnull:
            clock.now = 6
            assert Watchdog(health, grace_s=0, exit_process=exits.append, stack_out=devnull).check()
    finally:
        logging.getLogger().removeHandler(handler)
    assert exits == [EXIT_STALLED]
