"""`python -m looped ...`: the same command line as the `looped` console script."""

import sys

from .cli import main

sys.exit(main())
