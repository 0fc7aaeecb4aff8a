"""The operator's layer: what a person runs to start, inspect, replay and break the system.

It sits above the services: `m1flow` (cli), `m1flow up` (stack, launcher, supervisor), the demo, the
compose cluster, chaos and the topic readers live here and may use a service's `client` module; the
library below (`m1flow/`) never imports a service or this package, and no service imports this package.
The services it knows are listed once, in `services.py`.
"""
from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the checkout: services run with it on PYTHONPATH and as cwd
