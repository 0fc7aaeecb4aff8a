"""NativeJudge on the project's own engine (m1flow.model.generate.sample), when it is present.

A tiny model cannot learn to judge in a test's time, so the weights are set by hand: every layer's
contribution is zeroed and the embedding / output matrices wired as a bigram table, which makes the
real engine reply "Verdict=A" to any prompt, i.e. a judge that always prefers the first answer.
"""
import pytest

torch = pytest.importorskip("torch")
generate = pytest.importorskip("m1flow.model.generate", reason="native engine not written yet")
tokenizer_module = pytest.importorskip("m1flow.tokenizer", reason="native tokenizer not written yet")
warmstart = pytest.importorskip("ops.warmstart", reason="tiny model builder not written yet")

from svc_reward.genrm import (Comparer, GenRMScorer, JudgeError, NativeJudge,  # noqa: E402
                              NativeJudgeConfig)
from svc_reward.result import Status  # noqa: E402

REPLY = "Verdict=A"


@pytest.fixture(scope="module")
def tokenizer():
    return tokenizer_module.build_tokenizer()


def bigram_model(tok, reply):
    """The tiny hybrid model rewired so that greedy decoding after 'Assistant:' spells `reply`."""
    torch.manual_seed(0)
    model = warmstart.build_model(tok, warmstart.WarmStartConfig(model_overrides={"hidden_size": 384}))
    vocab, hidden = model.lm_head.weight.shape
    assert vocab <= hidden, "one-hot embeddings need hidden_size >= vocab_size"
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() >= 2 and "embed_tokens" not in name and name != "lm_head.weight":
                param.zero_()  # no attention, no MoE: the hidden state is the (normalised) token
        model.model.embed_tokens.weight.copy_(torch.eye(vocab, hidden))
        head = torch.zeros(vocab, hidden)
        head[tok.eos_token_id, :vocab] = 1.0  # anything off the chain ends the reply
        chain = tok.encode(":" + reply, add_special_tokens=False)
        assert len(set(chain)) == len(chain)
        for now, nxt in zip(chain, chain[1:]):
            head[nxt, now] = 2.0
        head[tok.eos_token_id, chain[-1]] = 2.0
        model.lm_head.weight.copy_(head)
    return model.eval()


def test_native_judge_reads_the_engines_verdict_and_exposes_its_position_bias(tokenizer):
    judge = NativeJudge(bigram_model(tokenizer, REPLY), tokenizer,
                        config=NativeJudgeConfig(max_new_tokens=16))
    assert judge.complete([{"role": "user", "content": "Which is better?"}]).strip() == REPLY
    comparer = Comparer(judge)
    comparison = comparer.compare("Say hi.", "hi", "hello there")
    assert comparison.ab[0] == 1 and comparison.ba[0] == 1  # first shown wins both times
    assert comparison.score == 0.0 and comparer.tracker.rate == 1.0


def test_native_judge_without_a_verdict_is_a_judge_error(tokenizer):
    torch.manual_seed(0)
    model = warmstart.build_model(tokenizer, warmstart.WarmStartConfig()).eval()  # random weights
    judge = NativeJudge(model, tokenizer, config=NativeJudgeConfig(max_new_tokens=4))
    with pytest.raises(JudgeError):
        judge.judge("q", "a", "b")
    results = GenRMScorer(judge).score_against("q", ["a"], "b")
    assert results[0].status is Status.JUDGE_ERROR and not results[0].usable
