"""Inferencer service: micro-batches of frames from Kafka through ONNX Runtime to detections."""
