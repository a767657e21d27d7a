"""End-to-end CPU per camera-second with the decoder's motion gate on and off, on a still scene.

The scene is `framebus_tools.scene.still_scene` (46 s of 1280x720: something moves in 10 s of
it). Per round, gated and ungated take turns (their order alternating): fresh topics;
`framebus inferencer` (the scene's colour-blob YOLOv8-headed detector at 320x320, CPU provider)
started and ready; `framebus decoder` on C cameras that each play the scene's video at --fps,
decoded as fast as the decoder goes (not paced, so the round is short; the gate's clock is the
video's); the inferencer stops on idle once every frame is answered. CPU, from /proc and the
decoder's rusage: the decoder's whole run, the inferencer's and the broker's from the decoder's
start to the inferencer's exit. Each is divided by the camera-seconds of video (C x 46 s).

Printed: per side and round, ms of CPU per camera-second (decoder, inferencer, broker, total),
model runs and frames; the medians; gated / ungated per round and its median.

    .venv/bin/python -m bench.motion_cost [--cameras 4] [--fps 5] [--runs 3]
        [--bootstrap 127.0.0.1:29092]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import yaml

from bench.benchkit import (
    add_bootstrap_argument,
    broker_pids,
    delete_topics,
    fresh_topics,
    inferencer_env,
    parser_for,
    print_header,
    print_median_ratio,
    process_usage,
    ratios,
    read_detections,
)
from framebus.codec import DetectionsCodec
from framebus.kafka.settings import KafkaSettings
from framebus.messages import FrameStatus
from framebus.topology import TopicSettings
from framebus_tools.process import ServiceProcess
from framebus_tools.scene import Scene, write_scene_video
from framebus_tools.scene_model import write_color_blob_model
from framebus_tools.scenes import still_scene

INPUT_SIZE = 320
READY_LINE = "warm-up done"


@dataclass(frozen=True)
class Round:
    """One pipeline run's CPU seconds and frames."""

    gated: bool
    decoder_s: float
    inferencer_s: float
    broker_s: float
    frames: int
    model_runs: int
    camera_seconds: float

    def per_camera_second_ms(self, cpu_s: float) -> float:
        """CPU seconds as milliseconds per camera-second of video."""
        return cpu_s * 1000 / self.camera_seconds

    @property
    def total_s(self) -> float:
        """Decoder + inferencer + broker."""
        return self.decoder_s + self.inferencer_s + self.broker_s

    def line(self) -> str:
        """The round's figures, per camera-second."""
        ms = self.per_camera_second_ms
        return (
            f"{'gated  ' if self.gated else 'ungated'}: decoder {ms(self.decoder_s):6.1f}, "
            f"inferencer {ms(self.inferencer_s):6.1f}, broker {ms(self.broker_s):6.1f}, "
            f"total {ms(self.total_s):6.1f} ms CPU per camera-second; "
            f"model runs {self.model_runs} of {self.frames} frames"
        )


def scene_video(scene: Scene, folder: Path) -> Path:
    """The scene's video, generated once per scene (its digest in the name)."""
    digest = hashlib.sha256(repr(scene).encode()).hexdigest()[:8]
    video = folder / f"still-scene-{digest}-720p.mp4"
    if not video.exists():
        print(f"generating {video} ...", flush=True)
        write_scene_video(video, scene)
    return video


def cameras_file(path: Path, video: Path, cameras: int, fps: float, gated: bool) -> Path:
    """C cameras on the same video, unpaced, the gate on or off."""
    cams = [
        {"id": f"cam-{i}", "url": str(video), "target_fps": fps, "motion": {"enabled": gated}}
        for i in range(cameras)
    ]
    path.write_text(yaml.safe_dump({"cameras": cams}), encoding="utf-8")
    return path


def decoder_env(kafka: KafkaSettings, names: TopicSettings, cameras: Path) -> dict[str, str]:
    """The decoder's settings: the cameras file, the detector's input size."""
    return {
        "FRAMEBUS_BOOTSTRAP_SERVERS": kafka.bootstrap_servers,
        **names.env(),
        "FRAMEBUS_CAMERAS_FILE": str(cameras),
        "FRAMEBUS_CAMERAS_RELOAD_S": "0",
        "FRAMEBUS_INPUT_WIDTH": str(INPUT_SIZE),
        "FRAMEBUS_INPUT_HEIGHT": str(INPUT_SIZE),
        "FRAMEBUS_LOG_LEVEL": "warning",
    }


