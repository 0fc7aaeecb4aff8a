"""Where a starting source resumes: its newest state (if written for this config), and for a replay
the original run's mixtures, each from the draw it took effect at."""
from __future__ import annotations

import hashlib
import logging
import threading

from m1flow.bus.clients import ClientError
from m1flow.contracts import events
from svc_source.config import SourceConfig
from svc_source.mixture import Mixture, Schedule, history_key
from svc_source.state import load_states

log = logging.getLogger(__name__)


def config_digest(cfg: SourceConfig) -> str:
    """What the sequence depends on; a state written under another digest is not resumed."""
    parts = [str(cfg.seed), str(cfg.block_rows), str(cfg.max_epochs)]
    parts += [s.model_dump_json(exclude={"weight"}) for s in cfg.sources]
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()[:16]


def read_states(cfg: SourceConfig, topic: str, state_key: str, stop: threading.Event) -> dict[str, events.SourceState]:
    """The newest record of every key under `state_key` on `topic`, retried until read (or stopped)."""
    while not stop.is_set():
        try:
            return load_states(cfg.bootstrap, topic, state_key)
        except (TimeoutError, ClientError) as exc:
            log.warning("reading `%s` failed, retrying: %s", topic, exc)
    return {}


def resume_state(cfg: SourceConfig, records: dict[str, events.SourceState], state_key: str) -> events.SourceState | None:
    """The state to resume from: the one under `state_key`, unless another config wrote it."""
    state = records.get(state_key)
    if state is not None and state.config_digest != config_digest(cfg):
        log.warning("the state under %s was written for another config (seed, sources, block): starting over",
                    state_key)
        return None
    return state


def original_schedule(records: dict[str, events.SourceState], state_key: str, config_mixture: Mixture) -> Schedule:
    """A replay draws under the original run's mixtures, each from the draw it took effect at."""
    prefix = history_key(state_key, 0)[:-8]
    base = Mixture.initial(config_mixture.weights, config_mixture.levels)
    versions = sorted((base.restored(r) for k, r in records.items() if k.startswith(prefix)), key=lambda m: m.version)
    if versions:
        log.info("replaying under %s mixture version(s) of the original run", len(versions))
    return Schedule(versions)
