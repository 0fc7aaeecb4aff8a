import sys

from m1flow.ops.cli import main

sys.exit(main())
