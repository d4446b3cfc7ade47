#!/usr/bin/env bash
# Remove what packaging/install-desktop.sh installed for the current user.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
exec "${PYTHON:-python3}" "$here/desktop_integration.py" uninstall "$@"
