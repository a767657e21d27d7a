"""`--workers N`'s decisions: staggered start, restart policy, readiness, limits, worker flags."""

from __future__ import annotations

import argparse
import signal

import pytest

from framebus import settings as cfg
from framebus.entrypoint import EXIT_ERROR
from framebus.errors import ConfigError
from framebus.telemetry.watchdog import EXIT_STALLED
from framebus_inferencer.settings import DeliveryMode, InferencerSettings
from framebus_inferencer.supervision import (
    Outcome,
    Phase,
    Pool,
    RestartPolicy,
    exit_reason,
    split_limit,
    worker_args,
    worker_transactional_id,
)


def started_and_ready(pool: Pool, now: float = 0.0) -> None:
    """Start what is due and report each started worker warm and ready, until all run."""
    while due := pool.due(now):
        for i in due:
            pool.started(i, now, 9000 + i)
            pool.observed(i, True, True, None)


def test_restart_policy_when_failures_repeat_then_delay_doubles_up_to_its_cap() -> None:
    policy = RestartPolicy(initial_s=1.0, max_s=30.0)
    assert [policy.delay_s(n) for n in range(7)] == [1, 2, 4, 8, 16, 30, 30]
    assert policy.delay_s(10_000) == 30  # no overflow however long the loop


def test_pool_when_starting_then_each_worker_waits_for_the_one_before_to_be_warm() -> None:
    pool = Pool(3)
    assert pool.due(0.0) == [0]  # worker 1 waits: worker 0 builds the engine first
    pool.started(0, 0.0, 9000)
    assert pool.due(1.0) == []
    pool.observed(0, False, False, "inferencer: not warmed up")
    assert pool.due(2.0) == []
    pool.observed(0, True, False, "inferencer: no Kafka partitions assigned yet")
    assert pool.due(3.0) == [1]  # warm is enough: ready also needs partitions
    pool.started(1, 3.0, 9001)
    assert pool.due(3.0) == []


def test_pool_when_a_starting_worker_dies_before_warm_then_the_next_starts_anyway() -> None:
    pool = Pool(2)
    pool.started(0, 0.0, 9000)
    exit_ = pool.exited(0, -signal.SIGKILL, 1.0)
    assert exit_.outcome is Outcome.RESTART
    assert pool.due(1.0) == [1]  # not held behind a worker that is down
    assert pool.due(1.0 + exit_.delay_s) == [0, 1]


def test_pool_when_worker_dies_then_restarted_after_the_delay_and_counted_by_reason() -> None:
    pool = Pool(2, RestartPolicy(initial_s=1.0, max_s=30.0, healthy_after_s=60.0))
    started_and_ready(pool)
    first = pool.exited(1, EXIT_STALLED, 10.0)
    assert (first.outcome, first.reason, first.delay_s) == (Outcome.RESTART, "stalled", 1.0)
    assert pool.due(10.5) == []
    assert pool.due(11.0) == [1]
    pool.started(1, 11.0, 9101)
    second = pool.exited(1, -signal.SIGKILL, 12.0)  # again within healthy_after_s: longer wait
    assert (second.reason, second.delay_s) == ("SIGKILL", 2.0)
    assert pool.restarts() == {("1", "stalled"): 1.0, ("1", "SIGKILL"): 1.0}
    assert pool.port(1) == 9101


def test_pool_when_worker_ran_long_before_dying_then_delay_starts_again_from_initial() -> None:
    pool = Pool(1, RestartPolicy(initial_s=1.0, max_s=30.0, healthy_after_s=60.0))
    started_and_ready(pool)
    for t in (1.0, 3.0, 7.0):  # three quick failures: 1, 2, 4 s
        pool.exited(0, 1, t)
        pool.started(0, t + 0.5, 9000)
    assert pool.exited(0, 1, 100.0).delay_s == 1.0  # it had run 92.5 s


def test_pool_when_a_worker_exits_2_before_ever_ready_then_fatal() -> None:
    pool = Pool(2)
    pool.started(0, 0.0, 9000)
    assert pool.exited(0, EXIT_ERROR, 1.0).outcome is Outcome.FATAL


def test_pool_when_a_worker_exits_2_after_it_was_ready_then_restarted() -> None:
    pool = Pool(2)
    started_and_ready(pool)
    assert pool.exited(0, EXIT_ERROR, 1.0).outcome is Outcome.RESTART


def test_pool_when_workers_exit_0_on_their_own_then_done_and_not_restarted() -> None:
    pool = Pool(2)
    started_and_ready(pool)
    assert pool.exited(0, 0, 5.0).outcome is Outcome.DONE
    assert not pool.finished()
    assert pool.due(100.0) == []
    pool.exited(1, 0, 6.0)
    assert pool.finished()


