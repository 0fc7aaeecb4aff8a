"""The hybrid MiniMax-M1 model family (lightning + softmax attention, MoE) and its sampler.

Importing this package registers the model with transformers' Auto classes (model_type
"minimax_m1"), so a hybrid checkpoint opens with AutoConfig / AutoModelForCausalLM like any other.
"""

from transformers import AutoConfig, AutoModelForCausalLM

from m1flow.model.cache import HybridCache
from m1flow.model.config import MiniMaxM1Config, MiniMaxM1HFConfig
from m1flow.model.generate import Completion, sample, sample_batch
from m1flow.model.modeling import MiniMaxM1ForCausalLM, count_parameters

AutoConfig.register(MiniMaxM1HFConfig.model_type, MiniMaxM1HFConfig, exist_ok=True)
AutoModelForCausalLM.register(MiniMaxM1HFConfig, MiniMaxM1ForCausalLM, exist_ok=True)

__all__ = ["Completion", "HybridCache", "MiniMaxM1Config", "MiniMaxM1ForCausalLM", "MiniMaxM1HFConfig",
           "count_parameters", "sample", "sample_batch"]
