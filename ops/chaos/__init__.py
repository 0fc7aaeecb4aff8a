"""Chaos runs of the local mini-cluster: faults injected into a running `m1flow up`, then the
system's guarantees checked from what it wrote (the topics and the learner's checkpoints)."""
from ops.chaos.faults import Fault, FaultLog, plan
from ops.chaos.invariants import Report, check

__all__ = ["Fault", "FaultLog", "Report", "check", "plan"]
