"""ONNX Runtime session for a YOLO-family detector."""

from __future__ import annotations

import ast
import hashlib
import logging
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from framebus.errors import ModelError

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ModelInfo:
    """What the inferencer needs to know about a model."""

    name: str
    version: str
    input_name: str
    input_height: int
    input_width: int
    class_names: tuple[str, ...]


class Engine:
    """Runs batches of uint8 HWC frames through the model."""

    def __init__(self, model_path: Path, intra_op_threads: int = 0) -> None:
        if not model_path.is_file():
            raise ModelError(
                f"model file not found: {model_path} (set FRAMEBUS_MODEL_PATH / --model-path)"
            )
        options = ort.SessionOptions()
        if intra_op_threads:
            options.intra_op_num_threads = intra_op_threads
        try:
            self.session = ort.InferenceSession(
                str(model_path), options, providers=["CPUExecutionProvider"]
            )
        except (
            ort.capi.onnxruntime_pybind11_state.Fail,
            ort.capi.onnxruntime_pybind11_state.InvalidProtobuf,
            ort.capi.onnxruntime_pybind11_state.InvalidGraph,
        ) as exc:
            raise ModelError(f"cannot load ONNX model {model_path}: {exc}") from exc
        self.info = _model_info(self.session, model_path)
        self.provider = self.session.get_providers()[0]

    def run(self, frames: npt.NDArray[np.uint8]) -> npt.NDArray[np.float32]:
        """Infer a (N, H, W, 3) uint8 batch; return the raw first output."""
        images = frames.transpose(0, 3, 1, 2).astype(np.float32) / np.float32(255.0)
        (output, *_rest) = self.session.run(None, {self.info.input_name: images})
        return np.asarray(output, dtype=np.float32)


def _model_info(session: ort.InferenceSession, path: Path) -> ModelInfo:
    inp = session.get_inputs()[0]
    shape = inp.shape
    if len(shape) != 4 or not isinstance(shape[2], int) or not isinstance(shape[3], int):
        raise ModelError(
            f"model input {inp.name} has shape {shape}; expected [N, 3, H, W] with fixed H, W"
        )
    meta = session.get_modelmeta().custom_metadata_map
    names: tuple[str, ...] = ()
    if "names" in meta:
        try:
            parsed = ast.literal_eval(meta["names"])
            names = (
                tuple(str(parsed[i]) for i in sorted(parsed))
                if isinstance(parsed, dict)
                else tuple(parsed)
            )
        except (ValueError, SyntaxError):
            log.warning("model metadata `names` is not a dict or list; using class indices")
    version = meta.get("version") or hashlib.sha256(path.read_bytes()).hexdigest()[:12]
    return ModelInfo(
        name=path.stem,
        version=str(version),
        input_name=inp.name,
        input_height=shape[2],
        input_width=shape[3],
        class_names=names,
    )
