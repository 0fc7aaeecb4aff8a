"""The services of the system, once: everything that starts, lists, scales or breaks them reads this.

The order is the start order of `m1flow up` (a service after those it calls or waits for: the
sandbox before the reward service, the learner, which announces v0, before rollout). Adding a
service is one `Service(...)` line here (plus its package, compose entry and docs: see
docs/architecture.md, "Adding a service").
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Service:
    name: str  # `m1flow svc NAME`, `--replicas NAME=N`, process and log names, chaos targets
    cluster_chaos: bool = True  # `docker kill`ed by the cluster's chaos run (the local one hits every service)
    on_demand: bool = False  # started only when given its settings (the prompt source: its datasets)
    setting: str = ""  # on demand: the setting that turns it on, also as M1FLOW_<SETTING> (sources, eval_sets)

    @property
    def module(self) -> str:
        """The package `python -m` runs."""
        return f"svc_{self.name}"

    @property
    def container(self) -> str:
        """The service's name in docker-compose.yml (containers <project>-<container>-<n>)."""
        return self.module


SERVICES: tuple[Service, ...] = (
    Service("sandbox"),
    Service("reward"),
    Service("learner"),
    Service("rollout"),
    Service("source", cluster_chaos=False, on_demand=True, setting="sources"),  # after the learner: its batch
    # sizes the lead
    # after the learner, whose `policy` it evaluates; on demand in compose too (profile eval), so its faults
    # are the local chaos run's
    Service("eval", cluster_chaos=False, on_demand=True, setting="eval_sets"),
    Service("monitor", cluster_chaos=False),  # observes the loop; the cluster's chaos breaks the loop itself
)
NAMES: tuple[str, ...] = tuple(s.name for s in SERVICES)
BY_NAME: dict[str, Service] = {s.name: s for s in SERVICES}
ON_DEMAND: tuple[str, ...] = tuple(s.name for s in SERVICES if s.on_demand)


def service(name: str) -> Service:
    """The service called `name`; a typo names the known ones."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise ValueError(f"unknown service {name!r}; known: {', '.join(NAMES)}") from None
