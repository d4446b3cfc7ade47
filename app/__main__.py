"""``python -m app`` opens the window, like ``framewise-studio``."""

import sys

from app.gui import main

sys.exit(main())
