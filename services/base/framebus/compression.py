"""Compression of frame tensor bytes on the wire: none, LZ4 frame format or Zstandard frame format.

The decoder compresses (its choice is the `compression` field of each frame record); the
inferencer calls `decompress(frame.compression, frame.tensor)` before reshaping the tensor.
Both codecs release the GIL, so many camera threads compress in parallel.
"""

from __future__ import annotations

import threading

import lz4.frame
import zstandard

from framebus.errors import CodecError
from framebus.messages import Compression

# Level 1 for both: frames are short-lived and the decoder's CPU is the scarce resource; higher
# levels cost several times the CPU for a few percent less size on video frames.
ZSTD_LEVEL = 1
LZ4_LEVEL = 0  # lz4.frame's fast default

_local = threading.local()


def _zstd_compressor() -> zstandard.ZstdCompressor:
    # zstandard contexts are not thread-safe; one per thread, reused across frames.
    ctx = getattr(_local, "zc", None)
    if ctx is None:
        ctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
        _local.zc = ctx
    return ctx


def _zstd_decompressor() -> zstandard.ZstdDecompressor:
    ctx = getattr(_local, "zd", None)
    if ctx is None:
        ctx = zstandard.ZstdDecompressor()
        _local.zd = ctx
    return ctx


def compress(compression: Compression, data: bytes | bytearray | memoryview) -> bytes:
    """Compress tensor bytes with `compression`; NONE returns an immutable copy."""
    if compression is Compression.NONE:
        return bytes(data)
    if compression is Compression.LZ4:
        return bytes(lz4.frame.compress(data, compression_level=LZ4_LEVEL))
    if compression is Compression.ZSTD:
        return bytes(_zstd_compressor().compress(data))
    raise CodecError(f"unknown compression {compression!r}")


def claimed_bytes(compression: Compression, data: bytes | memoryview) -> int | None:
    """The content size a compressed tensor's header claims; None when it claims none."""
    if compression is Compression.LZ4:
        return int(lz4.frame.get_frame_info(data)["content_size"]) or None
    if compression is Compression.ZSTD:
        size = int(zstandard.frame_content_size(data))
        return size if size >= 0 else None
    return None


def decompress(
    compression: Compression, data: bytes | memoryview, max_bytes: int | None = None
) -> bytes | memoryview:
    """Undo `compress`: the raw tensor bytes of a frame record; CodecError when corrupt.

    NONE returns `data` itself (a view stays a view: no copy of the tensor). `max_bytes` is the
    largest tensor the caller can use: both codecs allocate the content size a header claims
    before decompressing, so a corrupt size field (a terabyte) would raise MemoryError, not
    CodecError; a claim above `max_bytes` is refused before anything is allocated.
    """
    if compression is Compression.NONE:
        return data
    try:
        claimed = claimed_bytes(compression, data) if max_bytes is not None else None
        if claimed is not None and max_bytes is not None and claimed > max_bytes:
            raise CodecError(
                f"corrupt {compression.value} tensor ({len(data)} bytes): its header claims "
                f"{claimed} bytes, more than the {max_bytes} bytes of a frame the model takes; "
                "the frame must be dead-lettered"
            )
        if compression is Compression.LZ4:
            return bytes(lz4.frame.decompress(data))
        if compression is Compression.ZSTD:
            # The frame header written by compress() carries the content size.
            return bytes(_zstd_decompressor().decompress(data))
    except (RuntimeError, zstandard.ZstdError) as exc:
        raise CodecError(
            f"corrupt {compression.value} tensor ({len(data)} bytes): {exc}; "
            "the frame must be dead-lettered"
        ) from exc
    raise CodecError(f"unknown compression {compression!r}")
