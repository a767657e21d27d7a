"""Which YOLO output layout a model's heads have, told from their shapes (pure logic).

`detect_head` tells the layout from the output shapes, the class count and the input size, or
refuses to guess; `check_head` refuses a layout set by hand that the shapes cannot have.
`postprocess.Decoder` decodes each layout.
"""

from __future__ import annotations

from collections.abc import Sequence

from framebus.errors import ModelError
from framebus_inferencer.settings import HeadFormat

Shape = Sequence[int | str | None]
LAYOUTS = (HeadFormat.YOLOV5, HeadFormat.YOLOV8, HeadFormat.END2END)
LAYOUT_HELP = (
    "YOLOv5 [N, anchors, 5 + classes], YOLOv8 [N, 4 + classes, anchors], end-to-end [N, K, 6] or "
    "num_dets/boxes/scores/classes"
)
HEAD_FLAG = "--head-format / FRAMEBUS_HEAD_FORMAT"
# A YOLO head has one anchor per cell of each output stride (P5 models: 8, 16, 32; P6 models add
# 64), three per cell for YOLOv5: the anchor count follows from the input size.
STRIDE_SETS = ((8, 16, 32), (8, 16, 32, 64))


def format_shapes(shapes: Sequence[Shape]) -> str:
    """Output shapes as `[N, 6, 1]`, several joined by commas; unknown dims as `?`."""
    return ", ".join("[" + ", ".join("?" if d is None else str(d) for d in s) + "]" for s in shapes)


def _known(dim: int | str | None) -> int | None:
    return dim if isinstance(dim, int) and dim > 0 else None


def head_misfit(head: HeadFormat, shapes: Sequence[Shape]) -> str | None:
    """Why outputs of these shapes cannot be a `head` head (impossible dims), or None if they can.

    Unknown (dynamic) dims are taken as possible: the engine checks the real outputs after warm-up.
    """
    if head is HeadFormat.AUTO:
        return "the head format must be resolved first"
    if head is HeadFormat.END2END and len(shapes) == 4:
        return None
    if not shapes or len(shapes[0]) != 3:
        return "a YOLOv5, YOLOv8 or [N, K, 6] end-to-end head is one output of 3 dimensions"
    a, b = _known(shapes[0][1]), _known(shapes[0][2])
    if head is HeadFormat.YOLOV5 and b is not None and b < 6:
        return f"a YOLOv5 row needs 6 or more values (4 box, objectness, class scores), not {b}"
    if head is HeadFormat.YOLOV8 and a is not None and a < 5:
        return f"a YOLOv8 head needs 5 or more rows (4 box, class scores), not {a}"
    if head is HeadFormat.END2END and b is not None and b != 6:
        return f"an end-to-end row has 6 values (x1, y1, x2, y2, score, class), not {b}"
    return None


def _class_fit(head: HeadFormat, shape: Shape, num_classes: int) -> bool | None:
    """True: the shape holds exactly `num_classes` classes this way; False: it cannot; None: unknown."""
    if head is HeadFormat.END2END:  # any class count: a row names its class
        return True if len(shape) != 3 or _known(shape[2]) == 6 else None
    dim, extra = (shape[2], 5) if head is HeadFormat.YOLOV5 else (shape[1], 4)
    return None if _known(dim) is None else dim == extra + num_classes


def anchor_counts(head: HeadFormat, height: int, width: int) -> set[int]:
    """The anchor counts a YOLOv5 or YOLOv8 head of a `height` x `width` input can have."""
    per_cell = 3 if head is HeadFormat.YOLOV5 else 1
    return {
        per_cell * sum(-(-height // s) * -(-width // s) for s in strides) for strides in STRIDE_SETS
    }


def _anchor_fit(head: HeadFormat, shape: Shape, input_hw: tuple[int, int]) -> bool | None:
    if head is HeadFormat.END2END or len(shape) != 3:
        return None  # K, the most detections an end-to-end head returns, is any number
    dim = _known(shape[1] if head is HeadFormat.YOLOV5 else shape[2])
    return None if dim is None else dim in anchor_counts(head, *input_hw)


def _narrow(heads: list[HeadFormat], verdicts: Sequence[bool | None]) -> list[HeadFormat]:
    """The heads whose evidence matches, else those it does not contradict (possibly none)."""
    matches = [h for h, v in zip(heads, verdicts, strict=True) if v is True]
    return matches or [h for h, v in zip(heads, verdicts, strict=True) if v is None]


def detect_head(
    shapes: Sequence[Shape], num_classes: int, input_hw: tuple[int, int] | None = None
) -> HeadFormat:
    """The head layout of outputs of these shapes, or a ModelError when it cannot be told.

    What is impossible for a layout rules it out (`head_misfit`); the class count (names metadata
    or labels, 0 when unknown) decides between the rest, then the anchor count a YOLO head of the
    model's input size (H, W) has. A shape still fitting two layouts is refused, never guessed.
    """
    where = f"cannot tell the detector head from output shape {format_shapes(shapes)}"
    heads = [h for h in LAYOUTS if head_misfit(h, shapes) is None]
    if not heads:
        raise ModelError(f"{where}: it fits no layout framebus decodes ({LAYOUT_HELP})")
    shape = shapes[0]
    if num_classes:
        heads = _narrow(heads, [_class_fit(h, shape, num_classes) for h in heads])
        if not heads:
            raise ModelError(
                f"{where}: its {num_classes} class names (the model's names metadata or "
                f"--labels-path) fit no layout (YOLOv5 rows of {5 + num_classes} values, YOLOv8 "
                f"{4 + num_classes} rows, or end-to-end [N, K, 6]); use the model's own class "
                f"names, or set {HEAD_FLAG} to its layout"
            )
    if input_hw is not None and len(heads) > 1:
        heads = _narrow(heads, [_anchor_fit(h, shape, input_hw) for h in heads]) or heads
    if len(heads) == 1:
        return heads[0]
    raise ModelError(
        f"{where}: it could be {' or '.join(h.value for h in heads)}"
        + ("" if num_classes else " and the model has no class names to decide")
        + f"; set {HEAD_FLAG} to the model's layout"
    )


def check_head(head: HeadFormat, shapes: Sequence[Shape]) -> None:
    """Refuse a head format set by hand that outputs of these shapes cannot have."""
    why = head_misfit(head, shapes)
    if why is not None:
        raise ModelError(
            f"{HEAD_FLAG} is {head.value} but the model's output shape {format_shapes(shapes)} "
            f"does not fit that layout: {why}; set it to the model's layout, or to auto"
        )
