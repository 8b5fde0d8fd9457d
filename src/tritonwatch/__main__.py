"""``python -m tritonwatch`` runs the command line."""

import sys

from tritonwatch.commands.cli import main

sys.exit(main())
