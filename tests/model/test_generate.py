import math

import pytest
import torch

from m1flow.model import MiniMaxM1Config, MiniMaxM1ForCausalLM, sample
from m1flow.model.generate import top_p_filter
from m1flow.sampling import processed_logprobs

V = 32
PROMPT = [3, 1, 4, 1, 5, 9, 2, 6]


@pytest.fixture(scope="module")
def model():
    torch.manual_seed(0)
    m = MiniMaxM1ForCausalLM(MiniMaxM1Config.tiny(vocab_size=V)).eval()
    with torch.no_grad():  # a less flat distribution, so top-p actually cuts
        m.lm_head.weight.mul_(20)
    return m


def continuation_logits(model, prompt, tokens):
    """Logits that predicted each of `tokens`, from one forward pass over prompt + tokens."""
    with torch.no_grad():
        return model(torch.tensor([prompt + tokens]))[0, len(prompt) - 1 : -1]


def full_logprobs(model, prompt, tokens, temperature=1.0, top_p=0.95):
    """Log-probs under the distribution sampled from (temperature, top-p renormalised)."""
    return processed_logprobs(continuation_logits(model, prompt, tokens), torch.tensor(tokens), temperature, top_p)


def test_logprobs_match_a_full_forward(model):
    completions = sample(model, PROMPT, n=4, max_new_tokens=24, generator=torch.Generator().manual_seed(0))
    assert len(completions) == 4
    for c in completions:
        assert len(c.tokens) == len(c.logprobs) > 0
        assert all(0 <= t < V for t in c.tokens)
        assert all(lp <= 0 for lp in c.logprobs)
        torch.testing.assert_close(torch.tensor(c.logprobs), full_logprobs(model, PROMPT, c.tokens), rtol=0, atol=1e-4)
    assert len({tuple(c.tokens) for c in completions}) > 1  # samples differ


def test_eos_and_max_new_tokens(model):
    max_new = 30
    draw = lambda eos: sample(model, PROMPT, n=6, max_new_tokens=max_new, eos_id=eos, generator=torch.Generator().manual_seed(1))
    free = draw(None)
    assert all(c.finish_reason == "length" and len(c.tokens) == max_new for c in free)
    # Take as eos a token that first appears at step 5; the same seed draws the same tokens up to there.
    first_step = {}
    for step in range(max_new):
        for row, c in enumerate(free):
            first_step.setdefault(c.tokens[step], (step, row))
    eos, (step, row) = next((tok, at) for tok, at in first_step.items() if at[0] >= 5)
    completions = draw(eos)
    assert completions[row].finish_reason == "stop" and completions[row].tokens == free[row].tokens[: step + 1]
    assert {c.finish_reason for c in completions} == {"stop", "length"}  # both branches are checked
    for c in completions:
        assert eos not in c.tokens[:-1]
        if c.finish_reason == "stop":
            assert c.tokens[-1] == eos and len(c.tokens) <= max_new
        else:
            assert len(c.tokens) == max_new and c.tokens[-1] != eos
        torch.testing.assert_close(torch.tensor(c.logprobs), full_logprobs(model, PROMPT, c.tokens), rtol=0, atol=1e-4)


def test_same_generator_seed_same_samples(model):
    run = lambda: sample(model, PROMPT, n=3, max_new_tokens=10, generator=torch.Generator().manual_seed(5))
    assert [c.tokens for c in run()] == [c.tokens for c in run()]


def test_greedy_follows_the_argmax(model):
    (c,) = sample(model, PROMPT, n=1, max_new_tokens=12, temperature=0.0)
    assert c.tokens == continuation_logits(model, PROMPT, c.tokens).argmax(-1).tolist()


def test_sampled_tokens_stay_in_the_nucleus(model):
    top_p = 0.5
    completions = sample(model, PROMPT, n=6, max_new_tokens=15, top_p=top_p, generator=torch.Generator().manual_seed(2))
    for c in completions:
        kept = torch.isfinite(top_p_filter(continuation_logits(model, PROMPT, c.tokens), top_p))
        assert kept.gather(-1, torch.tensor(c.tokens)[:, None]).all()
        assert (kept.sum(-1) < V).all()


def test_top_p_filter_keeps_the_smallest_set_reaching_p():
    logits = torch.tensor([[0.05, 0.5, 0.15, 0.3]]).log()
    assert torch.isfinite(top_p_filter(logits, 0.7)).tolist() == [[False, True, False, True]]
    assert torch.isfinite(top_p_filter(logits, 0.81)).tolist() == [[False, True, True, True]]
    assert torch.isfinite(top_p_filter(logits, 0.1)).tolist() == [[False, True, False, False]]
    assert torch.isfinite(top_p_filter(logits, 1.0)).all()


def test_repetition_stop_fires_on_a_deterministic_model():
    torch.manual_seed(0)
    model = MiniMaxM1ForCausalLM(MiniMaxM1Config.tiny(vocab_size=V)).eval()
    with torch.no_grad():  # huge logits: every token is drawn with probability ~1
        model.lm_head.weight.mul_(1e4)
    run = 6
    completions = sample(model, PROMPT, n=2, max_new_tokens=50, early_stop_run=run, generator=torch.Generator().manual_seed(0))
    for c in completions:
        assert c.finish_reason == "repetition"
        assert len(c.tokens) == run
        assert all(lp > math.log(0.99) for lp in c.logprobs)


def test_repetition_stop_needs_an_unbroken_run(model):
    """The ordinary model draws low-probability tokens, which reset the run: no early stop."""
    completions = sample(model, PROMPT, n=4, max_new_tokens=40, early_stop_run=3, early_stop_prob=0.99,
                         generator=torch.Generator().manual_seed(3))
    for c in completions:
        assert c.finish_reason == "length"
        probs = [math.exp(lp) for lp in c.logprobs]
        assert not any(all(p > 0.99 for p in probs[i : i + 3]) for i in range(len(probs) - 2))


def test_processed_logprobs_follow_temperature_and_top_p(model):
    completions = sample(model, PROMPT, n=3, max_new_tokens=12, temperature=0.7, top_p=0.8,
                         generator=torch.Generator().manual_seed(4))
    for c in completions:
        expected = full_logprobs(model, PROMPT, c.tokens, temperature=0.7, top_p=0.8)
        torch.testing.assert_close(torch.tensor(c.logprobs), expected, rtol=0, atol=1e-4)


def test_prompts_batched_together_sample_as_they_would_alone(model):
    """Prompts of different lengths share one decode batch (merged caches, padding masked): each
    prompt's completions are those it draws alone with the same generator."""
    from m1flow.model.generate import sample_batch

    prompts = [PROMPT, [7, 3], PROMPT[:5] + [11, 12, 13, 14, 15, 16, 17]]
    gens = lambda: [torch.Generator().manual_seed(10 + i) for i in range(len(prompts))]  # noqa: E731
    together = sample_batch(model, prompts, n=3, max_new_tokens=[16, 9, 16], generators=gens())
    for i, prompt in enumerate(prompts):
        alone = sample(model, prompt, n=3, max_new_tokens=[16, 9, 16][i], generator=gens()[i])
        assert [c.tokens for c in together[i]] == [c.tokens for c in alone]
        for a, b in zip(together[i], alone):
            torch.testing.assert_close(torch.tensor(a.logprobs), torch.tensor(b.logprobs), rtol=0, atol=1e-4)
