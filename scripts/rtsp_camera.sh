#!/bin/sh
# The sample camera's entry point (deploy/rtsp-camera/Dockerfile): /media/sample.mp4 looped when
# it is there, else a live test pattern, at rtsp://<address>:8554/sample.
set -eu
if [ -f /media/sample.mp4 ]; then
    exec python3 /usr/local/bin/rtsp_server.py --address 0.0.0.0 --name sample \
        --file /media/sample.mp4
fi
exec python3 /usr/local/bin/rtsp_server.py --address 0.0.0.0 --name sample --width 1280 \
    --height 720
