"""GenRM groups through the real reward process, and recalibration on a `control` command."""
from __future__ import annotations

import itertools
import json
import random

import pytest

from m1flow.bus import Producer, codec
from m1flow.bus.topics import CONTROL, ROLLOUTS
from m1flow.contracts import events
from m1flow.rl.advantages import advantages as advantages_of
from ops.stack import Stack

from tests.integration.helpers import records, scored_by_group, wait_for
from tests.integration.test_resilience import rollout

MARGIN = 40  # characters: the length-loving judge ties answers closer than this


def answer(rng: random.Random, tag: str) -> str:
    return " ".join(f"{tag}w{i}" for i in range(rng.randint(3, 40)))


def genrm_rollout(group: str, index: int, size: int, text: str) -> events.Rollout:
    msg = rollout(group, index, size, text, gold="")
    msg.task_type, msg.prompt_text = "open", "Tell me about rivers."
    msg.verifier.CopyFrom(events.VerifierSpec(kind="genrm"))
    return msg


def send_groups(producer: Producer, prefix: str, count: int, size: int, seed: int) -> dict[str, list[str]]:
    rng = random.Random(seed)
    groups = {f"{prefix}-{g}": [answer(rng, f"{prefix}{g}x{i}") for i in range(size)] for g in range(count)}
    for group, texts in groups.items():
        for i, text in enumerate(texts):
            producer.send(ROLLOUTS, group, genrm_rollout(group, i, size, text))
    producer.flush()
    return groups


def genrm_parts(scored: dict) -> list[float]:
    return [s.get("parts", {}).get("genrm", 0.0) for s in sorted(scored["samples"], key=lambda s: s.get("index", 0))]


def metric(bootstrap: str, name: str) -> list[float]:
    return [r["value"].get("value", 0.0) for r in records(bootstrap, "metrics") if r["value"]["name"] == name]


def recalibrate(producer: Producer) -> None:
    control = events.Control(header=codec.header("test"), recalibrate=events.Recalibrate(reason="length drift"))
    producer.send(CONTROL, "recalibrate", control)
    producer.flush()


@pytest.fixture(scope="module")
def boot(tmp_path_factory):
    """The broker's address, with one reward process whose judge loves length."""
    judge = ["--genrm", json.dumps({"judge": "length", "margin": MARGIN})]
    stack = Stack(tmp_path_factory.mktemp("genrm-stack"), service_args={"reward": judge})
    try:
        stack.start(with_demo_policy=False, services=("reward",))
        yield stack.bootstrap
    finally:
        stack.stop()


def test_longer_answers_win_and_recalibration_removes_the_length_preference(boot):
    producer = Producer(boot, "test-genrm")
    recalibrate(producer)  # nothing judged yet: no fit, the service says so and scores on
    wait_for(lambda: metric(boot, "genrm/recalibrate_skipped"), 60, "the skipped recalibration")
    groups = send_groups(producer, "open", count=8, size=4, seed=0)
    wait_for(lambda: set(groups) <= set(scored_by_group(boot)), 90, "the genrm groups scored")
    scored = scored_by_group(boot)
    for group, texts in groups.items():
        sample = scored[group][0]
        parts = genrm_parts(sample)
        assert all(s["status"] == "STATUS_OK" for s in sample["samples"]), sample
        assert all(-1.0 <= p <= 1.0 for p in parts) and min(parts) == -1.0
        lengths = [len(t) for t in texts]
        longest, shortest = lengths.index(max(lengths)), lengths.index(min(lengths))
        assert parts[longest] == max(parts) and parts[shortest] == -1.0, (lengths, parts)
        for i, j in itertools.product(range(4), repeat=2):
            if lengths[i] > lengths[j] + MARGIN:  # a clearly longer answer never scores below a shorter one
                assert parts[i] >= parts[j]
        rewards = [s.get("reward", 0.0) for s in sorted(sample["samples"], key=lambda s: s.get("index", 0))]
        advantages = advantages_of("grpo", rewards)  # what the learner makes of them, as for other kinds
        assert advantages[longest] > 0 > advantages[shortest]

    recalibrate(producer)
    wait_for(lambda: metric(boot, "genrm/length_coef_after"), 60, "the recalibration metrics")
    before, after = metric(boot, "genrm/length_coef_before")[-1], metric(boot, "genrm/length_coef_after")[-1]
    assert before > 1.0 and abs(after) < 0.25 * before, (before, after)
    # every rollout but each reference, and the Swiss games the length preference is fitted on (2 rounds of 2)
    assert metric(boot, "genrm/calibration_records")[-1] == 8 * 3 + 8 * 4
    assert metric(boot, "genrm/calibration_stages")[-1] == 1

    later = send_groups(producer, "later", count=2, size=4, seed=1)
    wait_for(lambda: set(later) <= set(scored_by_group(boot)), 60, "groups after recalibration")
    corrected = [p for g in later for p in genrm_parts(scored_by_group(boot)[g][0])]
    assert set(corrected) <= {-1.0, -0.5, 0.0, 0.5, 1.0}, corrected  # thinning keeps the judge's levels
    # raw, every answer but the (longest) reference scores -1; once the length preference is taken out,
    # losses bought by the reference's length are turned into wins as often as length explains them
    assert any(p == 1.0 for p in corrected), corrected
