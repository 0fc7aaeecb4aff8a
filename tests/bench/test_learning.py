"""bench/learning.py's parts that can be wrong without a full run: TRL's reward is m1flow's verifier,
every side (svc_source's draws, the in-process loop, TRL's trainer) takes the same records in the same
order, the settings handed to each side agree, and the target and ratio arithmetic on hand-made curves."""
from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

from m1flow import chat, checkpoint
from m1flow.bus import codec
from m1flow.contracts import events
from m1flow.heldout import prompt_key

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))
import learning  # noqa: E402
from learning import Curve, Point, Settings  # noqa: E402

TINY = Settings(steps=2, group=2, batch=2, minibatches=2, window=4, eval_every=1, eval_prompts=8, eval_samples=2)


@pytest.fixture(scope="module")
def scorer():
    with learning.LocalScorer() as s:
        yield s


def test_trl_reward_is_the_verifiers(scorer) -> None:
    """A right and a wrong completion of a generator record, in TRL's conversational form, score 1 and 0."""
    record = learning.first_records(TINY)[0]
    gold = record.to_prompt(2).verifier.gold
    [row] = learning.trl_rows([record], 2)
    seen: list[str] = []
    reward = learning.trl_reward(scorer, seen)
    right = [{"role": "assistant", "content": chat.response_text(gold)}]
    wrong = [{"role": "assistant", "content": chat.response_text(str(int(gold) + 1))}]
    assert reward(prompts=[row["prompt"]] * 2, completions=[right, wrong], verifier=[row["verifier"]] * 2) == [1.0, 0.0]
    assert seen == [record.text, record.text]


def test_the_stream_is_svc_sources_order_less_the_heldout_rows(tmp_path: Path) -> None:
    """svc_source, given the services side's settings file, draws the records the other sides train on,
    in the same order, and none of the held-out prompts."""
    from svc_source.config import SourceConfig
    from svc_source.draws import Draws
    from svc_source.sources import Sources

    s = Settings(steps=40, batch=8, group=8, eval_prompts=64)
    heldout = s.heldout().model_dump(mode="json")
    settings = learning.source_settings(tmp_path / "sources.json", s.group, s.batch, heldout)
    cfg = SourceConfig.load(["--config", str(settings), "--read-ahead", "false"], env={})
    sources = Sources(cfg)
    draws = Draws(sources, "bench/learning", "m1flow-source", sources.initial_mixture(), None)
    wanted = learning.first_records(s)
    published: list[str] = []
    while len(published) < len(wanted):
        batch, _, _ = draws.draw(64, lambda _mixture: None)
        published += [codec.decode(value, events.Prompt).text for _, _, value in batch]
    assert published[:len(wanted)] == [r.text for r in wanted]
    held = {prompt_key(p) for p in learning.heldout_prompts(s)}
    assert len(held) > s.eval_prompts // 2  # the generator repeats problems: 64 rows are fewer distinct prompts
    assert not held & {prompt_key(r.to_prompt(s.group)) for r in wanted}


def test_inproc_and_trl_train_on_the_stream_in_order(qwen2_policy: Path, tmp_path: Path, scorer) -> None:
    """Two batches on each side: the prompts each side trains on are the stream's, in order, and each
    leaves a checkpoint per eval step with its clock."""
    batches = learning.first_records(TINY)
    deadline = learning.Deadline(300)
    inproc = learning.run_inproc(qwen2_policy, TINY, 0, batches, tmp_path / "inproc", deadline, scorer)
    trl = learning.run_trl(qwen2_policy, TINY, 0, batches, tmp_path / "trl", deadline, scorer)
    texts = [r.text for r in batches]
    for side in (inproc, trl):
        assert side.prompts == texts
        assert sorted(side.checkpoints) == TINY.eval_steps() == [0, 1, 2]
        assert 0 < side.seconds[1] < side.seconds[2]
        assert checkpoint.load_model(side.checkpoints[2]) is not None


def test_trl_tokenizes_prompts_as_m1flow(qwen2_policy: Path, tmp_path: Path, scorer) -> None:
    """TRL renders the dataset's conversation into the same prompt ids as m1flow's engines."""
    batches = learning.first_records(TINY)
    trainer = learning.trl_trainer(qwen2_policy, TINY, 0, batches, tmp_path, scorer)
    ids, _, _ = trainer._tokenize_prompts([row["prompt"] for row in learning.trl_rows(batches, TINY.group)])
    tok = checkpoint.load_tokenizer(qwen2_policy)
    assert [list(x) for x in ids] == [chat.prompt_ids(tok, r.text) for r in batches]


