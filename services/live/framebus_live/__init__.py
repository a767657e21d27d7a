"""framebus live: a web page of every camera with its boxes, tracks, figures and alerts."""
