"""The inferencer pipeline, one module per stage.

- `ledger`: what may be committed and when (the one owner of the offsets)
- `control`: stop, start-up readiness and failure, shared by the stages
- `handoff`: the work and publications the stages pass on, and the queues between them
- `receive`: consume, decode, batch (and commit: it alone drives the consumer)
- `infer`: warm-up, inference, the detections records
- `publish`: delivery, then the offsets reported done (or sent in the transaction)
- `tracing`: the batch spans
- `runner`: `Pipeline`, which starts the three threads and reports the first failure
"""

from framebus_inferencer.pipeline.runner import Pipeline

__all__ = ["Pipeline"]
