"""Fixtures of the fault-injection suite: the session broker, own brokers, models and videos."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest

from framebus.kafka.settings import KafkaSettings
from framebus_tools.localcluster import LocalCluster
from framebus_tools.localkafka import LocalKafka
from framebus_tools.synthetic import MovingSquare, write_bright_square_model, write_square_video
from testkit.models import yolov8_model
from tests.integration.conftest import kafka, topics  # noqa: F401 - shared fixtures
from tests.reliability.harness import SIZE, under_replicated, wait_for

VIDEO_SIZE = (320, 240)
MODEL_INPUT = 160  # decoder input size and bright-square model input in the decoder tests


@pytest.fixture(scope="session")
def box_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A YOLOv8-layout model of input SIZE that finds one box of class `thing` in every frame."""
    rows = np.zeros((4 + 2, 3), np.float32)
    rows[:, 0] = [32, 32, 16, 16, 0.9, 0.0]
    path = tmp_path_factory.mktemp("rel-models") / "box.onnx"
    onnx.save(yolov8_model(rows, input_size=SIZE, names=["thing", "other"]), str(path))
    return path


@pytest.fixture(scope="session")
def square_model_160(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bright-square detector at the decoder tests' input size."""
    return write_bright_square_model(
        tmp_path_factory.mktemp("rel-models") / "square-160.onnx", MODEL_INPUT
    )


@pytest.fixture(scope="session")
def small_video(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """4 s of 320x240 H.264 at 25 fps with a moving bright square."""
    w, h = VIDEO_SIZE
    return write_square_video(
        tmp_path_factory.mktemp("rel-media") / "small.mp4",
        MovingSquare(width=w, height=h, side=40, frames=100),
    )


def own_broker_fixture(port: int) -> Iterator[LocalKafka]:
    """A fresh broker of a test's own on `port` (its controller on port + 1), wiped afterwards."""
    broker = LocalKafka(port=port, heap="512m")
    broker.stop()
    broker.wipe()
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()
        broker.wipe()


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    """A fresh three-broker cluster for one module, wiped afterwards.

    Brokers on FRAMEBUS_TEST_CLUSTER_PORT..+2 (default 24092), their controllers on the next three.
    """
    port = int(os.environ.get("FRAMEBUS_TEST_CLUSTER_PORT", "24092"))
    cluster = LocalCluster(base_port=port, size=3)
    cluster.stop()
    cluster.wipe()
    cluster.start()
    try:
        yield cluster
    finally:
        cluster.stop()
        cluster.wipe()


@pytest.fixture
def cluster_kafka(cluster: LocalCluster) -> KafkaSettings:
    """Settings of the cluster, with every node up and every replica in sync."""
    cluster.start()  # a node an earlier test left down comes back
    settings = KafkaSettings(bootstrap_servers=cluster.bootstrap)
    wait_for(lambda: not under_replicated(settings), 120, "every replica in sync")
    return settings
