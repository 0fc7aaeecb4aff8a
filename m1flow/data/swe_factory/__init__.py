"""The SWE task factory: SWE-bench instances from real Python projects' source distributions by planted,
test-revealed bugs (factory), the bugs (mutations), and the pytest plugin that reports each run
(pytest_outcomes). `m1flow data swe-make` runs it; scripts/swe_factory.sh is the full run."""
from m1flow.data.swe_factory.factory import FactoryConfig, FactoryError, Stats, license_lines, make_instances

__all__ = ["FactoryConfig", "FactoryError", "Stats", "license_lines", "make_instances"]
