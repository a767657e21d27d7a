"""framebus tracker: one stable track id per object, per camera, from the detections topic."""
