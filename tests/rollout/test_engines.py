"""The rollout engines on real models: vLLM (in-process, CPU), transformers generate and the native
hybrid decoder, each against the learner-side recomputation of its log-probs, the repetition
truncation on a model forced into a loop, and vLLM's in-place reload."""
from __future__ import annotations

import json
import math
import shutil

import pytest
import torch
from safetensors.torch import load_file, save_file

from m1flow import checkpoint, lm
from m1flow.contracts import events
from m1flow.sampling import processed_logprobs
from m1flow.tasks.arith import problems
from m1flow.engines import reload
from m1flow.engines.base import Engine, GroupRequest, GroupResult
from m1flow.engines.hf import HFEngine
from m1flow.engines.native import NativeEngine
from tests.policies import looping_copy

pytestmark = pytest.mark.slow  # vLLM engines started on the CPU: not the unit tier (make test-fast)

PROMPTS = [p.text for p in problems(seed=7, n=8, max_operand=12)]


def policy(version: int, directory) -> events.PolicyVersion:
    return events.PolicyVersion(version=version, checkpoint_uri=checkpoint.uri_for(directory),
                                sha256=checkpoint.weights_sha256(directory))


def run(engine: Engine, texts: list[str], n: int = 4, window: int = 8, temperature: float = 1.0,
        top_p: float = 0.95, early_stop_run: int = 3000, seed: int = 0) -> list[GroupResult]:
    for i, text in enumerate(texts):
        engine.submit(GroupRequest(f"g{seed}-{i}", engine.prompt_ids(text), n, window, temperature, top_p,
                                   seed + i, early_stop_run, 0.99))
    out: list[GroupResult] = []
    while engine.in_flight():
        out += engine.step()
    return sorted(out, key=lambda r: int(r.request.key.rsplit("-", 1)[1]))


def recomputed(model, result: GroupResult) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(engine log-probs, recomputed log-probs) per sample: one forward over prompt + sample, the
    learner's fp32 head, the same temperature and top-p renormalisation."""
    r = result.request
    pairs = []
    for s in result.samples:
        ids = torch.tensor([r.prompt_ids + s.tokens])
        with torch.no_grad():
            logits = lm.logits(model, ids)[0, len(r.prompt_ids) - 1 : -1]
        pairs.append((torch.tensor(s.logprobs), processed_logprobs(logits, torch.tensor(s.tokens), r.temperature, r.top_p)))
    return pairs


def learner_recomputed(model, result: GroupResult) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """(engine log-probs, the learner's SequenceLogprobs at the sample's temperature) per sample."""
    from svc_learner.update import SequenceLogprobs

    r, pairs = result.request, []
    for s in result.samples:
        ids = torch.tensor([r.prompt_ids + s.tokens])
        mask = torch.zeros_like(ids, dtype=torch.float32)
        mask[0, len(r.prompt_ids):] = 1
        with torch.no_grad():
            logp = SequenceLogprobs(model)(ids, mask, None, torch.tensor([r.temperature]))[0]
        pairs.append((torch.tensor(s.logprobs), logp[0, len(r.prompt_ids):]))
    return pairs


def pearson_and_gap(pairs) -> tuple[float, float]:
    engine = torch.cat([a for a, _ in pairs]).double()
    learner = torch.cat([b for _, b in pairs]).double()
    p, q = engine.exp(), learner.exp()
    corr = float(((p - p.mean()) * (q - q.mean())).sum() / ((p - p.mean()).norm() * (q - q.mean()).norm()))
    return corr, float((engine - learner).abs().mean())


# ---- vLLM -----------------------------------------------------------------------------------
@pytest.fixture(scope="module", params=["qwen2", "hybrid"])
def vllm_policy(request):
    """Each vLLM test runs on transformers' Qwen2 and on the hybrid model (the out-of-tree plugin)."""
    return request.getfixturevalue(f"{request.param}_policy")


