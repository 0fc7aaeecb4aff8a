"""Compute kernels of the hybrid model: Triton on GPUs, PyTorch references everywhere."""
