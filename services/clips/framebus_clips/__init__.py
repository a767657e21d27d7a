"""framebus clips: an MP4 clip and a JPEG snapshot of every alert, cut from the video topic."""