@pytest.fixture(scope="module")
def vllm_engine(vllm_policy):
    pytest.importorskip("vllm")
    from m1flow.engines.vllm_engine import VllmEngine, VllmSettings

    engine = VllmEngine(VllmSettings(max_num_seqs=64, max_model_len=256), threads=1)
    engine.load(policy(0, vllm_policy))
    yield engine
    del engine.engine


@pytest.mark.parametrize("temperature,top_p", [(1.0, 0.95), (0.7, 0.8)])
def test_vllm_logprobs_match_the_learner_recomputation(vllm_engine, vllm_policy, temperature, top_p):
    vllm_engine.load(policy(vllm_engine.version + 1, vllm_policy))
    results = run(vllm_engine, PROMPTS, n=8, temperature=temperature, top_p=top_p, seed=11)
    model = checkpoint.load_model(vllm_policy)
    pairs = [pair for result in results for pair in recomputed(model, result)]
    corr, gap = pearson_and_gap(pairs)
    tokens = sum(len(a) for a, _ in pairs)
    print(f"\nvLLM ({vllm_policy.name}) vs learner recomputation (T={temperature}, top-p={top_p}, {tokens} tokens): "
          f"Pearson of probabilities {corr:.6f}, mean |log-prob gap| {gap:.2e}")
    assert tokens > 200
    assert corr >= 0.99
    assert gap < 1e-3
    # the learner's own scorer: the sample's temperature, no nucleus (svc_learner.update), so its
    # log-probs sit below the engine's by the log of the nucleus mass, at most -log(top_p)
    learner = [pair for result in results for pair in learner_recomputed(model, result)]
    corr, gap = pearson_and_gap(learner)
    diff = torch.cat([e - l for e, l in learner])
    print(f"vLLM vs the learner's scorer (no nucleus): Pearson {corr:.6f}, mean |log-prob gap| {gap:.2e}")
    assert corr >= 0.99 and diff.min() > -1e-3 and diff.max() < -math.log(top_p) + 1e-3


def test_vllm_batches_groups_in_flight_and_samples_reproducibly(vllm_engine, vllm_policy):
    vllm_engine.load(policy(vllm_engine.version + 1, vllm_policy))
    make = lambda i, seed: GroupRequest(f"c{seed}-{i}", vllm_engine.prompt_ids(PROMPTS[i]), 4, 8, 1.0, 0.95,  # noqa: E731
                                        seed + i, 3000, 0.99)
    vllm_engine.submit(make(0, 0))
    vllm_engine.submit(make(1, 0))
    first = vllm_engine.step()  # both groups' prefill and first tokens in one step
    vllm_engine.submit(make(2, 0))  # joins the running batch
    assert vllm_engine.in_flight() == 3 - len(first) and vllm_engine.sequences_in_flight() >= 4
    done = first
    while vllm_engine.in_flight():
        done += vllm_engine.step()
    assert sorted(r.request.key for r in done) == ["c0-0", "c0-1", "c0-2"]
    again = run(vllm_engine, PROMPTS[:3], seed=0)  # same seeds (seed + i), other keys
    by_key = {r.request.key: r for r in done}
    for i, result in enumerate(again):
        assert [s.tokens for s in result.samples] == [s.tokens for s in by_key[f"c0-{i}"].samples]
        assert all(s.finish_reason == events.FINISH_REASON_STOP and s.tokens[-1] == vllm_engine.eos_id
                   for s in result.samples)


def test_vllm_truncates_a_looping_model_in_the_engine(vllm_engine, vllm_policy, tmp_path):
    loop = looping_copy(vllm_policy, tmp_path / "loop")
    vllm_engine.load(policy(vllm_engine.version + 1, loop))
    results = run(vllm_engine, PROMPTS[:4], n=4, window=40, early_stop_run=6)
    seven = vllm_engine.tokenizer.convert_tokens_to_ids("7")
    for sample in (s for r in results for s in r.samples):
        assert sample.finish_reason == events.FINISH_REASON_REPETITION
        assert sample.tokens == [seven] * 6  # the streak, then the engine's forced EOS (removed)
        assert all(lp > math.log(0.99) for lp in sample.logprobs)
    free = run(vllm_engine, PROMPTS[:1], n=2, window=20, early_stop_run=3000)  # truncation off: the loop runs on
    assert all(s.finish_reason == events.FINISH_REASON_LENGTH and len(s.tokens) == 20 for s in free[0].samples)


