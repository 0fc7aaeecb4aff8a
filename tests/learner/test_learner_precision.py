"""The report's LM-head precision finding, reproduced on the project's hybrid model.

Rollouts come from the native sampling engine, which records fp32 log-probs (inference mode).
The model has a massive activation on one hidden channel feeding a near-constant head column, so
every logit carries a large common offset: harmless in exact arithmetic (softmax ignores it), but
a bf16 head rounds each logit at the scale of the offset. The learner's fp32 head must agree with
the engine (correlation 0.99x) and the bf16 head must not (0.9x), on the same rollouts.
"""

import torch

from m1flow.model import MiniMaxM1Config, MiniMaxM1ForCausalLM, sample
from svc_learner.optim import make_optimizer
from svc_learner.precision import prob_correlation
from svc_learner.batching import Batch, pack_sequences
from svc_learner.update import SequenceLogprobs, TrainConfig, train_on_batch

PROMPT = [1, 2, 3]


def _model_and_rollouts():
    torch.manual_seed(0)
    model = MiniMaxM1ForCausalLM(MiniMaxM1Config.tiny(vocab_size=128, num_hidden_layers=2))
    with torch.no_grad():
        model.lm_head.weight.mul_(10.0)
        model.model.norm.weight[0] = 200.0  # massive activation ...
        model.lm_head.weight[:, 0] = 1.0  # ... read by every logit alike
    done = sample(model, PROMPT, n=8, max_new_tokens=24, generator=torch.Generator().manual_seed(0))
    ids, mask, logp = pack_sequences([PROMPT] * len(done), [c.tokens for c in done], [c.logprobs for c in done])
    return model, ids, logp, mask


def test_fp32_head_matches_the_inference_engine_and_bf16_does_not():
    model, ids, infer_logp, mask = _model_and_rollouts()
    corr = {}
    for head in ("fp32", "bf16"):
        with torch.no_grad():
            train_logp = SequenceLogprobs(model, head)(ids, mask)[0]
        corr[head] = prob_correlation(train_logp, infer_logp, mask)
    assert corr["fp32"] > 0.999, corr
    assert corr["bf16"] < 0.99, corr

    # the learner reports the same number on every batch
    n = len(ids)
    batch = Batch(ids, mask, infer_logp, torch.randn(n), torch.zeros(n, dtype=torch.long),
                  torch.arange(n) // 4)
    for head in ("fp32", "bf16"):
        cfg = TrainConfig(head_dtype=head, minibatches=1, lr=1e-6)
        stats = train_on_batch(model, make_optimizer(model.parameters(), cfg.lr), batch, cfg)
        assert abs(stats["train_infer_corr"] - corr[head]) < 1e-3, (head, stats, corr)
