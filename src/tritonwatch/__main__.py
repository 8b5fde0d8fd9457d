"""``python -m tritonwatch`` runs the command line."""

import sys

from tritonwatch.cli import main

sys.exit(main())
