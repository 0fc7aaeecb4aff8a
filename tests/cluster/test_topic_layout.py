"""Partition counts and the replication factor come from config (ServiceConfig.topics,
M1FLOW_TOPICS), with the topic table's values as defaults; checked on the real broker."""
from __future__ import annotations

import logging

import pytest
from pydantic import ValidationError

from m1flow.bus.admin import end_offsets, ensure_topics
from m1flow.bus.topics import PROMPTS, ROLLOUTS, TopicLayout
from m1flow.runtime.config import ServiceConfig


def test_layout_from_the_environment_over_the_table():
    config = ServiceConfig.load([], env={"M1FLOW_TOPICS": '{"partitions": {"rollouts": 6}}'})
    assert config.topics.apply(ROLLOUTS).partitions == 6
    assert config.topics.apply(PROMPTS).partitions == PROMPTS.partitions
    assert config.topics.apply(ROLLOUTS.renamed("rollouts.replay")).partitions == 6
    assert ServiceConfig.load([], env={}).topics.replication_factor == 1


@pytest.mark.parametrize("layout, field", [({"partitions": {"rollout": 2}}, "unknown topic 'rollout'"),
                                           ({"partitions": {"scored": 0}}, "topics.partitions.scored"),
                                           ({"replication_factor": 0}, "replication_factor")])
def test_bad_layout_names_the_field(layout, field):
    with pytest.raises(ValidationError, match=field):
        TopicLayout.model_validate(layout)


@pytest.mark.kafka
def test_ensure_topics_creates_the_layouts_partitions_and_leaves_existing_ones(bootstrap, caplog):
    spec = PROMPTS.renamed("prompts.layout-test")
    created = ensure_topics(bootstrap, (spec,), layout=TopicLayout(partitions={"prompts": 3}))
    assert created == ["prompts.layout-test"]
    assert len(end_offsets(bootstrap, "prompts.layout-test")) == 3
    with caplog.at_level(logging.WARNING, logger="m1flow.bus.admin"):
        assert ensure_topics(bootstrap, (spec,), layout=TopicLayout(partitions={"prompts": 5})) == []
    assert len(end_offsets(bootstrap, "prompts.layout-test")) == 3
    assert "has 3 partitions, the layout asks for 5" in caplog.text
