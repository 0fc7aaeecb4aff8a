"""`python -m m1flow`, kept for the commands people and older images type: the operator's CLI lives in
`ops/` (`python -m ops`, `bin/m1flow`). This script is not the library: nothing imports it, and it is
the one file under m1flow/ that may name the operator layer (tests/test_layering.py checks that it
names nothing else)."""
import sys

from ops.cli import main

sys.exit(main())
