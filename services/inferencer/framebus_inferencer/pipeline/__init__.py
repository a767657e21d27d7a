"""The inferencer pipeline, one module per stage.

- `shared`: the state the three threads share, and the queues between them
- `receive`: consume, decode, batch (and commit: it alone drives the consumer)
- `infer`: warm-up, staleness, inference, the detections records
- `publish`: delivery and the release (or transaction) of offsets
- `tracing`: the batch spans
- `runner`: `Pipeline`, which starts the three threads and reports the first failure
"""

from framebus_inferencer.pipeline.publish import RewindError
from framebus_inferencer.pipeline.runner import Pipeline

__all__ = ["Pipeline", "RewindError"]
