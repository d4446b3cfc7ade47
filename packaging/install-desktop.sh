#!/usr/bin/env bash
# Install the Framewise launcher, icons and AppStream metainfo for the current user.
# Uses the project's .venv Python (override with PYTHON=...); extra arguments, e.g.
# --exec dist/framewise/framewise-studio, go to packaging/desktop_integration.py.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
if [[ -z "${PYTHON:-}" ]]; then
    if [[ -x "$repo/.venv/bin/python" ]]; then PYTHON="$repo/.venv/bin/python"; else PYTHON=python3; fi
fi
exec "$PYTHON" "$here/desktop_integration.py" install "$@"
