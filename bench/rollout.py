"""Generated tokens per second of the rollout engines, and what the rollout service costs around vLLM.

Part 1, engines side by side on the same prompts (chat-formatted arithmetic prompts, n samples each,
temperature 1, top-p 0.95, every token's log-prob returned): vLLM and transformers' `generate` on the
same small Qwen2, and vLLM (the out-of-tree model, m1flow.engines.vllm_hybrid) and the native
engine on the hybrid model of about the same size (`generate` does not run ours). Models are freshly
initialised, so samples run to the token budget (the decode regime) instead of stopping after a few
tokens as the warm-started ones do.

Part 2, the same work through the rollout service (a real broker; prompts published on `prompts`,
rollouts consumed from `rollouts`, timed from the first prompt published to the last rollout
received) against the bare vLLM engine in this process. Both with one torch thread.

Run: PYTHONPATH=. python bench/rollout.py [--prompts 32] [--n 8] [--tokens 64] [--service-prompts 128]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from m1flow import checkpoint  # noqa: E402
from m1flow.contracts import events  # noqa: E402
from m1flow.tasks.arith import problems  # noqa: E402
from m1flow.tokenizer import build_tokenizer  # noqa: E402
from ops.warmstart import WarmStartConfig, build_model  # noqa: E402
from m1flow.engines.base import Engine, GroupRequest  # noqa: E402

NO_TRUNCATION = 1_000_000


def save_models(root: Path) -> dict[str, Path]:
    tok = build_tokenizer()
    return {arch: checkpoint.save_policy(root / arch, build_model(tok, WarmStartConfig(arch=arch)), tok)
            for arch in ("qwen2", "minimax_m1")}


def announce(directory: Path, version: int = 0) -> events.PolicyVersion:
    return events.PolicyVersion(version=version, checkpoint_uri=checkpoint.uri_for(directory),
                                sha256=checkpoint.weights_sha256(directory))


def engine_run(engine: Engine, texts: list[str], n: int, tokens: int, tag: str, window: int | None = None) -> dict:
    """Keep up to `window` groups in flight (all of them by default), admitting the next as one
    finishes, as the service does; tokens generated, seconds, peak sequences in flight."""
    window = window or len(texts)
    started, waiting = time.perf_counter(), list(enumerate(texts))[::-1]
    peak, generated = 0, 0
    while waiting or engine.in_flight():
        while waiting and engine.in_flight() < window:
            i, text = waiting.pop()
            engine.submit(GroupRequest(f"{tag}-{i}", engine.prompt_ids(text), n, tokens, 1.0, 0.95, i,
                                       NO_TRUNCATION, 0.99))
        peak = max(peak, engine.sequences_in_flight())
        generated += sum(len(s.tokens) for r in engine.step() for s in r.samples)
    return {"tokens": generated, "seconds": time.perf_counter() - started, "peak": peak}


def engines(models: dict[str, Path], texts: list[str], n: int, tokens: int) -> list[tuple[str, str, int, dict]]:
    from m1flow.engines.hf import HFEngine
    from m1flow.engines.native import NativeEngine
    from m1flow.engines.vllm_engine import VllmEngine, VllmSettings

    plan = [("vllm", "qwen2", lambda: VllmEngine(VllmSettings(max_num_seqs=len(texts) * n), threads=1)),
            ("hf", "qwen2", lambda: HFEngine(batch_groups=len(texts), group_size=n, device="cpu")),
            ("vllm", "minimax_m1", lambda: VllmEngine(VllmSettings(max_num_seqs=len(texts) * n), threads=1)),
            ("native", "minimax_m1", lambda: NativeEngine(batch_groups=len(texts), group_size=n, device="cpu"))]
    rows = []
    for name, arch, make in plan:
        engine = make()
        engine.load(announce(models[arch]))
        engine_run(engine, texts[:2], n, 8, f"warm-{name}")  # first-call costs out of the timing
        params = sum(p.numel() for p in checkpoint.load_model(models[arch]).parameters())
        rows.append((name, arch, params, engine_run(engine, texts, n, tokens, name)))
        print(f"  {name}: {rows[-1][3]}", flush=True)
        del engine
    return rows


def service_vs_bare(model: Path, texts: list[str], n: int, tokens: int, window: int) -> tuple[dict, dict]:
    """The same prompts through svc_rollout and through the bare engine, `window` groups in flight on
    both sides (the service's max_inflight_groups)."""
    from m1flow.bus import Producer, codec
    from m1flow.bus.admin import ensure_topics
    from m1flow.bus.topics import POLICY, policy_key
    from ops.kafka import Broker
    from kafka import KafkaConsumer

    from ops.launcher import launch
    from m1flow.engines.vllm_engine import VllmEngine, VllmSettings

    bare = VllmEngine(VllmSettings(max_num_seqs=window * n), threads=1)
    bare.load(announce(model))
    engine_run(bare, texts[:2], n, 8, "warm")
    bare_run = engine_run(bare, texts, n, tokens, "bare", window)
    del bare
    run = Path(tempfile.mkdtemp(prefix="m1flow-bench-rollout-"))
    broker = Broker(run / "kafka")
    bootstrap = broker.start()
    try:
        ensure_topics(bootstrap)
        producer = Producer(bootstrap, "bench")
        policy = announce(model)
        producer.send(POLICY, policy_key(policy), policy)
        producer.flush()
        proc = launch("rollout", run, bootstrap, [
            "--engine", "vllm", "--vllm", f'{{"max_num_seqs": {window * n}}}', "--group-size", str(n),
            "--max-new-tokens", str(tokens), "--early-stop-run", str(NO_TRUNCATION),
            "--max-inflight-groups", str(window), "--max-ahead-versions", "1e9", "--torch-threads", "1"])
        consumer = KafkaConsumer("rollouts", bootstrap_servers=bootstrap, group_id="bench", auto_offset_reset="earliest",
                                 max_partition_fetch_bytes=8 << 20)
        try:
            warm = [events.Prompt(header=codec.header("bench"), prompt_id=f"warm-{i}", text=t, group_size=n,
                                  max_new_tokens=8) for i, t in enumerate(texts[:2])]
            _publish_and_wait(producer, warm, consumer, n)
            prompts = [events.Prompt(header=codec.header("bench"), prompt_id=f"p{i}", text=t, task_type="arith")
                       for i, t in enumerate(texts)]
            service_run = _publish_and_wait(producer, prompts, consumer, n)
        finally:
            consumer.close()
            proc.stop()
    finally:
        broker.stop()
    return service_run, bare_run


def _publish_and_wait(producer, prompts, consumer, n: int) -> dict:
    """Publish the prompts, read rollouts until every sample of them is out; count their tokens."""
    from m1flow.bus import codec
    from m1flow.bus.topics import PROMPTS

    started = time.perf_counter()
    for p in prompts:
        producer.send(PROMPTS, p.prompt_id, p)
    producer.flush()
    values: list[bytes] = []
    while len(values) < len(prompts) * n:
        for records in consumer.poll(timeout_ms=50).values():
            values += [r.value for r in records]
    seconds = time.perf_counter() - started
    rollouts = [codec.decode(v, events.Rollout) for v in values]
    assert {r.prompt_id for r in rollouts} == {p.prompt_id for p in prompts}
    return {"tokens": sum(len(r.token_ids) for r in rollouts), "seconds": seconds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prompts", type=int, default=32, help="prompts per engine run; groups in flight in part 2")
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--service-prompts", type=int, default=128)
    ap.add_argument("--skip-service", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    texts = [p.text for p in problems(seed=5, n=max(args.prompts, args.service_prompts), max_operand=99)]
    models = save_models(Path(tempfile.mkdtemp(prefix="m1flow-bench-models-")))
    print(f"engines: {args.prompts} prompts x n={args.n} x {args.tokens} new tokens, T=1, top-p 0.95, "
          f"log-probs returned, 1 torch thread", flush=True)
    rows = engines(models, texts[: args.prompts], args.n, args.tokens)
    hf = next(r[3] for r in rows if r[0] == "hf")
    hf_rate = hf["tokens"] / hf["seconds"]
    print("\n| engine | model | parameters | sequences | peak in flight | tokens | mean length | s | tokens/s | vs hf |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, arch, params, r in rows:
        rate = r["tokens"] / r["seconds"]
        seqs = args.prompts * args.n
        print(f"| {name} | {arch} | {params / 1e6:.2f}M | {seqs} | {r['peak']} | {r['tokens']} | "
              f"{r['tokens'] / seqs:.1f} | {r['seconds']:.2f} | {rate:.0f} | {rate / hf_rate:.2f} |")
    if args.skip_service:
        return
    texts = texts[: args.service_prompts]
    print(f"\nservice vs bare vLLM: {len(texts)} prompts x n={args.n} x {args.tokens} new tokens, "
          f"{args.prompts} groups in flight", flush=True)
    service, bare = service_vs_bare(models["qwen2"], texts, args.n, args.tokens, args.prompts)
    print("\n| side | tokens | s | tokens/s | ratio |")
    print("|---|---|---|---|---|")
    bare_rate = bare["tokens"] / bare["seconds"]
    for name, r in (("bare vLLM engine (in process)", bare), ("svc_rollout (Kafka in and out)", service)):
        rate = r["tokens"] / r["seconds"]
        print(f"| {name} | {r['tokens']} | {r['seconds']:.2f} | {rate:.0f} | {rate / bare_rate:.3f} |")


if __name__ == "__main__":
    main()
