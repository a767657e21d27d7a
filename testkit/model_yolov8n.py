"""A YOLOv8n-sized ONNX detector with random weights, and a count of its convolution GFLOPs.

`yolov8n_like_model` has YOLOv8n's layer structure, widths and op mix (Conv + SiLU, C2f
split/concat blocks, SPPF max-pools, an FPN/PAN neck with Resize, a decoupled head) with random
weights, built with the `onnx` package (nothing is downloaded): about 8.7 GFLOPs at 640x640, for
benchmarks. `_Builder` appends its layers; `conv_gflops` measures any model's convolution cost per
image from ONNX shape inference.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper, shape_inference

from testkit.model_heads import finish_model


class _Builder:
    """Appends YOLOv8-style layers with random weights to a node list."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.inits: list[onnx.TensorProto] = []
        self.count = 0

    def _name(self, kind: str) -> str:
        self.count += 1
        return f"{kind}{self.count}"

    def conv(
        self, x: str, cin: int, cout: int, k: int = 1, s: int = 1, act: bool = True, bias: float = 0
    ) -> str:
        name = self._name("conv")
        std = np.sqrt(2.0 / (cin * k * k))
        w = (self.rng.standard_normal((cout, cin, k, k)) * std).astype(np.float32)
        self.inits += [
            numpy_helper.from_array(w, f"{name}.w"),
            numpy_helper.from_array(np.full(cout, bias, np.float32), f"{name}.b"),
        ]
        self.nodes.append(
            helper.make_node(
                "Conv",
                [x, f"{name}.w", f"{name}.b"],
                [name],
                kernel_shape=[k, k],
                strides=[s, s],
                pads=[k // 2] * 4,
            )
        )
        if not act:
            return name
        self.nodes += [
            helper.make_node("Sigmoid", [name], [f"{name}.sig"]),
            helper.make_node("Mul", [name, f"{name}.sig"], [f"{name}.silu"]),  # SiLU
        ]
        return f"{name}.silu"

    def c2f(self, x: str, cin: int, cout: int, n: int, shortcut: bool = True) -> str:
        half = cout // 2
        y = self.conv(x, cin, cout)
        name = self._name("split")
        self.nodes.append(helper.make_node("Split", [y], [f"{name}.a", f"{name}.b"], axis=1))
        parts = [f"{name}.a", f"{name}.b"]
        for _ in range(n):
            z = self.conv(self.conv(parts[-1], half, half, 3), half, half, 3)
            if shortcut:
                add = self._name("add")
                self.nodes.append(helper.make_node("Add", [parts[-1], z], [add]))
                z = add
            parts.append(z)
        cat = self._name("cat")
        self.nodes.append(helper.make_node("Concat", parts, [cat], axis=1))
        return self.conv(cat, (2 + n) * half, cout)

    def sppf(self, x: str, c: int) -> str:
        y = self.conv(x, c, c // 2)
        pools = [y]
        for _ in range(3):
            p = self._name("pool")
            self.nodes.append(
                helper.make_node("MaxPool", [pools[-1]], [p], kernel_shape=[5, 5], pads=[2] * 4)
            )
            pools.append(p)
        cat = self._name("cat")
        self.nodes.append(helper.make_node("Concat", pools, [cat], axis=1))
        return self.conv(cat, 2 * c, c)

    def up_cat(self, x: str, skip: str) -> str:
        up = self._name("up")
        self.nodes.append(helper.make_node("Resize", [x, "", "up_scales"], [up], mode="nearest"))
        cat = self._name("cat")
        self.nodes.append(helper.make_node("Concat", [up, skip], [cat], axis=1))
        return cat

    def cat(self, a: str, b: str) -> str:
        cat = self._name("cat")
        self.nodes.append(helper.make_node("Concat", [a, b], [cat], axis=1))
        return cat


def yolov8n_like_model(
    input_size: int = 640, num_classes: int = 80, seed: int = 0
) -> onnx.ModelProto:
    """A YOLOv8n-sized detector with random weights; output0 [N, 4 + C, anchors].

    Class logits are biased low so that random weights produce few boxes, as a trained model on an
    ordinary frame would; NMS time then stays realistic in benchmarks.
    """
    b = _Builder(seed)
    b.inits.append(numpy_helper.from_array(np.asarray([1, 1, 2, 2], np.float32), "up_scales"))
    x = b.conv("images", 3, 16, 3, 2)  # P1/2
    x = b.c2f(b.conv(x, 16, 32, 3, 2), 32, 32, 1)  # P2/4
    p3 = b.c2f(b.conv(x, 32, 64, 3, 2), 64, 64, 2)  # P3/8
    p4 = b.c2f(b.conv(p3, 64, 128, 3, 2), 128, 128, 2)  # P4/16
    p5 = b.sppf(b.c2f(b.conv(p4, 128, 256, 3, 2), 256, 256, 1), 256)  # P5/32
    h4 = b.c2f(b.up_cat(p5, p4), 384, 128, 1, shortcut=False)
    n3 = b.c2f(b.up_cat(h4, p3), 192, 64, 1, shortcut=False)
    n4 = b.c2f(b.cat(b.conv(n3, 64, 64, 3, 2), h4), 192, 128, 1, shortcut=False)
    n5 = b.c2f(b.cat(b.conv(n4, 128, 128, 3, 2), p5), 384, 256, 1, shortcut=False)
    heads = []
    for feat, c in ((n3, 64), (n4, 128), (n5, 256)):
        box = b.conv(b.conv(b.conv(feat, c, 64, 3), 64, 64, 3), 64, 4, act=False, bias=16.0)
        cls_mid = b.conv(b.conv(feat, c, 80, 3), 80, 80, 3)
        cls = b.conv(cls_mid, 80, num_classes, act=False, bias=-8.0)
        name = b._name("head")
        b.nodes += [
            helper.make_node("Sigmoid", [cls], [f"{name}.p"]),
            helper.make_node("Concat", [box, f"{name}.p"], [f"{name}.cat"], axis=1),
            helper.make_node("Reshape", [f"{name}.cat", "head_shape"], [name]),
        ]
        heads.append(name)
    b.inits.append(
        numpy_helper.from_array(np.asarray([0, 4 + num_classes, -1], np.int64), "head_shape")
    )
    b.nodes.append(helper.make_node("Concat", heads, ["output0"], axis=2))
    anchors = sum((input_size // s) ** 2 for s in (8, 16, 32))
    graph = helper.make_graph(
        b.nodes,
        "yolov8n_like",
        [
            helper.make_tensor_value_info(
                "images", TensorProto.FLOAT, ["batch", 3, input_size, input_size]
            )
        ],
        [
            helper.make_tensor_value_info(
                "output0", TensorProto.FLOAT, ["batch", 4 + num_classes, anchors]
            )
        ],
        initializer=b.inits,
    )
    return finish_model(graph, [f"class{i}" for i in range(num_classes)])


def conv_gflops(model: onnx.ModelProto) -> float:
    """GFLOPs of one image through the model's convolutions (2 x multiply-accumulates)."""
    inferred = shape_inference.infer_shapes(model)
    shapes = {
        v.name: [d.dim_value for d in v.type.tensor_type.shape.dim]
        for v in list(inferred.graph.value_info) + list(inferred.graph.output)
    }
    weights = {i.name: list(i.dims) for i in model.graph.initializer}
    macs = 0
    for node in model.graph.node:
        if node.op_type != "Conv":
            continue
        cout, cin_per_group, kh, kw = weights[node.input[1]]
        _, _, h, w = shapes[node.output[0]]
        macs += cout * h * w * cin_per_group * kh * kw
    return 2 * macs / 1e9