def run_round(
    kafka: KafkaSettings,
    workdir: Path,
    video: Path,
    model: Path,
    args: argparse.Namespace,
    gated: bool,
) -> Round:
    """One pipeline run on fresh topics; its CPU by process."""
    cameras, fps = args.cameras, args.fps
    names = fresh_topics(kafka, partitions=cameras, prefix="bench-motion")
    try:
        env = inferencer_env(kafka, names, model, max_batch=8)
        env.update({"FRAMEBUS_FRAME_FORMAT": "i420", "FRAMEBUS_LOG_LEVEL": "info"})
        inferencer = ServiceProcess("inferencer", env, workdir / "inferencer.log")
        deadline = time.monotonic() + 120
        while READY_LINE not in inferencer.text():
            if inferencer.exit_code() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"inferencer not ready:\n{inferencer.text()[-2000:]}")
            time.sleep(0.2)
        brokers = broker_pids(kafka.bootstrap_servers)
        broker0 = sum(u[0] for p in brokers if (u := process_usage(p)) is not None)
        inferencer0 = process_usage(inferencer.pid)
        assert inferencer0 is not None
        file = cameras_file(workdir / "cameras.yaml", video, cameras, fps, gated)
        decoder = ServiceProcess("decoder", decoder_env(kafka, names, file), workdir / "dec.log")
        _, status, usage = os.wait4(decoder.pid, 0)
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"decoder failed:\n{decoder.text()[-2000:]}")
        decoder_s = usage.ru_utime + usage.ru_stime
        last = inferencer0
        broker1 = broker0
        while inferencer.exit_code() is None:  # it stops after a few idle seconds
            last = process_usage(inferencer.pid) or last
            broker1 = sum(u[0] for p in brokers if (u := process_usage(p)) is not None)
            time.sleep(0.2)
        records = read_detections(kafka, names.detections_topic, 1)
        statuses = [DetectionsCodec().decode(m.value()).status for m in records]
        return Round(
            gated=gated,
            decoder_s=decoder_s,
            inferencer_s=last[0] - inferencer0[0],
            broker_s=broker1 - broker0,
            frames=len(statuses),
            model_runs=sum(s is FrameStatus.INFERRED for s in statuses),
            camera_seconds=cameras * still_scene().duration_s,
        )
    finally:
        delete_topics(kafka, names)


def main() -> int:
    parser = parser_for(__doc__)
    parser.add_argument("--cameras", type=int, default=4, help="cameras playing the scene")
    parser.add_argument("--fps", type=float, default=5.0, help="frames sampled per second")
    parser.add_argument("--runs", type=int, default=3, help="rounds of each side (median)")
    add_bootstrap_argument(parser)
    args = parser.parse_args()
    print_header()
    kafka = KafkaSettings(bootstrap_servers=args.bootstrap)
    scene = still_scene()
    cache = Path(tempfile.gettempdir()) / "framebus-bench"
    cache.mkdir(exist_ok=True)
    video = scene_video(scene, cache)
    with tempfile.TemporaryDirectory(prefix=f"motion-{uuid.uuid4().hex[:6]}-") as tmp:
        workdir = Path(tmp)
        model = write_color_blob_model(workdir / "colour-blobs.onnx", scene, INPUT_SIZE)
        gated: list[Round] = []
        ungated: list[Round] = []
        for run in range(args.runs):
            for side in (True, False) if run % 2 == 0 else (False, True):
                result = run_round(kafka, workdir, video, model, args, side)
                (gated if side else ungated).append(result)
                print(f"round {run + 1} {result.line()}", flush=True)
    for label, rounds in (("gated", gated), ("ungated", ungated)):
        med = statistics.median
        ms = rounds[0].per_camera_second_ms
        print(
            f"median {label}: decoder {ms(med(r.decoder_s for r in rounds)):.1f}, inferencer "
            f"{ms(med(r.inferencer_s for r in rounds)):.1f}, broker "
            f"{ms(med(r.broker_s for r in rounds)):.1f}, total "
            f"{ms(med(r.total_s for r in rounds)):.1f} ms CPU per camera-second; model runs "
            f"{med(r.model_runs for r in rounds):.0f} of {med(r.frames for r in rounds):.0f}"
        )
    for part in ("decoder_s", "inferencer_s", "broker_s", "total_s"):
        print_median_ratio(
            f"gated / ungated, {part.removesuffix('_s')}",
            ratios([getattr(r, part) for r in gated], [getattr(r, part) for r in ungated]),
        )
    print_median_ratio(
        "gated / ungated, model runs",
        ratios([r.model_runs for r in gated], [r.model_runs for r in ungated]),
        goal=None,
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
