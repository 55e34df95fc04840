"""`python -m looped.cli ...` (torchrun --nproc_per_node N -m looped.cli train ...)."""

import sys

from . import main

sys.exit(main())
