"""The hybrid MiniMax-M1 model family (lightning + softmax attention, MoE) and its sampler."""

from m1flow.model.cache import HybridCache
from m1flow.model.config import MiniMaxM1Config
from m1flow.model.generate import Completion, sample
from m1flow.model.modeling import MiniMaxM1ForCausalLM, count_parameters

__all__ = ["Completion", "HybridCache", "MiniMaxM1Config", "MiniMaxM1ForCausalLM", "count_parameters", "sample"]
