import math

import pytest
import torch

from kernels.lightning_attn import base_slopes, build_slopes


def test_power_of_two_heads():
    s = base_slopes(64)
    assert s[0] == pytest.approx(2 ** (-8 / 64))
    assert s[63] == pytest.approx(2 ** -8)
    assert all(a > b for a, b in zip(s, s[1:]))


def test_non_power_of_two_rule():
    # 6 heads: the 4 slopes of 4 heads, then slopes 0 and 2 of the 8-head list.
    expected = [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1, 2 ** -3]
    assert base_slopes(6) == pytest.approx(expected)
    assert len(base_slopes(40)) == 40 and len(set(base_slopes(40))) == 40


def test_layer_scaling_m1_schedule():
    first, deep = build_slopes(64, 0, 80), build_slopes(64, 78, 80)
    assert first.dtype == torch.float32 and first.shape == (64,)
    assert first[0].item() == pytest.approx(2 ** (-1 / 8) * (1 + 1e-5), rel=1e-6)
    assert deep[63].item() == pytest.approx(2 ** -8 * (1 - 78 / 79 + 1e-5), rel=1e-6)
    assert 4e-5 < deep.min().item() < 6e-5
    last = build_slopes(64, 79, 80)
    assert last.max().item() == pytest.approx(math.pow(2, -1 / 8) * 1e-5, rel=1e-5)
    with pytest.raises(ValueError):
        build_slopes(64, 80, 80)
