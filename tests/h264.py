"""H.264 byte streams in the two framings a clip meets: Annex-B (RTSP, TS) and length-prefixed (MP4).

MP4 stores each NAL unit behind its 4-byte length; a stream received over RTSP separates them by
start codes. Remuxing to MP4 changes that framing and nothing else, so a test compares packets
after putting them in the same framing.
"""

from __future__ import annotations

import re

START_CODE = re.compile(b"\x00\x00\x01")


def length_prefixed(annexb: bytes) -> bytes:
    """Annex-B packet bytes (NAL units after 3- or 4-byte start codes) as MP4's 4-byte lengths."""
    starts = [m.end() for m in START_CODE.finditer(annexb)]
    out = bytearray()
    for n, start in enumerate(starts):
        end = len(annexb) if n + 1 == len(starts) else starts[n + 1] - 3
        unit = annexb[start:end]
        if n + 1 < len(starts) and unit.endswith(b"\x00"):
            unit = unit[:-1]  # the leading zero of the next 4-byte start code
        out += len(unit).to_bytes(4, "big") + unit
    return bytes(out)
