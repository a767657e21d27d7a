"""Encode letterboxed frames and publish them keyed by camera id."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import Any

import numpy as np
import numpy.typing as npt

from framebus.codec import FrameCodec
from framebus.kafka.producer import Producer
from framebus.letterbox import Letterbox
from framebus.messages import Compression, Frame, TensorLayout

log = logging.getLogger(__name__)


class FramePublisher:
    """Publishes frames and counts delivery results per camera."""

    def __init__(self, producer: Producer, topic: str, compression: Compression) -> None:
        self._producer = producer
        self._topic = topic
        self._codec = FrameCodec()
        self._compression = compression
        self._lock = threading.Lock()
        self.delivered: Counter[str] = Counter()
        self.failed: Counter[str] = Counter()

    def publish(
        self,
        camera_id: str,
        seq: int,
        capture_ts_us: int,
        pts_s: float | None,
        orig_size: tuple[int, int],
        lb: Letterbox,
        tensor: npt.NDArray[np.uint8],
    ) -> None:
        """Encode one frame and queue it; the delivery report is counted when it arrives."""
        frame = Frame(
            camera_id=camera_id,
            seq=seq,
            capture_ts_us=capture_ts_us,
            pts_s=pts_s,
            orig_width=orig_size[0],
            orig_height=orig_size[1],
            shape=tuple(tensor.shape),
            layout=TensorLayout.HWC,
            scale=lb.scale,
            pad_x=lb.pad_x,
            pad_y=lb.pad_y,
            compression=self._compression,
            tensor=tensor.tobytes(),
        )
        self._producer.produce(
            self._topic,
            self._codec.encode(frame),
            key=camera_id,
            on_delivery=self._on_delivery(camera_id),
            block_s=30.0,
        )

    def _on_delivery(self, camera_id: str) -> Any:
        def report(err: Any, _msg: Any) -> None:
            with self._lock:
                if err is None:
                    self.delivered[camera_id] += 1
                else:
                    self.failed[camera_id] += 1
                    log.error(
                        "frame delivery failed: %s", err.str(), extra={"camera_id": camera_id}
                    )

        return report
