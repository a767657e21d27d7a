"""What every `gpu` test needs: onnxruntime-gpu (they fail, never skip, without it).

`fall_model` is test_pretrained_model.py's fixture (the real YOLOv8s, fetched once into framebus's
model cache), shared so that both suites fetch and check it the same way.
"""

from __future__ import annotations

import onnxruntime as ort
import pytest

from tests.integration.test_pretrained_model import fall_model  # noqa: F401  (a fixture)


@pytest.fixture(autouse=True)
def onnxruntime_gpu() -> None:
    """Fail, naming what is missing, where ONNX Runtime has no CUDA provider."""
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        pytest.fail(
            f"needs onnxruntime-gpu: this ONNX Runtime offers {ort.get_available_providers()}"
        )
