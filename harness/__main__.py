"""`python -m tlkv_conformance`: the same as the `tlkv-conformance` command."""

import sys

from .cli import main

sys.exit(main())
