"""Generated test material: a video with a known moving object and an ONNX model that finds it.

Nothing is downloaded: the demo and the tests make both here. The model is a real ONNX graph with
the output layout of a YOLOv8 export (`[N, 4 + classes, anchors]`, boxes as cx, cy, w, h in input
pixels), so the inferencer runs it exactly as it would run a user's YOLOv8 model.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import av
import numpy as np
import numpy.typing as npt
import onnx
from onnx import TensorProto, helper

from framebus_tools.onnxedit import to_float16, with_static_batch

SQUARE_CLASS_NAMES = ("square", "other")
BACKGROUND_LEVEL = 24
SQUARE_LEVEL = 235


@dataclass(frozen=True)
class MovingSquare:
    """Where the bright square is drawn in each frame of a generated video."""

    width: int = 1920
    height: int = 1080
    side: int = 180
    frames: int = 120
    fps: int = 25
    phase: int = 0  # frame offset, so several cameras show different positions

    def box(self, index: int) -> tuple[int, int, int, int]:
        """The square's (x1, y1, x2, y2) in pixels in frame `index` (x2, y2 exclusive)."""
        i = index + self.phase
        span_x = self.width - self.side
        span_y = self.height - self.side
        # A triangle wave on each axis keeps the square inside the frame for any length.
        x = _triangle(i * 17, span_x)
        y = _triangle(i * 11 + span_y // 3, span_y)
        x, y = x - x % 2, y - y % 2  # even edges survive 4:2:0 chroma subsampling cleanly
        return x, y, x + self.side, y + self.side

    def render(self, index: int, out: npt.NDArray[np.uint8] | None = None) -> npt.NDArray[np.uint8]:
        """The RGB frame `index` as a (height, width, 3) uint8 array."""
        if out is None:
            out = np.empty((self.height, self.width, 3), dtype=np.uint8)
        out.fill(BACKGROUND_LEVEL)
        x1, y1, x2, y2 = self.box(index)
        out[y1:y2, x1:x2] = SQUARE_LEVEL
        return out


def _triangle(t: int, span: int) -> int:
    period = 2 * span
    t %= period
    return t if t <= span else period - t


def write_square_video(
    path: Path, scene: MovingSquare, crf: int = 18, gop: int | None = None
) -> Path:
    """Encode the scene to an H.264 MP4 file with PyAV's bundled libx264."""
    buffer = np.empty((scene.height, scene.width, 3), dtype=np.uint8)
    frames = (scene.render(i, buffer) for i in range(scene.frames))
    return write_h264(path, scene.width, scene.height, scene.fps, frames, crf, gop)


def write_h264(
    path: Path,
    width: int,
    height: int,
    fps: int,
    frames: Iterable[npt.NDArray[np.uint8]],
    crf: int = 18,
    gop: int | None = None,
) -> Path:
    """Encode RGB frames (height, width, 3) to an H.264 MP4 file with PyAV's bundled libx264.

    `gop`: frames from one keyframe to the next (None: libx264's default, 250).
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with av.open(str(path), mode="w") as container:
        stream = container.add_stream("libx264", rate=fps)
        stream.width = width
        stream.height = height
        stream.pix_fmt = "yuv420p"
        stream.options = {"crf": str(crf), "preset": "ultrafast", "tune": "zerolatency"}
        if gop is not None:
            # A fixed keyframe interval: no scene-cut keyframes in between.
            stream.options |= {"g": str(gop), "keyint_min": str(gop), "sc_threshold": "0"}
        for rgb in frames:
            for packet in stream.encode(av.VideoFrame.from_ndarray(rgb, format="rgb24")):
                container.mux(packet)
        for packet in stream.encode():
            container.mux(packet)
    return path


def mask_extent_nodes(keepdims: int) -> list[onnx.NodeProto]:
    """Nodes from a mask's `rows` and `cols` to its bounding box's `cx`, `cy`, `w`, `h` in pixels.

    `rows` and `cols` are 1 where a row / column has a mask pixel, along axis 2. The graph needs the float scalars `one` and `half` as initializers.
    """
    nodes: list[onnx.NodeProto] = []
    for name, src, last in (
        ("y1", "rows", 0),
        ("y2", "rows", 1),
        ("x1", "cols", 0),
        ("x2", "cols", 1),
    ):
        nodes += [
            helper.make_node(
                "ArgMax", [src], [f"{name}_i"], axis=2, keepdims=keepdims, select_last_index=last
            ),
            helper.make_node("Cast", [f"{name}_i"], [f"{name}_f"], to=TensorProto.FLOAT),
        ]
    return [
        *nodes,
        helper.make_node("Add", ["x2_f", "one"], ["x2e"]),  # last index + 1: the exclusive edge
        helper.make_node("Add", ["y2_f", "one"], ["y2e"]),
        helper.make_node("Add", ["x1_f", "x2e"], ["sx"]),
        helper.make_node("Mul", ["sx", "half"], ["cx"]),
        helper.make_node("Add", ["y1_f", "y2e"], ["sy"]),
        helper.make_node("Mul", ["sy", "half"], ["cy"]),
        helper.make_node("Sub", ["x2e", "x1_f"], ["w"]),
        helper.make_node("Sub", ["y2e", "y1_f"], ["h"]),
    ]


def bright_square_model(
    input_size: int = 640, threshold: float = 0.5, opset: int = 17
) -> onnx.ModelProto:
    """An ONNX detector with a YOLOv8 output head that boxes the pixels brighter than `threshold`.

    Input `images`: float32 [N, 3, S, S] in 0..1, as a YOLOv8 export expects. Output `output0`:
    float32 [N, 6, 2]: anchor 0 is the bounding box of all bright pixels with score 1 for class 0
    (`square`) when any pixel is bright; anchor 1 is a copy shifted by 2 px with score 0.8, which
    class-aware NMS must suppress. Class 1 (`other`) always scores 0.
    """
    f32 = TensorProto.FLOAT
    nodes = [
        helper.make_node("ReduceMean", ["images"], ["gray"], axes=[1], keepdims=1),
        helper.make_node("Greater", ["gray", "thr"], ["bright"]),
        helper.make_node("Cast", ["bright"], ["mask"], to=f32),
        helper.make_node("ReduceMax", ["mask"], ["rows"], axes=[3], keepdims=0),  # [N,1,H]
        helper.make_node("ReduceMax", ["mask"], ["cols"], axes=[2], keepdims=0),  # [N,1,W]
        helper.make_node("ReduceMax", ["rows"], ["any"], axes=[2], keepdims=1),  # [N,1,1]
    ]
    nodes += mask_extent_nodes(keepdims=1)  # cx, cy, w, h: [N,1,1]
    nodes += [
        helper.make_node("Mul", ["any", "zero"], ["none"]),
        helper.make_node("Mul", ["any", "dup_score"], ["any_dup"]),
        helper.make_node("Add", ["cx", "two"], ["cx_dup"]),
        helper.make_node("Add", ["cy", "two"], ["cy_dup"]),
    ]
    rows = [
        ("cx", "cx_dup"),
        ("cy", "cy_dup"),
        ("w", "w"),
        ("h", "h"),
        ("any", "any_dup"),
        ("none", "none"),
    ]
    for r, (a0, a1) in enumerate(rows):
        nodes.append(helper.make_node("Concat", [a0, a1], [f"row{r}"], axis=2))  # [N,1,2]
    nodes.append(
        helper.make_node("Concat", [f"row{r}" for r in range(len(rows))], ["output0"], axis=1)
    )
    scalars = {"thr": threshold, "one": 1.0, "half": 0.5, "zero": 0.0, "dup_score": 0.8, "two": 2.0}
    graph = helper.make_graph(
        nodes,
        "bright_square_yolov8",
        [helper.make_tensor_value_info("images", f32, ["batch", 3, input_size, input_size])],
        [helper.make_tensor_value_info("output0", f32, ["batch", 4 + len(SQUARE_CLASS_NAMES), 2])],
        initializer=[helper.make_tensor(k, f32, [], [v]) for k, v in scalars.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    names = ", ".join(f"{i}: '{n}'" for i, n in enumerate(SQUARE_CLASS_NAMES))
    helper.set_model_props(
        model,
        {"names": "{" + names + "}", "imgsz": f"[{input_size}, {input_size}]", "version": "1"},
    )
    model.producer_name = "framebus.synthetic"
    onnx.checker.check_model(model)
    return model


def write_bright_square_model(
    path: Path, input_size: int = 640, *, static_batch: int | None = None, float16: bool = False
) -> Path:
    """Save `bright_square_model` to `path` and return it.

    `static_batch` fixes the batch dimension (an export without `dynamic=True`); `float16` makes
    the model compute in float16 with float16 input and output (an export with `half=True`).
    """
    model = bright_square_model(input_size)
    if static_batch is not None:
        model = with_static_batch(model, static_batch)
    if float16:
        model = to_float16(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(path))
    return path
