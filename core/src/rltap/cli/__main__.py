"""`python -m rltap.cli`: the `rltap` command, for a venv whose scripts are not on PATH."""

import sys

from rltap.cli.commands import main

sys.exit(main())
