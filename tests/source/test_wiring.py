"""How the source is wired in: `m1flow up` starts it only when configured; its config reads the
`sources:` list of DatasetConfigs and refuses a bad one with the field named."""
from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from ops.services import NAMES as SERVICES
from ops.stack import Stack
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


def test_up_hands_the_source_its_file_with_dataset_paths_made_absolute_against_the_file(tmp_path):
    """The services run from the repository root: `m1flow up --sources` resolves a relative `path:`
    against the sources file's directory and leaves absolute paths, generators and other keys alone."""
    from ops.sources_file import SourcesFileError, resolved_sources

    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "sources.yaml").write_text("group_size: 4\nsources:\n  - path: data/train.parquet\n    weight: 2\n"
                                       "  - path: /abs/tasks.jsonl\n  - generator: arith\n    size: 8\n")
    out = resolved_sources(conf / "sources.yaml", tmp_path / "run")
    cfg = SourceConfig.load(["--config", str(out)], env={})
    assert [s.path for s in cfg.sources] == [str(conf / "data" / "train.parquet"), "/abs/tasks.jsonl", ""]
    assert (cfg.group_size, cfg.sources[0].weight, cfg.sources[2].size) == (4, 2, 8)
    assert out.parent == (tmp_path / "run").resolve() and (conf / "sources.yaml").read_text().startswith("group_size")
    single = tmp_path / "one.json"
    single.write_text(json.dumps({"sources": {"path": "x.jsonl"}}))  # one source, not a list: as svc_source reads it
    assert SourceConfig.load(["--config", str(resolved_sources(single, tmp_path / "run"))], env={}).sources[0].path \
        == str(tmp_path / "x.jsonl")
    for text in ("- path: a.jsonl\n", "sources: [\n"):
        (tmp_path / "bad.yaml").write_text(text)
        with pytest.raises(SourcesFileError, match="bad.yaml"):
            resolved_sources(tmp_path / "bad.yaml", tmp_path / "run")
    with pytest.raises(SourcesFileError, match="cannot be read"):
        resolved_sources(tmp_path / "missing.yaml", tmp_path / "run")
