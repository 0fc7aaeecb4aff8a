from tests.sandbox.fixtures import jail_sandbox  # noqa: F401  (fixture)
