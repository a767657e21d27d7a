"""Kafka client wrappers shared by the decoder and the inferencer."""
