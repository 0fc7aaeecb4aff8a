"""MiniMax-M1 configuration for `trust_remote_code=True` (copied into every hybrid policy directory).

Self-contained: imports transformers only, never m1flow, so a policy opens in a process that has
never heard of m1flow. The field names and defaults are the released MiniMax-M1's.
"""
from transformers import PretrainedConfig


class MiniMaxM1Config(PretrainedConfig):
    model_type = "minimax_m1"
    keys_to_ignore_at_inference = ["past_key_values"]

    def __init__(self, vocab_size=200064, hidden_size=6144, intermediate_size=9216, num_hidden_layers=80,
                 num_attention_heads=64, num_key_value_heads=8, head_dim=128, attn_type_list=None,
                 num_local_experts=32, num_experts_per_tok=2, rotary_dim=64, rope_theta=10_000_000.0,
                 rms_norm_eps=1e-5, hidden_act="silu", postnorm=True,
                 layernorm_full_attention_alpha=3.5565588200778455, layernorm_full_attention_beta=1.0,
                 layernorm_linear_attention_alpha=3.5565588200778455, layernorm_linear_attention_beta=1.0,
                 layernorm_mlp_alpha=3.5565588200778455, layernorm_mlp_beta=1.0,
                 max_position_embeddings=10_240_000, initializer_range=0.02, tie_word_embeddings=False, **kwargs):
        self.vocab_size, self.hidden_size, self.intermediate_size = vocab_size, hidden_size, intermediate_size
        self.num_hidden_layers, self.num_attention_heads = num_hidden_layers, num_attention_heads
        self.num_key_value_heads, self.head_dim = num_key_value_heads, head_dim
        self.attn_type_list = attn_type_list if attn_type_list is not None else [
            1 if (i + 1) % 8 == 0 else 0 for i in range(num_hidden_layers)]  # 0 lightning, 1 softmax
        self.num_local_experts, self.num_experts_per_tok = num_local_experts, num_experts_per_tok
        self.rotary_dim, self.rope_theta, self.rms_norm_eps = rotary_dim, rope_theta, rms_norm_eps
        self.hidden_act, self.postnorm = hidden_act, postnorm
        self.layernorm_full_attention_alpha = layernorm_full_attention_alpha
        self.layernorm_full_attention_beta = layernorm_full_attention_beta
        self.layernorm_linear_attention_alpha = layernorm_linear_attention_alpha
        self.layernorm_linear_attention_beta = layernorm_linear_attention_beta
        self.layernorm_mlp_alpha, self.layernorm_mlp_beta = layernorm_mlp_alpha, layernorm_mlp_beta
        self.max_position_embeddings, self.initializer_range = max_position_embeddings, initializer_range
        super().__init__(tie_word_embeddings=tie_word_embeddings, **kwargs)
