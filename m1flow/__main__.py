import sys

from m1flow.cli import main

sys.exit(main())
