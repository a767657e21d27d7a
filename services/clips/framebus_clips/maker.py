"""One alert's clip: read its video and frame from Kafka, write the MP4 and JPEG, say what became.

The decisions are `framebus_clips.window`'s and `framebus_clips.snapshot`'s; this module reads,
writes and counts. Every alert gets a `Clip` value: WRITTEN, or why not (VIDEO_AGED_OUT,
NO_VIDEO, FAILED), never a silent gap.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable

from framebus.codec import FrameCodec, VideoPacketCodec
from framebus.errors import CodecError
from framebus.messages import Alert, Clip, ClipStatus, Frame, VideoPacket
from framebus_clips.reading import CameraRecords, Idle
from framebus_clips.remux import ClipWriteError, write_mp4
from framebus_clips.settings import ClipsSettings
from framebus_clips.snapshot import pick_frame, snapshot_jpeg
from framebus_clips.stats import ClipsStats
from framebus_clips.store import JPEG_TYPE, MP4_TYPE, ClipStore, DirectoryStore, object_key
from framebus_clips.window import (
    ClipWindow,
    NoClip,
    Selection,
    missing_video,
    select_packets,
)

log = logging.getLogger(__name__)

US_PER_S = 1_000_000
# A read past its wait has this long more to reach the partition's end (a busy broker). With
# `MAX_ALERT_WAIT_S` and the snapshot's read, one alert stays inside the loop's heartbeat allowance.
READ_BUDGET_S = 15.0


def _us(seconds: float) -> int:
    return round(seconds * US_PER_S)


class ClipMaker:
    """Makes the clip of one alert at a time.

    ClipStoreError (the store refused an object after its retries) is raised, never turned
    into a record: the alert is then not committed, and the restarted service retries it.
    """

    def __init__(
        self,
        settings: ClipsSettings,
        reader: CameraRecords,
        stats: ClipsStats,
        clock: Callable[[], float] = time.time,
        store: ClipStore | None = None,
    ) -> None:
        self.settings = settings
        self._reader = reader
        self._store = store or DirectoryStore(settings.clips_dir)
        self._stats = stats
        self._clock = clock
        self._video = VideoPacketCodec()
        self._frames = FrameCodec()

    def make(self, alert: Alert, partition: int, offset: int) -> Clip:
        """The alert's clip record, its files written (or why there are none)."""
        s = self.settings
        window = ClipWindow(alert.capture_ts_us, _us(s.pre_roll_s), _us(s.post_roll_s))
        packets, absent = self._read_video(alert.camera_id, window)
        chosen = absent or select_packets(packets, window)
        clip = Clip(
            alert.rule, alert.camera_id, alert.seq, alert.capture_ts_us, alert.track_id,
            partition, offset, ClipStatus.WRITTEN,
        )  # fmt: skip
        clip = self._write_clip(clip, packets, chosen, object_key(alert, ".mp4"))
        snapshot_uri, note = self._write_snapshot(alert, object_key(alert, ".jpg"))
        notes = [n for n in (clip.reason, note) if n]
        return dataclasses.replace(
            clip,
            reason="; ".join(notes) or None,
            snapshot_uri=snapshot_uri,
            written_at_us=_us(self._clock()),
        )

    def _write_clip(
        self, clip: Clip, packets: list[VideoPacket], chosen: Selection | NoClip, key: str
    ) -> Clip:
        if isinstance(chosen, NoClip):
            return dataclasses.replace(clip, status=chosen.status, reason=chosen.reason)
        picked = [packets[i] for i in chosen.indices]
        path = self._store.staging_path(key)
        try:
            size = write_mp4(picked, path)
        except ClipWriteError as exc:
            self._stats.errors["write"] += 1
            log.error("clip of %s#%d not written: %s", clip.camera_id, clip.seq, exc)
            return dataclasses.replace(clip, status=ClipStatus.FAILED, reason=str(exc))
        start, end = picked[0].capture_ts_us, picked[-1].capture_ts_us
        return dataclasses.replace(
            clip,
            reason=chosen.reason,
            uri=self._store.put_file(key, path, MP4_TYPE),
            start_ts_us=start,
            end_ts_us=end,
            duration_s=(end - start) / US_PER_S,
            size_bytes=size,
        )

    def _read_video(
        self, camera_id: str, window: ClipWindow
    ) -> tuple[list[VideoPacket], NoClip | None]:
        """The camera's packets from before the window to its end (waiting for them), or why none."""
        s = self.settings
        topic = s.topics.video_topic
        partition = self._reader.partition_of(topic, camera_id)
        if partition is None:
            return [], NoClip(ClipStatus.NO_VIDEO, f"the video topic {topic} does not exist")
        give_up_us = window.end_us + _us(s.max_wait_s)
        wait_s = max(0.0, give_up_us / US_PER_S - self._clock())
        deadline = time.monotonic() + wait_s + READ_BUDGET_S
        from_ms = (window.start_us - _us(s.gop_margin_s)) // 1000
        packets: list[VideoPacket] = []
        for item in self._reader.values(topic, partition, camera_id, from_ms, deadline):
            if isinstance(item, Idle):
                if _us(self._clock()) >= give_up_us:
                    break
                continue
            packet = self._decode_packet(item[0])
            if packet is None:
                continue
            packets.append(packet)
            if packet.capture_ts_us >= window.end_us:
                break
        if packets:
            return packets, None
        earliest_ms = self._reader.earliest_ms(topic, partition)
        earliest_us = None if earliest_ms is None else earliest_ms * 1000
        now_us = _us(self._clock())
        return [], missing_video(window, earliest_us, now_us, s.video_retention_ms * 1000)

    def _decode_packet(self, value: bytes) -> VideoPacket | None:
        try:
            return self._video.decode(value)
        except CodecError as exc:
            # Not this service's input to dead-letter: counted, and the clip says if it is short.
            self._stats.errors["undecodable_video"] += 1
            log.error("skipping an undecodable video packet: %s", exc)
            return None

    def _write_snapshot(self, alert: Alert, key: str) -> tuple[str | None, str | None]:
        """(URI of the JPEG, None), or (None, why there is none)."""
        frame = self._find_frame(alert)
        if frame is None:
            self._stats.snapshots["missing"] += 1
            return None, "no snapshot: the alert's frame is not on the frames topic"
        try:
            jpeg = snapshot_jpeg(frame, alert.boxes, self.settings.jpeg_quality)
            uri = self._store.put_bytes(key, jpeg, JPEG_TYPE)
        except (CodecError, OSError) as exc:
            self._stats.snapshots["missing"] += 1
            self._stats.errors["write"] += 1
            log.error("snapshot of %s#%d not written: %s", alert.camera_id, alert.seq, exc)
            return None, f"no snapshot: {exc}"
        self._stats.snapshots["written"] += 1
        return uri, None

    def _find_frame(self, alert: Alert) -> Frame | None:
        """The alert's frame, or the last full frame before it (a still frame has no pixels).

        Read first from the alert's capture time: a frame's Kafka timestamp (when it was
        produced) is at or after its capture, so that read starts at or before the alert's frame
        and takes a few records. Only when it finds no full frame is `snapshot_search_s` read.
        """
        topic = self.settings.topics.frames_topic
        partition = self._reader.partition_of(topic, alert.camera_id)
        if partition is None:
            return None
        deadline = time.monotonic() + READ_BUDGET_S
        alert_ms = alert.capture_ts_us // 1000
        search_ms = (alert.capture_ts_us - _us(self.settings.snapshot_search_s)) // 1000
        best = self._scan_frames(alert, topic, partition, alert_ms, deadline)
        if best is None and search_ms < alert_ms:
            best = self._scan_frames(alert, topic, partition, search_ms, deadline)
        return best

    def _scan_frames(
        self, alert: Alert, topic: str, partition: int, from_ms: int, deadline: float
    ) -> Frame | None:
        """The best frame for the alert among the camera's frames from `from_ms` to the alert's."""
        best: Frame | None = None
        for item in self._reader.values(topic, partition, alert.camera_id, from_ms, deadline):
            if isinstance(item, Idle):
                break
            try:
                frame = self._frames.decode(item[0])
            except CodecError as exc:
                self._stats.errors["undecodable_frame"] += 1
                log.error("skipping an undecodable frame: %s", exc)
                continue
            if frame.capture_ts_us > alert.capture_ts_us:
                break
            # Only the best candidate so far is kept: frames are large.
            best = pick_frame([f for f in (best, frame) if f], alert.seq, alert.capture_ts_us)
            if best is not None and best.seq == alert.seq and not best.still:
                break
        return best
