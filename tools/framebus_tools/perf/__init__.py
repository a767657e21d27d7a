"""Performance tools: `framebus tune` (batch-size knee) and `framebus loadtest` (many cameras)."""