def test_each_side_gets_the_same_settings() -> None:
    """TRL's config and the services' flags carry the Settings (a changed m1flow default shows here)."""
    s = Settings(steps=7, group=4, batch=6, lr=3e-5, minibatches=3, window=5, top_p=0.9)
    trl = learning.trl_config(s, 1, Path("/tmp/unused"))
    assert (trl.loss_type, trl.beta, trl.num_iterations, trl.num_generations) == ("cispo", 0.0, 1, 4)
    assert trl.per_device_train_batch_size * trl.steps_per_generation == s.batch * s.group
    assert trl.max_steps == s.steps * s.minibatches and trl.steps_per_generation == s.minibatches
    assert trl.epsilon_high == pytest.approx(1 + s.algorithm().loss().eps_high)
    assert s.algorithm().loss().eps_low == float("inf")  # m1flow's CISPO has no lower clip, as TRL's
    assert (trl.learning_rate, trl.lr_scheduler_type) == (3e-5, "constant")
    assert (trl.top_p, trl.top_k, trl.max_completion_length) == (0.9, 0, 5)
    train = s.train()
    assert (trl.adam_beta1, trl.adam_beta2, trl.adam_epsilon) == (*learning.BETAS, train.adam_eps)
    assert trl.max_grad_norm == train.grad_clip and trl.weight_decay == train.weight_decay
    flags = learning.services_args(s, 1, Path("sources.json"))
    learner = dict(zip(flags["learner"][::2], flags["learner"][1::2]))
    algorithm = json.loads(learner["--algorithm"])
    assert algorithm["dynamic_sampling"] is False and algorithm["policy_loss"] == "cispo"
    assert algorithm["shaping"]["format_reward"] == 0.0 and algorithm["shaping"]["overlong_penalty"] is False
    assert json.loads(learner["--train"])["minibatches"] == 3 and json.loads(learner["--train"])["lr"] == 3e-5
    rollout = dict(zip(flags["rollout"][::2], flags["rollout"][1::2]))
    assert (rollout["--top-p"], rollout["--max-new-tokens"], rollout["--group-size"]) == ("0.9", "5", "4")


def _curve(*points: tuple[int, float, float]) -> list[Point]:
    return [Point(i, samples, seconds, p) for i, (samples, seconds, p) in enumerate(points)]


def test_sample_ages_count_versions_between_drawing_and_training() -> None:
    """Version v is trained from v - 1: a group drawn with v - 1 is on-policy (age 0)."""
    scored = [{"value": {"group_id": g, "samples": [{"policy_version": drawn}, {"policy_version": drawn}]}}
              for g, drawn in (("a", 0), ("b", 0), ("c", 1), ("d", 3))]
    metrics = [{"value": {"name": learning.GROUP_TRAINED, "step": step, "labels": {learning.GROUP_LABEL: g}}}
               for g, step in (("a", 1), ("b", 2), ("c", 3), ("d", 4))]
    metrics.append({"value": {"name": "learner/loss", "step": 4, "labels": {}}})
    assert learning.sample_ages(scored, metrics).endswith("0: 2, 1: 2")
    assert learning.sample_ages(scored, []).endswith("none read")


def test_reach_interpolates_the_first_crossing() -> None:
    points = _curve((0, 0.0, 0.3), (100, 10.0, 0.5), (200, 20.0, 0.7), (300, 30.0, 0.6))
    assert learning.reach(points, 0.6) == pytest.approx((150.0, 15.0))
    assert learning.reach(points, 0.7) == (200.0, 20.0)
    assert learning.reach(points, 0.2) == (0.0, 0.0)  # already there at the start
    assert learning.reach(points, 0.71) is None


def test_ratios_to_trl_and_the_default_target() -> None:
    trl = _curve((0, 0.0, 0.3), (100, 5.0, 0.6), (200, 10.0, 0.8))
    mine = _curve((0, 0.0, 0.3), (100, 20.0, 0.4), (200, 40.0, 0.6))
    assert learning.default_target(trl) == pytest.approx(0.72)
    assert learning.ratios(mine, trl, 0.6) == pytest.approx((2.0, 8.0))
    assert learning.ratios(trl, trl, 0.6) == pytest.approx((1.0, 1.0))
    assert learning.ratios(mine, trl, 0.7) == (None, None)  # mine never gets there
    assert learning.ratios(mine, trl, 0.3) == (None, None)  # TRL starts at the target: nothing to divide by


def test_mean_curve_averages_seeds_at_shared_steps() -> None:
    a = Curve("trl", 0, _curve((0, 0.0, 0.2), (64, 4.0, 0.4), (128, 8.0, 0.6)))
    b = Curve("trl", 1, _curve((0, 0.0, 0.4), (64, 6.0, 0.6)))  # stopped early: its last step is not averaged
    mean = learning.mean_curve([a, b])
    assert [p.step for p in mean] == [0, 1]
    assert mean[1].seconds == pytest.approx(5.0) and mean[1].pass1 == pytest.approx(0.5)


class RecordingAdamW(torch.optim.AdamW):
    """AdamW that keeps the gradient it steps on (flattened in the model's parameter order)."""

    def __init__(self, named: list[tuple[str, torch.nn.Parameter]], **kw) -> None:
        super().__init__([p for _, p in named], **kw)
        self.named, self.grads = named, []

    @torch.no_grad()
    def step(self, closure=None):
        self.grads.append(flat_grad(self.named))
        return super().step(closure)


