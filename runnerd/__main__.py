"""`python -m runnerd`: the same command line as the `runnerd` script."""

import sys

from runnerd.cli.main import main

sys.exit(main())
