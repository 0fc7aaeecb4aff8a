"""Task records and the sources that yield them (the shared data API)."""
