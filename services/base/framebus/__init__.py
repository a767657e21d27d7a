"""framebus: dynamic batching of detection models over many live video streams, through Kafka."""

__version__ = "0.1.0"
