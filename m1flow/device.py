"""`device: auto` everywhere: CUDA where present, else the CPU."""
from __future__ import annotations

import torch


def resolve(device: str) -> torch.device:
    """'auto' -> cuda:<current> when CUDA is available, else cpu; anything else as torch names it."""
    if device == "auto":
        return torch.device("cuda", torch.cuda.current_device()) if torch.cuda.is_available() else torch.device("cpu")
    return torch.device(device)
