"""The bus's record limit in one place (m1flow.bus.limits): the exact size of a record's batch, the
refusal just over the limit, and every place that configures a broker holding the same number.
The sizes are checked against the real broker in tests/bus/test_producer_clients.py."""
from __future__ import annotations

import re
from pathlib import Path

from m1flow.bus.limits import MESSAGE_MAX_BYTES, oversize, record_size
from m1flow.bus.producer import ProduceError, RecordRefused, refusal
from m1flow.contracts import events
from m1flow.source import STAMP_ROOM, prompt_oversize

ROOT = Path(__file__).resolve().parents[2]


def test_record_size_is_the_batch_a_record_makes_alone():
    assert record_size(None, 0) == 61 + 1 + 6  # batch header, length, empty body: 6 one-byte fields
    assert record_size(b"k", 1) == 61 + 1 + 8  # one-byte key and value
    assert record_size("é", 0) == record_size(b"\xc3\xa9", 0)  # a str key counts its UTF-8
    assert record_size(b"big", MESSAGE_MAX_BYTES - 77) == MESSAGE_MAX_BYTES  # 4-byte varints at this size
    assert record_size(b"k", 63) - record_size(b"k", 64) == -2  # the value's length varint grows a byte at 64


def test_oversize_refuses_exactly_what_is_over_the_limit():
    fits = MESSAGE_MAX_BYTES - 77
    assert oversize(b"big", b"y" * fits) is None
    why = oversize(b"big", b"y" * (fits + 1))
    assert why == f"record too large: {MESSAGE_MAX_BYTES + 1:,} bytes, over the bus's limit of {MESSAGE_MAX_BYTES:,} " \
                  "(message.max.bytes)"
    assert oversize(None, b"y" * 100, limit=100) is not None and oversize(None, b"y" * 10, limit=100) is None


def test_only_a_refusal_of_the_record_itself_is_a_refusal():
    """Too large and invalid: no resend can deliver them. A timeout, an unknown topic, a missing ACL or
    a skewed clock are not the record's fault: they stay a failure to send again."""
    for code, word in ((10, "too_large"), (87, "invalid_record")):
        error = refusal("prompts", code, "Broker: refused", index=3)
        assert isinstance(error, RecordRefused) and error.code == word and error.index == 3
    for code in (None, -192, 3, 29, 32, 7):
        error = refusal("prompts", code, "away", index=1)
        assert type(error) is ProduceError and error.index == 1


def test_a_prompt_over_the_limit_with_the_sources_stamp_is_refused():
    text = "x" * (MESSAGE_MAX_BYTES - 1000)
    prompt = events.Prompt(prompt_id="big/1", text=text)
    assert prompt_oversize(prompt) is None
    bigger = events.Prompt(prompt_id="big/1", text=text + "x" * (1000 - STAMP_ROOM))  # fits only without a stamp
    assert "over the bus's limit of 16,777,216 bytes" in prompt_oversize(bigger)


def test_every_broker_configuration_holds_the_library_limit(tmp_path):
    """The local node (ops/kafka), the compose file and the Helm chart: one number."""
    from ops.kafka.config import BrokerState, write_config

    props = write_config(tmp_path, BrokerState(port=1, controller_port=2, cluster_id="c"), None).read_text()
    assert f"message.max.bytes={MESSAGE_MAX_BYTES}\n" in props
    compose = (ROOT / "docker-compose.yml").read_text()
    assert re.search(r"KAFKA_MESSAGE_MAX_BYTES: (\d+)", compose).group(1) == str(MESSAGE_MAX_BYTES)
    chart = (ROOT / "deploy/helm/m1flow/templates/kafka.yaml").read_text()
    assert re.findall(r'"(?:message|replica\.fetch)\.max\.bytes" (\d+)', chart) == [str(MESSAGE_MAX_BYTES)] * 2
