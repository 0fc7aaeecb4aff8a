"""Who may do what on the bus and over gRPC: one principal per service of SERVICES, least privilege.

The table is the one docs/security.md shows. A principal is the CN of the service's certificate
(its name in SERVICES); a service missing from the table gets no rights at all (the broker
denies what no ACL allows), and tests/test_services_list.py fails until it has a row. Groups are
the default `m1flow-<service>`, granted as a prefix: a replay (`m1flow replay`) runs the service
under its own principal in a group `m1flow-<service>-...` and writes `<topic>.<suffix>`, which
the prefixed WRITE on `<topic>.` allows (copies nothing live reads); the operator creates those
topics. Operators act as the `admin` super user (topics, ACLs, `m1flow control`).

GRPC, beside it, is who may call each gRPC method: the callers the code has (svc_*/client.py and
ops/), nobody else. Every service gets it whole (`grpc_methods`, M1FLOW_GRPC_METHODS: local stacks
from here, compose and the chart from deploy/helm/m1flow/files/service.env, which a test keeps
equal) and one interceptor (m1flow.security.grpc_tls.MethodAccess) enforces its rows in secure mode.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from m1flow.bus.admin import admin_client
from ops.services import NAMES
from m1flow.security.config import SecurityConfig


@dataclass(frozen=True)
class Grants:
    read: tuple[str, ...] = ()  # topics it consumes (as its group or by assignment)
    write: tuple[str, ...] = ()  # topics it produces to
    describe: tuple[str, ...] = ()  # topics whose end offsets it reads (lag), without reading records
    group: bool = True  # joins and commits as its own group m1flow-<service>
    describe_groups: tuple[str, ...] = ()  # other groups whose committed offsets it reads (pacing)
    describe_group_prefix: str = ""  # every group under this prefix (the monitor's lag view)
    extra: dict[str, str] = field(default_factory=dict)


OUT = ("metrics", "dlq")  # every stream worker writes its metrics and dead letters
ACLS: dict[str, Grants] = {
    "sandbox": Grants(group=False),  # touches no topic
    "reward": Grants(read=("rollouts", "control"), write=("scored", *OUT)),
    "learner": Grants(read=("scored", "control"), write=("policy", *OUT)),  # control: set_correction
    "rollout": Grants(read=("prompts", "policy", "control"), write=("rollouts", *OUT), describe=("scored",),
                      describe_groups=("m1flow-reward", "m1flow-learner")),
    "monitor": Grants(read=("rollouts", "scored", "metrics", "control", "dlq", "policy", "evals"),
                      write=("control", *OUT), describe_group_prefix="m1flow-"),
    "source": Grants(read=("prompts", "policy", "control", "source_state"),
                     write=("prompts", "source_state", "dlq"), describe_groups=("m1flow-rollout",)),
    # follows `policy` and `control` as its group; reads `evals` back on start (what it published already)
    "eval": Grants(read=("policy", "control", "evals"), write=("evals", *OUT)),
}


OPERATOR = "admin"  # the operator's principal: a Kafka super user, and an ordinary caller on gRPC
# The methods of the proto's `<Name>Service` each service serves, and the principals that may call
# each (health answers any principal of the CA). Source and eval serve none.
GRPC: dict[str, dict[str, tuple[str, ...]]] = {
    "sandbox": {"Execute": ("reward",), "RunTests": ("reward",)},  # runs programs: the reward service's only
    # one answer scored by hand (the pipeline scores from `rollouts`); programs never: svc_reward refuses
    # a kind that runs in the sandbox over this method, whoever calls
    "reward": {"Score": (OPERATOR,)},
    "learner": {"Status": (OPERATOR,)},
    # sampling by hand (svc_rollout.client.generate); svc_eval samples with an engine of its own
    "rollout": {"Generate": (OPERATOR,)},
    # `m1flow report`, `m1flow cluster status`, the demo, the chaos run's checks: all as the operator
    "monitor": {"Report": (OPERATOR,)},
    "source": {},
    "eval": {},
}


def grpc_service(name: str) -> str:
    """The proto service svc_<name> serves (`m1flow.v1.RewardService`)."""
    return f"m1flow.v1.{name.capitalize()}Service"


def grpc_methods(names: tuple[str, ...] = NAMES) -> dict[str, list[str]]:
    """GRPC as the services take it: full method name (`/m1flow.v1.RewardService/Score`) -> principals."""
    return {f"/{grpc_service(name)}/{method}": sorted(callers)
            for name in names for method, callers in sorted(GRPC.get(name, {}).items())}


def grpc_methods_json() -> str:
    """grpc_methods() as one line of JSON: M1FLOW_GRPC_METHODS (files/service.env holds this line)."""
    import json

    return json.dumps(grpc_methods(), separators=(",", ":"))


def group_prefix(name: str) -> str:
    """The consumer groups service `name` may use: `m1flow-<name>` and its replays' `m1flow-<name>-...`
    (no service's name is the start of another's: tests/test_services_list.py)."""
    return f"m1flow-{name}"


def bindings(name: str):  # noqa: ANN201 - list[kafka.admin.ACL]
    """The ACLs that give service `name` its row of the table (allow only; nothing else is allowed)."""
    from kafka.admin import (ACL, ACLOperation, ACLPermissionType, ACLResourcePatternType, ResourcePattern,
                             ResourceType)

    grants = ACLS.get(name, Grants(group=False))
    principal = f"User:{name}"

    def allow(op, rtype, resource: str, pattern=ACLResourcePatternType.LITERAL):  # noqa: ANN001
        return ACL(principal, "*", op, ACLPermissionType.ALLOW, ResourcePattern(rtype, resource, pattern))

    prefixed = ACLResourcePatternType.PREFIXED
    out = [allow(ACLOperation.READ, ResourceType.TOPIC, t) for t in grants.read]
    out += [allow(ACLOperation.WRITE, ResourceType.TOPIC, t) for t in grants.write]
    out += [allow(ACLOperation.DESCRIBE, ResourceType.TOPIC, t)
            for t in (*grants.describe, *grants.read, *grants.write)]
    for topic in grants.write:  # a replay's outputs, `<topic>.<suffix>`
        out += [allow(op, ResourceType.TOPIC, f"{topic}.", prefixed) for op in (ACLOperation.WRITE, ACLOperation.DESCRIBE)]
    if grants.group:  # its live group and its replays' groups
        out.append(allow(ACLOperation.READ, ResourceType.GROUP, group_prefix(name), prefixed))
    out += [allow(ACLOperation.DESCRIBE, ResourceType.GROUP, g) for g in grants.describe_groups]
    if grants.describe_group_prefix:  # ListGroups answers with the groups a principal may describe, so
        # this is all the monitor's lag view needs; DESCRIBE on the cluster would also show it every ACL
        out.append(allow(ACLOperation.DESCRIBE, ResourceType.GROUP, grants.describe_group_prefix,
                         ACLResourcePatternType.PREFIXED))
    return out


def apply_acls(bootstrap: str, admin: SecurityConfig, names: tuple[str, ...] = NAMES) -> int:
    """Create every service's ACLs (idempotent: an existing binding is left as it is); how many."""
    client = admin_client(bootstrap, "m1flow-acls", security=admin)
    try:
        acls = [acl for name in names for acl in bindings(name)]
        result = client.create_acls(acls)
        failed = result.get("failed") or []
        if failed:
            raise RuntimeError(f"creating ACLs failed: {failed}")
        return len(acls)
    finally:
        client.close()


def strimzi_acls(name: str) -> list[dict]:
    """Service `name`'s row as a Strimzi KafkaUser's `spec.authorization.acls` (the chart's
    files/acls.json holds every row: `python -m ops.acls > deploy/helm/m1flow/files/acls.json`)."""
    rules: dict[tuple[str, str, str], list[str]] = {}
    for acl in bindings(name):
        pattern = acl.resource_pattern
        key = (pattern.resource_type.name.lower(), pattern.resource_name,
               "prefix" if pattern.pattern_type.name == "PREFIXED" else "literal")
        rules.setdefault(key, []).append(acl.operation.name.capitalize())
    out = []
    for (rtype, resource, pattern), operations in rules.items():
        where = {"type": rtype} if rtype == "cluster" else {"type": rtype, "name": resource, "patternType": pattern}
        out.append({"resource": where, "operations": sorted(set(operations))})
    return out


if __name__ == "__main__":
    import json
    import sys

    if sys.argv[1:] == ["--grpc"]:  # the M1FLOW_GRPC_METHODS line of files/service.env
        print(f"M1FLOW_GRPC_METHODS={grpc_methods_json()}")
    else:
        print(json.dumps({name: strimzi_acls(name) for name in NAMES}, indent=1))
