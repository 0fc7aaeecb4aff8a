"""The rollout engines are one Registry (m1flow.engines.ENGINES): the config, the CLI and the
demo accept exactly its names, and each name builds the engine of that name."""
from __future__ import annotations

import argparse

import pytest

from ops.cli import parser
from ops.demo import DemoConfig
from svc_rollout.client import ENGINE_NAMES, known_engine
from svc_rollout.config import RolloutConfig
from m1flow.engines import ENGINES, build


def _engine_choices(command: str) -> tuple[str, ...]:
    sub = next(a for a in parser()._actions if isinstance(a, argparse._SubParsersAction))
    return tuple(next(a for a in sub.choices[command]._actions if a.dest == "engine").choices)


def test_every_reader_of_engine_names_reads_the_registry():
    assert ENGINE_NAMES == ENGINES.names() == ("hf", "native", "vllm")
    assert _engine_choices("up") == _engine_choices("demo") == ENGINE_NAMES
    for name in ENGINE_NAMES:
        assert RolloutConfig(engine=name).engine == DemoConfig(engine=name).engine == known_engine(name) == name


@pytest.mark.parametrize("make", [lambda: RolloutConfig(engine="vlm"), lambda: DemoConfig(engine="vlm"),
                                  lambda: RolloutConfig.load(["--engine", "vlm"], env={})])
def test_an_unknown_engine_is_refused_naming_the_known_ones(make):
    with pytest.raises(ValueError, match=r"unknown rollout engine 'vlm'; known: hf, native, vllm"):
        make()


@pytest.mark.parametrize("name", ENGINE_NAMES)
def test_each_name_builds_its_engine(name):
    engine = build(RolloutConfig(engine=name, device="cpu", batch_groups=2, group_size=2))
    assert engine.name == name
