"""Train a warm start in a process of its own:  python -m ops.warmstart_job '<WarmStartConfig as JSON>'

Why a process: the training spends most of its time in C (torch's kernels, the tokenizer's trainer),
where the Python signal handler of `m1flow up` cannot run, so Ctrl-C or SIGTERM waited for the call to
return. `up` waits on this process instead (a wait any signal interrupts) and kills it when asked to
stop. The result lands in the cache (ops.warmstart.cached_policy: whole or not at all), where the parent
copies it from.
"""
from __future__ import annotations

import sys

from ops.warmstart import WarmStartConfig, cached_policy


def main(argv: list[str]) -> None:
    cached_policy(WarmStartConfig.model_validate_json(argv[0]))


if __name__ == "__main__":
    main(sys.argv[1:])
