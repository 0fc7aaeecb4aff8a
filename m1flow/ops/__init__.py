"""Operator tools: command-line subcommands and what they start (may import services' client modules)."""
