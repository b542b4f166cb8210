"""``python -m msvm`` is the ``msvm`` command."""

import sys

from .cli import main

sys.exit(main())
