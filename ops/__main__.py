"""`python -m ops`: the operator's CLI (`bin/m1flow` runs it; `python -m m1flow` hands over to it)."""
import sys

from ops.cli import main

sys.exit(main())