def test_vllm_reload_changes_versions_and_outputs_in_place(vllm_engine, vllm_policy, tmp_path):
    engine_before = vllm_engine.engine
    base = vllm_engine.version + 1
    vllm_engine.load(policy(base, vllm_policy))
    original = run(vllm_engine, PROMPTS[:4], seed=5)
    vllm_engine.load(policy(base + 1, looping_copy(vllm_policy, tmp_path / "loop")))
    changed = run(vllm_engine, PROMPTS[:4], seed=5)
    vllm_engine.load(policy(base + 2, vllm_policy))
    restored = run(vllm_engine, PROMPTS[:4], seed=5)
    assert vllm_engine.engine is engine_before  # weights updated in place, no new engine
    assert vllm_engine.last_reload_s < 30
    assert {r.version for r in original} == {base} and {r.version for r in changed} == {base + 1}
    assert {r.version for r in restored} == {base + 2}
    tokens = lambda results: [[s.tokens for s in r.samples] for r in results]  # noqa: E731
    assert tokens(changed) != tokens(original)
    assert tokens(restored) == tokens(original)


def test_vllm_refuses_a_policy_whose_checksum_differs(vllm_engine, vllm_policy):
    bad = events.PolicyVersion(version=10_000, checkpoint_uri=checkpoint.uri_for(vllm_policy), sha256="0" * 64)
    with pytest.raises(checkpoint.PolicyLoadError):
        vllm_engine.load(bad)
    assert vllm_engine.version < 10_000


# ---- transformers generate and the native hybrid decoder ---------------------------------------
@pytest.mark.parametrize("kind", ["hf", "native"])
def test_batch_engines_report_logprobs_of_the_sampling_distribution(kind, qwen2_policy, hybrid_policy):
    directory = qwen2_policy if kind == "hf" else hybrid_policy
    engine = HFEngine(batch_groups=4, group_size=4, device="cpu") if kind == "hf" else NativeEngine(4, 4, "cpu")
    engine.load(policy(0, directory))
    results = run(engine, PROMPTS, n=4, temperature=0.8, top_p=0.9, seed=3)
    assert len(results) == len(PROMPTS) and all(r.version == 0 for r in results)
    model = checkpoint.load_model(directory)
    for result in results:
        for engine_lp, learner_lp in recomputed(model, result):
            torch.testing.assert_close(engine_lp, learner_lp, rtol=0, atol=2e-4)
    reasons = {s.finish_reason for r in results for s in r.samples}
    assert events.FINISH_REASON_STOP in reasons


