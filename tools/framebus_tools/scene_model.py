"""An ONNX detector with a YOLOv8 head that boxes each actor of a generated scene by its colour.

A real ONNX graph, run by the inferencer exactly like a user's YOLOv8 export: one anchor per
colour, whose box is the bounding box of the pixels near that colour and whose score is 1 for the
actor's class when any such pixel exists. Colours, not shapes, tell the actors apart, so two actors
of the same class that overlap stay two boxes unless class-aware NMS merges them, as it would a
real model's.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from framebus_tools.scene import RGB, SCENE_CLASS_NAMES, Scene
from framebus_tools.synthetic import mask_extent_nodes

# Per channel, on the model's 0..1 input: H.264 at crf 18 moves a flat colour by a few levels,
# while the scene's colours, background and the letterbox pad differ by 0.3 or more somewhere.
COLOUR_TOLERANCE = 0.25
OPSET = 17


def _colour_classes(
    scene_or_colors: Scene | Sequence[tuple[RGB, str]], names: Sequence[str]
) -> list[tuple[RGB, int]]:
    if isinstance(scene_or_colors, Scene):
        pairs = [(a.colour, a.cls) for a in scene_or_colors.actors]
    else:
        pairs = list(scene_or_colors)
    colours = [c for c, _ in pairs]
    if len(set(colours)) != len(colours):
        raise ValueError("each actor needs its own colour: the model tells actors apart by colour")
    for _, cls in pairs:
        if cls not in names:
            raise ValueError(f"class {cls!r} is not one of {tuple(names)}")
    return [(c, list(names).index(cls)) for c, cls in pairs]


def color_blob_model(
    scene_or_colors: Scene | Sequence[tuple[RGB, str]],
    input_size: int = 640,
    tolerance: float = COLOUR_TOLERANCE,
    names: Sequence[str] = SCENE_CLASS_NAMES,
) -> onnx.ModelProto:
    """A YOLOv8-headed detector of the scene's actors (or of (colour, class name) pairs).

    Input `images`: float32 [N, 3, S, S] in 0..1. Output `output0`: float32 [N, 4 + C, K], one
    anchor per colour k: cx, cy, w, h (input pixels) of the pixels within `tolerance` of colour k
    in every channel, and score 1 for k's class when there is any such pixel, else 0.
    """
    pairs = _colour_classes(scene_or_colors, names)
    k, c = len(pairs), len(names)
    f32 = TensorProto.FLOAT
    colours = np.array([rgb for rgb, _ in pairs], np.float32).reshape(k, 3, 1, 1) / 255
    onehot = np.zeros((c, k), np.float32)
    for i, (_, cls) in enumerate(pairs):
        onehot[cls, i] = 1.0
    inits = [
        numpy_helper.from_array(colours, "colours"),  # [K, 3, 1, 1]
        numpy_helper.from_array(onehot, "onehot"),  # [C, K]
        numpy_helper.from_array(np.asarray(tolerance, np.float32), "tol"),
        numpy_helper.from_array(np.asarray(1.0, np.float32), "one"),
        numpy_helper.from_array(np.asarray(0.5, np.float32), "half"),
        numpy_helper.from_array(np.asarray([1], np.int64), "ax1"),
    ]
    nodes = [
        helper.make_node("Unsqueeze", ["images", "ax1"], ["img5"]),  # [N, 1, 3, S, S]
        helper.make_node("Sub", ["img5", "colours"], ["diff"]),  # [N, K, 3, S, S]
        helper.make_node("Abs", ["diff"], ["absdiff"]),
        helper.make_node("ReduceMax", ["absdiff"], ["dist"], axes=[2], keepdims=0),  # [N,K,S,S]
        helper.make_node("Less", ["dist", "tol"], ["near"]),
        helper.make_node("Cast", ["near"], ["mask"], to=f32),
        helper.make_node("ReduceMax", ["mask"], ["rows"], axes=[3], keepdims=0),  # [N, K, H]
        helper.make_node("ReduceMax", ["mask"], ["cols"], axes=[2], keepdims=0),  # [N, K, W]
        helper.make_node("ReduceMax", ["rows"], ["any"], axes=[2], keepdims=0),  # [N, K]
    ]
    nodes += mask_extent_nodes(keepdims=0)  # cx, cy, w, h: [N, K]
    nodes += [
        helper.make_node("Unsqueeze", ["any", "ax1"], ["any3"]),  # [N, 1, K]
        helper.make_node("Mul", ["any3", "onehot"], ["scores"]),  # [N, C, K]
    ]
    for name in ("cx", "cy", "w", "h"):
        nodes.append(helper.make_node("Unsqueeze", [name, "ax1"], [f"{name}3"]))
    nodes.append(
        helper.make_node("Concat", ["cx3", "cy3", "w3", "h3", "scores"], ["output0"], axis=1)
    )
    graph = helper.make_graph(
        nodes,
        "color_blob_yolov8",
        [helper.make_tensor_value_info("images", f32, ["batch", 3, input_size, input_size])],
        [helper.make_tensor_value_info("output0", f32, ["batch", 4 + c, k])],
        initializer=inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    model.producer_name = "framebus.scene"
    helper.set_model_props(
        model,
        {
            "names": "{" + ", ".join(f"{i}: '{n}'" for i, n in enumerate(names)) + "}",
            "imgsz": f"[{input_size}, {input_size}]",
            "version": "1",
        },
    )
    onnx.checker.check_model(model)
    return model


def write_color_blob_model(path: Path, scene: Scene, input_size: int = 640) -> Path:
    """Save `color_blob_model(scene)` to `path` and return it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(color_blob_model(scene, input_size), str(path))
    return path
