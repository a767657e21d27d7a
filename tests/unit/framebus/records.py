"""One record of each wire type with no field at its default, for the codec and schema tests."""

from __future__ import annotations

from framebus.messages import (
    Alert,
    Box,
    ColourMatrix,
    ColourRange,
    Compression,
    CrossingDirection,
    Detections,
    Frame,
    FrameStatus,
    PixelFormat,
    RuleType,
    TensorLayout,
    TrackedObject,
    Tracks,
    ZoneAnchor,
)

BOX_CAR = Box(x1=10.5, y1=20.25, x2=110.0, y2=220.5, class_id=2, class_name="car", score=0.75)
BOX_PERSON = Box(x1=0.0, y1=1.0, x2=2.5, y2=3.0, class_id=0, class_name="person", score=0.5)
FRAME = Frame(
    camera_id="cam-1",
    seq=42,
    capture_ts_us=1_700_000_000_123_456,
    orig_width=1920,
    orig_height=1080,
    shape=(4, 4),  # I420: a 4 x 4 Y plane, then 2 x 2 U and V planes
    layout=TensorLayout.CHW,
    scale=1 / 3,
    pad_x=1,
    pad_y=2,
    tensor=bytes(range(24)),
    compression=Compression.ZSTD,
    pts_s=1.68,
    pixel_format=PixelFormat.I420,
    colour_matrix=ColourMatrix.BT709,
    colour_range=ColourRange.FULL,
)
DETECTIONS = Detections(
    camera_id="cam-1",
    seq=42,
    capture_ts_us=1_700_000_000_123_456,
    status=FrameStatus.DROPPED_STALE,
    model_name="yolo",
    model_version="8n-2",
    boxes=(BOX_CAR, BOX_PERSON),
    reason="stale",
    orig_width=1920,
    orig_height=1080,
    queue_wait_ms=3.5,
    inference_ms=12.25,
    batch_size=8,
    e2e_latency_ms=40.5,
    frame_partition=3,
    frame_offset=1234,
)
TRACKS = Tracks(
    camera_id="cam-1",
    seq=42,
    capture_ts_us=1_700_000_000_123_456,
    status=FrameStatus.INFERRED,
    objects=(
        TrackedObject("cam-1/1700000000/7", BOX_CAR, 1_700_000_000_000_001, True, 4),
        TrackedObject("cam-1/1700000000/8", BOX_PERSON, 1_700_000_000_100_001, False, 1),
    ),
    missing_before=2,
    model_name="yolo",
    model_version="8n-2",
    orig_width=1920,
    orig_height=1080,
    e2e_latency_ms=41.5,
    tracked_at_us=1_700_000_000_223_456,
    detections_partition=1,
    detections_offset=99,
)
ALERT = Alert(
    rule="door-line",
    camera_id="cam-1",
    seq=42,
    capture_ts_us=1_700_000_000_123_456,
    fired_at_us=1_700_000_000_223_456,
    consecutive_frames=5,
    zone=((0.0, 0.0), (100.0, 0.0), (100.0, 50.5)),
    anchor=ZoneAnchor.CENTER,
    boxes=(BOX_CAR,),
    model_name="yolo",
    model_version="8n-2",
    detections_partition=1,
    detections_offset=99,
    rule_type=RuleType.LINE_CROSSING,
    track_id="cam-1/1700000000/7",
    direction=CrossingDirection.OUT,
    measure=2.5,
    counts=(("car:IN", 3), ("car:OUT", 1)),
)
