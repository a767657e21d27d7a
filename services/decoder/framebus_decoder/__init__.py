"""Decoder service: camera streams in, letterboxed frame tensors out to Kafka."""
