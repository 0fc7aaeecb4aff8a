"""Generated tasks with verifiable answers."""
