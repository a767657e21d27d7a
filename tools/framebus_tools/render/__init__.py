"""`framebus render`: draw a camera's detections on its original-size frames, to MP4 or PNG."""