def test_hf_engine_prefills_a_group_once_and_samples_what_generate_samples(qwen2_policy):
    """The oracle is transformers' own `generate` with num_return_sequences (each sample prefilled
    again): the same seed draws the same tokens with the same log-probs, while the engine's model sees
    each prompt (left-padded, of different lengths) once."""
    engine = HFEngine(batch_groups=4, group_size=4, device="cpu")
    engine.load(policy(0, qwen2_policy))
    texts = PROMPTS[:4] + ["What is 123 + 4567 + 89? Think step by step."]
    batch = [GroupRequest(f"g{i}", engine.prompt_ids(t), 4, 8, 1.0, 1.0, 5, 3000, 0.99) for i, t in enumerate(texts)]
    seen: list[tuple[int, int]] = []
    hook = engine.model.register_forward_pre_hook(lambda _m, _a, kw: seen.append(tuple(kw["input_ids"].shape)),
                                                  with_kwargs=True)
    try:
        groups = engine.generate(batch)
    finally:
        hook.remove()
    width = max(len(r.prompt_ids) for r in batch)
    assert len({len(r.prompt_ids) for r in batch}) > 1
    assert seen[0] == (len(batch), width - 1) and all(shape == (len(batch) * 4, 1) for shape in seen[1:])

    ids = torch.full((len(batch), width), engine.tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros_like(ids)
    for row, r in enumerate(batch):
        ids[row, width - len(r.prompt_ids):], mask[row, width - len(r.prompt_ids):] = torch.tensor(r.prompt_ids), 1
    torch.manual_seed(5)
    with torch.no_grad():
        oracle = engine.model.generate(input_ids=ids, attention_mask=mask, do_sample=True, temperature=1.0, top_p=1.0,
                                       top_k=0, num_return_sequences=4, max_new_tokens=8, eos_token_id=engine.eos_id,
                                       pad_token_id=engine.tokenizer.pad_token_id, output_scores=True,
                                       return_dict_in_generate=True)
    scores = torch.stack([torch.log_softmax(x.float(), -1) for x in oracle.scores], 1)
    for row, sample in enumerate(s for group in groups for s in group):
        expected = oracle.sequences[row, width:width + len(sample.tokens)]
        assert sample.tokens == expected.tolist()
        torch.testing.assert_close(torch.tensor(sample.logprobs), scores[row, :len(sample.tokens)].gather(
            -1, expected[:, None]).squeeze(-1), rtol=0, atol=1e-4)


@pytest.mark.parametrize("kind", ["hf", "native"])
def test_batch_engines_truncate_a_looping_model(kind, qwen2_policy, hybrid_policy, tmp_path):
    loop = looping_copy(qwen2_policy if kind == "hf" else hybrid_policy, tmp_path / "loop")
    engine = HFEngine(device="cpu") if kind == "hf" else NativeEngine(device="cpu")
    engine.load(policy(0, loop))
    seven = engine.tokenizer.convert_tokens_to_ids("7")
    for sample in (s for r in run(engine, PROMPTS[:3], n=2, window=40, early_stop_run=5) for s in r.samples):
        assert sample.finish_reason == events.FINISH_REASON_REPETITION and sample.tokens == [seven] * 5


def test_engines_refuse_the_architecture_they_do_not_run(qwen2_policy, hybrid_policy):
    with pytest.raises(checkpoint.PolicyLoadError, match="native"):
        HFEngine(device="cpu").load(policy(0, hybrid_policy))
    with pytest.raises(checkpoint.PolicyLoadError, match="hybrid"):
        NativeEngine(device="cpu").load(policy(0, qwen2_policy))


def test_a_batch_engine_loads_a_policy_between_steps_and_its_queued_groups_take_it(hybrid_policy, tmp_path):
    """A batch engine decodes groups whole within a step, so with groups queued none is part-way:
    a new policy loads at once (no drain), the queued groups are decoded with it and tagged with
    its version, and their tokens are that policy's (the looping copy's streak)."""
    engine = NativeEngine(batch_groups=2, group_size=2, device="cpu")
    engine.load(policy(0, hybrid_policy))
    for i, text in enumerate(PROMPTS[:4]):
        engine.submit(GroupRequest(f"g{i}", engine.prompt_ids(text), 2, 8, 1.0, 0.95, i, 5, 0.99))
    first = engine.step()  # two groups on v0
    assert [r.version for r in first] == [0, 0] and engine.in_flight() == 2 and engine.decoding() == 0
    engine.load(policy(1, looping_copy(hybrid_policy, tmp_path / "loop")))
    rest = engine.step()
    seven = engine.tokenizer.convert_tokens_to_ids("7")
    assert [r.version for r in rest] == [1, 1]
    assert all(s.tokens == [seven] * 5 for r in rest for s in r.samples)
    assert any(s.tokens != [seven] * 5 for r in first for s in r.samples)


@pytest.mark.parametrize("kind", ["hf", "native"])
def test_a_batch_engine_takes_weights_from_memory_as_from_their_checkpoint(kind, qwen2_policy, hybrid_policy, tmp_path):
    """load_weights (a learner in the same process) leaves the engine where loading the same weights'
    checkpoint does: same version, same tokens and log-probs for the same seeds; and, like load, it
    refuses while a group is part-way decoded."""
    start = qwen2_policy if kind == "hf" else hybrid_policy
    make = (lambda: HFEngine(batch_groups=2, group_size=2, device="cpu")) if kind == "hf" else \
        (lambda: NativeEngine(batch_groups=2, group_size=2, device="cpu"))
    loop = looping_copy(start, tmp_path / "loop")
    from_disk, from_memory = make(), make()
    from_disk.load(policy(1, loop))
    from_memory.load(policy(0, start))
    before = run(from_memory, PROMPTS[:2], n=2, window=5)
    from_memory.load_weights(1, checkpoint.load_model(loop).state_dict())
    disk, memory = run(from_disk, PROMPTS[:2], n=2, window=5), run(from_memory, PROMPTS[:2], n=2, window=5)
    assert from_memory.version == 1 and [r.version for r in memory] == [1, 1]
    assert [[s.tokens for s in r.samples] for r in memory] == [[s.tokens for s in r.samples] for r in disk]
    assert [[s.logprobs for s in r.samples] for r in memory] == [[s.logprobs for s in r.samples] for r in disk]
    assert [[s.tokens for s in r.samples] for r in memory] != [[s.tokens for s in r.samples] for r in before]
    with pytest.raises(RuntimeError, match="Unexpected key"):
        from_memory.load_weights(2, {"not.a.weight": torch.zeros(1)})


@pytest.mark.parametrize("kind", ["hf", "native"])
def test_a_version_that_changes_only_weights_is_copied_into_the_live_model(kind, qwen2_policy, hybrid_policy, tmp_path):
    """Between a learner's versions only the tensors change: the engine copies them into the model it
    holds instead of building it again, and then samples exactly as an engine that loaded the version
    whole; a version whose config differs is built whole, and files that do not cover the model are
    refused before anything is copied."""
    warm = qwen2_policy if kind == "hf" else hybrid_policy
    make = (lambda: HFEngine(batch_groups=2, group_size=2, device="cpu")) if kind == "hf" else \
        (lambda: NativeEngine(batch_groups=2, group_size=2, device="cpu"))
    # as a learner writes its versions (the cold start's own tokenizer files are written differently)
    start = checkpoint.save_policy(tmp_path / "v0", checkpoint.load_model(warm), checkpoint.load_tokenizer(warm))
    loop = looping_copy(start, tmp_path / "loop")
    copied, whole = make(), make()
    copied.load(policy(0, start))
    live = copied.model
    copied.load(policy(1, loop))
    whole.load(policy(1, loop))
    assert (copied.reloads_in_place, whole.reloads_in_place) == (1, 0) and copied.model is live
    a, b = run(copied, PROMPTS[:2], n=2, window=5), run(whole, PROMPTS[:2], n=2, window=5)
    assert [[s.tokens for s in r.samples] for r in a] == [[s.tokens for s in r.samples] for r in b]
    assert [[s.logprobs for s in r.samples] for r in a] == [[s.logprobs for s in r.samples] for r in b]

    other = tmp_path / "other"  # the same weights under a config that differs: built whole
    shutil.copytree(loop, other)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, "m1flow_note": "a changed config"}))
    copied.load(policy(2, other))
    assert copied.reloads_in_place == 1 and copied.model is not live and copied.version == 2

    state = {k: v.clone() for k, v in load_file(str(loop / "model.safetensors")).items()}
    dropped = sorted(state)[-1]
    partial = tmp_path / "partial"
    shutil.copytree(start, partial)
    save_file({k: v for k, v in state.items() if k != dropped}, str(partial / "model.safetensors"))
    before = {k: v.clone() for k, v in copied.model.state_dict().items()}
    with pytest.raises(checkpoint.PolicyLoadError, match="no weights for"):
        reload.copy_weights(copied.model, partial)
    assert all(torch.equal(before[k], v) for k, v in copied.model.state_dict().items())
