"""The engine's CPU accounting: run calls (and ONNX Runtime's threads) counted, nothing else."""

from __future__ import annotations

import resource
import threading
import time

import numpy as np
import onnx
import pytest

from framebus_inferencer.engine import Engine
from framebus_inferencer.enginecpu import EngineCpu, thread_cpu_s, thread_ids
from framebus_inferencer.providers import EngineOptions
from framebus_inferencer.telemetry import EngineCpuCollector
from testkit.models import yolov8n_like_model

SIZE = 160  # the YOLOv8n-sized model at 160: some 15 ms of CPU a frame, enough to measure


def process_cpu_s() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def spin(seconds: float) -> None:
    """Burn CPU on this thread, outside any run."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Engine:
    path = tmp_path_factory.mktemp("cpu") / "v8n.onnx"
    onnx.save(yolov8n_like_model(SIZE), str(path))
    engine = Engine(path, EngineOptions(max_batch=4, intra_op_threads=2))
    engine.warm_up()
    return engine


def test_engine_cpu_when_session_has_an_intra_op_pool_then_its_thread_is_the_engines(
    engine: Engine,
) -> None:
    assert engine.cpu.pool_threads == 1  # two intra-op threads: the caller and one of ORT's


def test_engine_cpu_when_runs_and_work_outside_them_then_only_the_runs_count(
    engine: Engine,
) -> None:
    frames = [np.full((SIZE, SIZE, 3), 40 * i, np.uint8) for i in range(4)]
    engine_before, process_before = engine.cpu.seconds(), process_cpu_s()
    for _ in range(15):
        engine.infer(frames)
        spin(0.02)  # 0.3 s outside the runs, on the calling thread
    engine_s = engine.cpu.seconds() - engine_before
    process_s = process_cpu_s() - process_before
    outside = process_s - engine_s
    assert engine_s > 0.3, f"the runs took {engine_s:.3f} s of CPU"
    # The spinning and the staging of 60 frames; not the runs (a tick of 10 ms per thread read).
    assert 0.28 < outside < 0.5, f"engine {engine_s:.3f} s of the process's {process_s:.3f} s"


def test_engine_cpu_when_pool_thread_works_then_counted_and_never_decreases() -> None:
    cpu = EngineCpu()
    spun, stop = threading.Event(), threading.Event()

    def pool_thread() -> None:
        spin(0.2)
        spun.set()
        stop.wait(30)

    with cpu.session_threads():
        worker = threading.Thread(target=pool_thread)
        worker.start()
    assert cpu.pool_threads == 1
    assert spun.wait(30)
    while_alive = cpu.seconds()
    stop.set()
    worker.join()
    assert while_alive >= 0.18  # /proc counts in ticks of 10 ms
    assert cpu.seconds() == while_alive  # the thread is gone: what it spent stays counted


def test_engine_cpu_when_run_on_a_thread_then_its_thread_time_is_added() -> None:
    cpu = EngineCpu()
    with cpu.run():
        spin(0.05)
    spin(0.05)  # outside
    assert 0.05 <= cpu.seconds() < 0.08


def test_thread_cpu_s_when_thread_gone_then_none() -> None:
    ids = thread_ids()
    assert ids and all(thread_cpu_s(t) is not None for t in ids)
    assert thread_cpu_s(2**31 - 1) is None


def test_engine_cpu_collector_when_scraped_then_counter_of_the_seconds() -> None:
    families = list(EngineCpuCollector(lambda: 1.5).collect())
    assert [(f.name, f.samples[0].name, f.samples[0].value) for f in families] == [
        (
            "framebus_inferencer_engine_cpu_seconds",
            "framebus_inferencer_engine_cpu_seconds_total",
            1.5,
        )
    ]
