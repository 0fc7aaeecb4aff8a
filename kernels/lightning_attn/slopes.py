"""Per-head decay rates of MiniMax-M1's lightning attention layers."""
import math

import torch


def _power_of_two_slopes(n: int) -> list[float]:
    return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]


def base_slopes(num_heads: int) -> list[float]:
    """ALiBi-style slopes; for a head count that is not a power of two, the nearest lower power of
    two gives the first slopes and every other slope of twice that fills the rest."""
    if num_heads < 1:
        raise ValueError(f"num_heads must be positive, got {num_heads}")
    c = 2 ** int(math.floor(math.log2(num_heads)))
    if c == num_heads:
        return _power_of_two_slopes(num_heads)
    return _power_of_two_slopes(c) + _power_of_two_slopes(2 * c)[0::2][: num_heads - c]


def build_slopes(num_heads: int, layer_idx: int, num_layers: int) -> torch.Tensor:
    """Slopes of one layer, scaled down with depth so deep layers remember longer; fp32 [H].

    layer_idx is the global layer index (softmax layers counted), as in the release."""
    if not 0 <= layer_idx < num_layers:
        raise ValueError(f"layer_idx {layer_idx} outside [0, {num_layers})")
    scale = 1.0 - layer_idx / max(num_layers - 1, 1) + 1e-5
    return torch.tensor([s * scale for s in base_slopes(num_heads)], dtype=torch.float64).float()
