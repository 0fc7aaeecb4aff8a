"""How the source is wired in: `m1flow up` starts it only when configured; its config reads the
`sources:` list of DatasetConfigs and refuses a bad one with the field named."""
from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from m1flow.ops.services import NAMES as SERVICES
from m1flow.ops.stack import Stack
from svc_source.config import SourceConfig
from svc_source.service import config_digest


def test_the_stack_starts_the_source_only_when_it_has_sources(tmp_path, monkeypatch):
    monkeypatch.delenv("M1FLOW_SOURCES", raising=False)
    assert "source" in SERVICES
    assert not Stack(tmp_path).configured("source") and Stack(tmp_path).configured("rollout")
    assert Stack(tmp_path, service_args={"source": ["--config", "s.yaml"]}).configured("source")
    monkeypatch.setenv("M1FLOW_SOURCES", '[{"generator": "arith"}]')
    assert Stack(tmp_path).configured("source")


def test_sources_come_from_a_file_and_a_bad_one_names_its_field(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(json.dumps({"sources": [{"path": "a.jsonl", "weight": 2}, {"generator": "arith", "size": 5}]}))
    cfg = SourceConfig.load(["--config", str(path)], env={})
    assert [s.source_name for s in cfg.sources] == ["a", "arith"] and cfg.sources[0].weight == 2
    with pytest.raises(ValidationError, match="exactly one of path and generator"):
        SourceConfig.load(["--sources", '[{"path": "a.jsonl", "generator": "arith"}]'], env={})


def test_the_state_digest_ignores_weights_but_not_seeds():
    base = SourceConfig(sources=[{"generator": "arith", "weight": 1}])
    assert config_digest(base) == config_digest(SourceConfig(sources=[{"generator": "arith", "weight": 3}]))
    assert config_digest(base) != config_digest(SourceConfig(sources=[{"generator": "arith", "seed": 1}]))
    assert config_digest(base) != config_digest(SourceConfig(seed=1, sources=[{"generator": "arith"}]))


def test_a_bad_setting_stops_the_service_with_one_line_naming_it():
    from m1flow.runtime.service import main
    from svc_source.service import SourceService

    with pytest.raises(SystemExit, match=r"^svc_source: invalid settings: sources: .*every source has weight 0"):
        main(SourceService, ["--sources", '[{"generator": "arith", "weight": 0}]'])
