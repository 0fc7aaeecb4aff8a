"""Rule-based verifiers usable as plain library functions (no Kafka): math answers and logic puzzles."""