def test_pool_when_stopping_then_nothing_starts_and_exits_are_on_purpose() -> None:
    pool = Pool(3)
    pool.started(0, 0.0, 9000)
    pool.observed(0, True, True, None)
    pool.stop()
    assert pool.due(10.0) == []
    assert pool.exited(0, -signal.SIGTERM, 11.0).outcome is Outcome.DONE
    assert pool.finished()  # workers 1 and 2 never started
    assert pool.restarts() == {}


def test_pool_readiness_when_every_worker_ready_then_ready_else_names_who_and_why() -> None:
    pool = Pool(2)
    assert pool.not_ready() == "worker 0: not started; worker 1: not started"
    started_and_ready(pool)
    assert pool.not_ready() is None
    assert pool.readiness_by_worker() == {"0": 1.0, "1": 1.0}
    pool.exited(1, -signal.SIGKILL, 5.0)
    assert pool.not_ready() == "worker 1: exited (SIGKILL), restarting"
    pool.started(1, 6.0, 9001)
    assert pool.not_ready() == "worker 1: starting"
    pool.observed(1, True, False, "inferencer: no Kafka partitions assigned yet")
    assert pool.not_ready() == "worker 1: inferencer: no Kafka partitions assigned yet"
    pool.observed(1, True, True, None)
    assert pool.not_ready() is None
    assert [w["phase"] for w in pool.describe()] == [Phase.RUNNING.value] * 2


def test_pool_when_a_probe_answer_races_with_the_exit_then_the_exit_wins() -> None:
    pool = Pool(1)
    started_and_ready(pool)
    pool.exited(0, -signal.SIGKILL, 1.0)
    pool.observed(0, True, True, None)  # read just before the process ended
    assert pool.not_ready() == "worker 0: exited (SIGKILL), restarting"


@pytest.mark.parametrize(
    ("code", "reason"),
    [(EXIT_STALLED, "stalled"), (-signal.SIGKILL, "SIGKILL"), (1, "exit_1"), (-99, "signal_99")],
)
def test_exit_reason_when_code_then_label(code: int, reason: str) -> None:
    assert exit_reason(code) == reason


@pytest.mark.parametrize(
    ("total", "workers", "share"), [(4 * 1024**3, 2, 2 * 1024**3), (0, 4, 0), (10, 3, 3), (1, 4, 1)]
)
def test_split_limit_when_workers_share_then_each_gets_its_part_and_0_stays_unlimited(
    total: int, workers: int, share: int
) -> None:
    assert split_limit(total, workers) == share


def worker_settings(parent_argv: list[str], index: int, port: int) -> InferencerSettings:
    """What worker `index` parses: the supervisor's arguments, then its own flags."""
    parent = load(parent_argv)
    return load([*parent_argv, *worker_args(parent, index, port)])


def load(argv: list[str]) -> InferencerSettings:
    parser = argparse.ArgumentParser()
    cfg.add_arguments(parser, InferencerSettings)
    return cfg.load(InferencerSettings, {"FRAMEBUS_WORKERS": "2"}, parser.parse_args(argv))


def test_worker_args_when_parsed_after_the_supervisors_then_one_worker_with_its_share() -> None:
    argv = [
        "--delivery",
        "exactly_once",
        "--consumer-group",
        "g",
        "--transactional-id",
        "pod-7",
        "--gpu-mem-limit-bytes",
        str(6 * 1024**3),
        "--cpu-arena-limit-bytes",
        "1000",
        "--http-port",
        "8080",
        "--client-id",
        "fb",
    ]
    parent = load(argv)
    assert parent.workers == 2  # from the environment
    w1 = worker_settings(argv, 1, 41234)
    assert (w1.workers, w1.worker_index, w1.http_port) == (1, 1, 41234)
    assert w1.delivery is DeliveryMode.EXACTLY_ONCE  # everything else as the supervisor's
    assert w1.consumer_group == "g"
    assert w1.transactional_id == "pod-7-w1"
    assert w1.kafka.client_id == "fb-w1"
    assert w1.gpu_mem_limit_bytes == 3 * 1024**3
    assert w1.cpu_arena_limit_bytes == 500


def test_worker_transactional_id_when_restarted_then_same_and_distinct_per_worker() -> None:
    settings = InferencerSettings(workers=3, consumer_group="g")
    ids = [worker_transactional_id(settings, i) for i in range(3)]
    assert len(set(ids)) == 3
    assert ids == [worker_transactional_id(settings, i) for i in range(3)]  # stable
    assert all(i.startswith("g-") for i in ids)  # <group>-<host name>-w<i> without an explicit id


def test_settings_when_worker_index_with_workers_then_refused() -> None:
    with pytest.raises(ConfigError, match="FRAMEBUS_WORKER_INDEX"):
        InferencerSettings(workers=2, worker_index=0)
    with pytest.raises(ConfigError, match="FRAMEBUS_WORKERS "):
        InferencerSettings(workers=0)
