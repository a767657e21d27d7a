"""`framebus alerts`: object and frame rules on the tracks (or detections) topic, alerts out."""
