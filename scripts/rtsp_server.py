#!/usr/bin/python3
"""A live RTSP test camera on 127.0.0.1, with GStreamer's RTSP server (python3-gi).

Runs under the system interpreter, not the venv:

    /usr/bin/python3 scripts/rtsp_server.py --port 8554 --name cam1            # live pattern
    /usr/bin/python3 scripts/rtsp_server.py --port 8554 --name cam1 --file x.mp4  # H.264 MP4

The compose file's camera (deploy/rtsp-camera/Dockerfile) runs it with `--address 0.0.0.0`.

The default source is a moving test pattern encoded live with x264 (a keyframe every second, so a
reconnecting client resyncs within a second): it never ends, like a real camera. `--file` serves
an H.264 MP4 file instead, looped (the file is re-read from its start at its end). One process
serves one camera, so a test can kill and restart one camera's server alone. The line `READY`
on stdout says clients may connect.
"""

from __future__ import annotations

import argparse
import signal
import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402


def pattern_launch(width: int, height: int, fps: int) -> str:
    return (
        f"( videotestsrc is-live=true pattern=ball ! "
        f"video/x-raw,width={width},height={height},framerate={fps}/1 ! "
        f"x264enc tune=zerolatency speed-preset=ultrafast key-int-max={fps} bitrate=800 ! "
        "video/x-h264,profile=baseline ! rtph264pay name=pay0 pt=96 config-interval=1 )"
    )


def file_launch(path: str) -> str:
    # multifilesrc loop=true would feed qtdemux a second moov; decoding and re-encoding loops
    # cleanly and keeps timestamps monotonic for the client.
    return (
        f"( multifilesrc location={path} loop=true ! qtdemux ! h264parse ! avdec_h264 ! "
        "videoconvert ! x264enc tune=zerolatency speed-preset=ultrafast key-int-max=25 ! "
        "rtph264pay name=pay0 pt=96 config-interval=1 )"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--address", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--port", type=int, default=8554)
    parser.add_argument("--name", default="cam")
    parser.add_argument("--file", default=None, help="H.264 MP4 to serve instead of a pattern")
    parser.add_argument("--width", type=int, default=640)
    parser.add_argument("--height", type=int, default=360)
    parser.add_argument("--fps", type=int, default=25)
    args = parser.parse_args()

    Gst.init(None)
    server = GstRtspServer.RTSPServer()
    server.set_address(args.address)
    server.set_service(str(args.port))
    factory = GstRtspServer.RTSPMediaFactory()
    launch = (
        file_launch(args.file) if args.file else pattern_launch(args.width, args.height, args.fps)
    )
    factory.set_launch(launch)
    factory.set_shared(True)
    server.get_mount_points().add_factory(f"/{args.name}", factory)
    if server.attach(None) == 0:
        print(f"cannot listen on {args.address}:{args.port}", file=sys.stderr)
        return 1
    loop = GLib.MainLoop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        GLib.unix_signal_add(GLib.PRIORITY_DEFAULT, sig, loop.quit)
    print(f"READY rtsp://{args.address}:{args.port}/{args.name}", flush=True)
    loop.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
