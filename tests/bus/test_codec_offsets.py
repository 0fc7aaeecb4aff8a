"""The bus's pure parts: framing, offset bookkeeping, dedupe, config loading, positions."""
from __future__ import annotations

import pytest

from m1flow.bus import codec
from m1flow.bus.dedupe import SeenIds
from m1flow.bus.offsets import OffsetTracker
from m1flow.bus.topics import live_topic, spec, suffixed
from m1flow.contracts import events
from m1flow.runtime.config import ServiceConfig
from ops.topics_io import parse_position


def test_roundtrip_keeps_header_and_payload():
    msg = events.Rollout(header=codec.header("t", group_id="g", rollout_id="g/0", policy_version=3),
                         token_ids=[1, 2, 3], logprobs=[-0.5, -0.25, -1.0])
    back = codec.decode(codec.encode(msg), events.Rollout)
    assert back == msg and back.header.schema_version == codec.SCHEMA_VERSION
    assert back.header.trace.policy_version == 3


@pytest.mark.parametrize("data, reason", [
    (None, "tombstone"), (b"M1", "shorter"), (b"XX\x00\x01abc", "bad magic"),
    (b"M1\x00\x00", "invalid schema version"), (b"M1\x00\x01\xff\xff\xff", "decode"),
])
def test_bad_values_are_rejected_with_a_reason(data, reason):
    with pytest.raises(codec.CodecError, match=reason):
        codec.decode(data, events.Rollout)


def _scored_group(samples: int = 8) -> events.ScoredGroup:
    group = events.ScoredGroup(header=codec.header("t", group_id="g"), group_id="g", group_size=samples)
    for i in range(samples):
        group.samples.add(rollout_id=f"g/{i}", index=i, reward=float(i % 2), token_ids=list(range(40)),
                          logprobs=[-0.5] * 40, prompt_token_ids=[1, 2, 3])
    return group


def _parses(payload: bytes) -> bool:
    try:
        events.ScoredGroup.FromString(payload)
        return True
    except Exception:  # noqa: BLE001
        return False


def test_a_truncated_message_is_rejected_not_parsed_as_a_smaller_one():
    """Protobuf alone parses half a ScoredGroup as a group of fewer samples with the same id."""
    whole = codec.encode(_scored_group())
    half = next(whole[:cut] for cut in range(len(whole) // 2, len(whole)) if _parses(whole[12:cut]))
    assert len(events.ScoredGroup.FromString(half[12:]).samples) < 8  # what protobuf alone accepts
    with pytest.raises(codec.CodecError, match="truncated"):
        codec.decode(half, events.ScoredGroup)
    with pytest.raises(codec.CodecError, match="truncated or padded"):
        codec.decode(whole + b"\x00", events.ScoredGroup)


def test_a_corrupted_byte_fails_the_checksum():
    data = bytearray(codec.encode(_scored_group()))
    data[len(data) // 2] ^= 0x01
    with pytest.raises(codec.CodecError, match="checksum"):
        codec.decode(bytes(data), events.ScoredGroup)


def test_legacy_frames_without_length_and_checksum_still_decode():
    """Topics written before the checked frame replay: b"M1" + version, then the payload."""
    group = _scored_group(3)
    legacy = b"M1\x00\x01" + group.SerializeToString()
    assert codec.decode(legacy, events.ScoredGroup) == group


def test_future_schema_is_rejected_in_frame_and_header():
    msg = events.Rollout(header=codec.header("t"))
    with pytest.raises(codec.CodecError, match="newer"):
        codec.decode(codec.encode(msg, schema_version=codec.SCHEMA_VERSION + 1), events.Rollout)
    msg.header.schema_version = codec.SCHEMA_VERSION + 1
    with pytest.raises(codec.CodecError, match="newer"):
        codec.decode(codec.encode(msg), events.Rollout)


def test_tracker_commits_below_the_oldest_held_record():
    t = OffsetTracker()
    for off in range(5):
        t.track("rollouts", 0, off)
    for off in (0, 1, 3, 4):
        t.done("rollouts", 0, off)
    assert t.committable() == {("rollouts", 0): 2}  # offset 2 is still held
    t.done("rollouts", 0, 2)
    assert t.committable() == {("rollouts", 0): 5} and t.in_flight() == 0
    t.forget({("rollouts", 0)})
    assert t.committable() == {}


def test_seen_ids_is_a_bounded_window():
    seen = SeenIds(capacity=2)
    assert not seen.seen("a") and seen.seen("a")
    seen.seen("b"), seen.seen("c")
    assert "a" not in seen and not seen.seen("")


def test_config_sources_override_in_order(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("run_id: from-file\ngrpc_port: 5\nreplica: 1\n")
    cfg = ServiceConfig.load(["--config", str(f), "--grpc-port", "7"], env={"M1FLOW_REPLICA": "3"})
    assert (cfg.run_id, cfg.grpc_port, cfg.replica) == ("from-file", 7, 3)


def test_a_service_replays_with_a_range_or_redirected_outputs_and_a_rollout_also_with_a_pinned_policy():
    from svc_rollout.config import RolloutConfig

    assert not ServiceConfig().replaying and not RolloutConfig().replaying
    assert ServiceConfig(stop_offsets={"scored/0": 5}).replaying
    assert ServiceConfig(stop_offsets={}, output_suffix="").replaying  # `m1flow replay --output-suffix ''`
    assert ServiceConfig(output_suffix="r1").replaying
    assert RolloutConfig(pinned_policy="file:///run/checkpoints/v3").replaying


def test_positions_and_suffixed_topics():
    assert parse_position("12") == ("offset", 12)
    assert parse_position("ms:1000") == ("time", 1000)
    assert parse_position("1970-01-01T00:00:01+00:00") == ("time", 1000)
    assert spec("scored.replay-1").value_type is events.ScoredGroup
    assert (live_topic("scored.replay-1"), live_topic("scored")) == ("scored", "scored")
    assert (suffixed("scored", "r1"), suffixed("scored", "")) == ("scored.r1", "scored")
    with pytest.raises(KeyError, match="unknown topic"):
        spec("nope")
