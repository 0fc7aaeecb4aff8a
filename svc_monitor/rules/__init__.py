"""The monitor's decision rules: each turns windows of stored rows into signals, commands and alerts."""