def flat_grad(named: list[tuple[str, torch.nn.Parameter]]) -> torch.Tensor:
    return torch.cat([p.grad.flatten() if p.grad is not None else torch.zeros(p.numel()) for _, p in named])


def trl_inputs(selected: list, pad: int) -> dict[str, torch.Tensor]:
    """The selected samples as TRL's GRPOTrainer hands them to its loss: prompts left-padded, completions
    right-padded, old log-probs, advantages, and the token count of the whole generation batch."""
    rows = [(g.group.samples[i], adv) for g in selected for i, adv in zip(g.samples, g.advantages)]
    width_p = max(len(x.prompt_token_ids) for x, _ in rows)
    width_c = max(len(x.token_ids) for x, _ in rows)
    out = {"prompt_ids": torch.full((len(rows), width_p), pad), "prompt_mask": torch.zeros(len(rows), width_p, dtype=torch.long),
           "completion_ids": torch.full((len(rows), width_c), pad),
           "completion_mask": torch.zeros(len(rows), width_c, dtype=torch.long),
           "old_per_token_logps": torch.zeros(len(rows), width_c), "advantages": torch.tensor([a for _, a in rows])}
    for j, (x, _) in enumerate(rows):
        p, c = list(x.prompt_token_ids), list(x.token_ids)
        out["prompt_ids"][j, width_p - len(p):], out["prompt_mask"][j, width_p - len(p):] = torch.tensor(p), 1
        out["completion_ids"][j, :len(c)], out["completion_mask"][j, :len(c)] = torch.tensor(c), 1
        out["old_per_token_logps"][j, :len(c)] = torch.tensor(list(x.logprobs))
    out["num_items_in_batch"] = out["completion_mask"].sum()
    return out


def test_one_batch_moves_the_weights_as_trls_trainer(qwen2_policy: Path, tmp_path: Path, scorer) -> None:
    """The same sampled batch, trained on by m1flow's learner step (train_on_batch) and by TRL's
    GRPOTrainer (its CISPO loss and normaliser, its optimizer from the matched config, clipping as its
    accelerator does): each minibatch's gradient points the same way and the weights end where TRL's do.
    What is left to differ between the sides of bench/learning.py is then the sampling, not the update."""
    from m1flow.engines import build
    from svc_learner.batching import to_batch
    from svc_learner.update import Ranks, minibatch_indices, train_on_batch
    from svc_rollout.config import RolloutConfig

    s = Settings(steps=1, group=8, batch=8, minibatches=2, window=8)
    records = learning.first_records(s)
    engine = build(RolloutConfig(engine=learning.ENGINE, batch_groups=s.batch, group_size=s.group, device="cpu"))
    engine.load(events.PolicyVersion(version=0, checkpoint_uri=checkpoint.uri_for(qwen2_policy)))
    selected = learning.rollout_step(engine, records, s, 0, 0, scorer)
    assert sum(any(a != 0 for a in g.advantages) for g in selected) >= 2  # something to learn from
    tok = checkpoint.load_tokenizer(qwen2_policy)
    cfg = s.train()

    ours = checkpoint.load_model(qwen2_policy, trainable=True)
    named = list(ours.named_parameters())
    optimizer = RecordingAdamW(named, lr=cfg.lr, betas=learning.BETAS, eps=cfg.adam_eps, weight_decay=cfg.weight_decay)
    train_on_batch(ours, optimizer, to_batch(selected, pad_id=tok.pad_token_id or 0), cfg, s.algorithm().loss())

    trainer = learning.trl_trainer(qwen2_policy, s, 0, records, tmp_path / "trl", scorer)
    theirs, trl_optimizer = trainer.model, trainer.create_optimizer()
    trainer.current_gradient_accumulation_steps = 1  # set by Trainer's loop, which this test stands in for
    theirs.train()
    inputs = trl_inputs(selected, tok.pad_token_id or 0)
    trl_grads = []
    for idx in minibatch_indices(len(inputs["advantages"]), cfg.minibatches, Ranks()):
        part = {k: v if k == "num_items_in_batch" else v[idx] for k, v in inputs.items()}
        trl_optimizer.zero_grad(set_to_none=True)
        trainer.compute_loss(theirs, part).backward()
        trl_grads.append(flat_grad(list(theirs.named_parameters())))
        torch.nn.utils.clip_grad_norm_(list(theirs.parameters()), trainer.args.max_grad_norm)
        trl_optimizer.step()

    assert len(optimizer.grads) == len(trl_grads) == cfg.minibatches
    for mine, trl in zip(optimizer.grads, trl_grads):
        assert torch.nn.functional.cosine_similarity(mine, trl, dim=0) > 0.9999  # sample-normalised instead: 0.9987
    start = dict(checkpoint.load_model(qwen2_policy).named_parameters())
    after = dict(theirs.named_parameters())
    moved = sum(((p - start[n]) ** 2).sum() for n, p in named) ** 0.5
    apart = sum(((p - after[n]) ** 2).sum() for n, p in named) ** 0.5
    assert moved > 0 and apart / moved < 1e-3, (float(apart), float(moved))
