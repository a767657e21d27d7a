"""An example downstream consumer of the detections topic: zone rules that publish alerts."""
