"""``python -m fpscope``: the same as the ``fpscope`` command."""

import sys

from .cli import main

sys.exit(main())
