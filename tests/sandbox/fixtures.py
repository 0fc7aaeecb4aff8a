"""The local jail as a pytest fixture, shared by the sandbox and the code/SWE reward tests."""
from __future__ import annotations

import pytest

from svc_sandbox.backends.jail import JailBackend
from svc_sandbox.sandbox import Sandbox


@pytest.fixture(scope="session")
def jail_sandbox() -> Sandbox:
    missing = JailBackend.missing()
    if missing:
        pytest.skip(f"local jail unavailable here: missing {missing} (scripts/system_deps.sh installs it)")
    return Sandbox(JailBackend())
