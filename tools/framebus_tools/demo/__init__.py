"""`framebus demo`: the whole pipeline on generated cameras, on the local Kafka, with no GPU.

It starts the local Kafka (unless told where another broker is), creates the topics, generates
the ground-truth scene (`framebus_tools.scene`: people walking over a counting line, one standing
in a zone, a car, and a last person who then stands still until the end) as a 720p H.264 video,
an ONNX detector that finds its actors by colour, and the scene's alert rules. The cameras gate
frames on motion, so the still end costs no model runs. It runs `framebus decoder`, `framebus inferencer`, `framebus track`,
`framebus alerts`, `framebus clips` and `framebus live` as separate processes, prints each
camera's current track ids and each alert as they arrive, and prints a summary once every
published frame has its detections and tracks records, the alerts consumer has caught up with
them and their alerts have their clip records. Then the cameras loop on and every service keeps
running until Ctrl-C, unless `exit_after_summary` is set.
"""

from __future__ import annotations

from framebus_tools.demo.board import TracksBoard, alert_line, track_line
from framebus_tools.demo.inputs import (
    DWELL_S,
    SCENE_MODEL_INPUT,
    DemoInputs,
    DemoNames,
    DemoSettings,
    demo_names,
)
from framebus_tools.demo.run import run_demo

__all__ = [
    "DWELL_S",
    "SCENE_MODEL_INPUT",
    "DemoInputs",
    "DemoNames",
    "DemoSettings",
    "TracksBoard",
    "alert_line",
    "demo_names",
    "run_demo",
    "track_line",
]
