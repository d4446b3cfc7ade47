"""``python -m framewise.app`` opens the window, like ``framewise-studio``."""

import sys

from framewise.app.gui import main

sys.exit(main())
