#!/usr/bin/env bash
# Build the one-folder bundle dist/framewise/ (program: dist/framewise/framewise-studio) with PyInstaller,
# then start it once offscreen with an empty environment to check that it loads the demo model.
#
#   packaging/build_bundle.sh            build and smoke-test
#   packaging/build_bundle.sh --no-smoke build only
#
# Uses the project's .venv Python (override with PYTHON=...) and installs PyInstaller into it if missing.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
PYTHON="${PYTHON:-$repo/.venv/bin/python}"

smoke=1
for argument in "$@"; do
    case "$argument" in
        --no-smoke) smoke=0 ;;
        *) echo "usage: $0 [--no-smoke]" >&2; exit 2 ;;
    esac
done

if ! "$PYTHON" -c "import PyInstaller" 2>/dev/null; then
    # The version range is pyproject.toml's `bundle` extra, pinned by constraints.txt like every dependency.
    requirements=$("$PYTHON" -c 'import tomllib; print(*tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["bundle"])')
    echo "Installing $requirements into $("$PYTHON" -c 'import sys; print(sys.prefix)')"
    "$PYTHON" -m pip install --quiet -c constraints.txt $requirements
fi

start=$(date +%s)
"$PYTHON" -m PyInstaller --noconfirm --clean --log-level WARN \
    --distpath "$repo/dist" --workpath "$repo/build/pyinstaller" "$repo/packaging/framewise.spec"
echo "Built dist/framewise in $(( $(date +%s) - start )) s: $(du -sh dist/framewise | cut -f1)"

if [[ $smoke == 1 ]]; then
    echo "Smoke test: starting the bundle offscreen with an empty environment"
    home="$(mktemp -d)"
    trap 'rm -rf "$home"' EXIT
    env -i HOME="$home" LANG=C.UTF-8 QT_QPA_PLATFORM=offscreen FRAMEWISE_SMOKE=1 \
        timeout 300 "$repo/dist/framewise/framewise-studio" --quit-after-load
fi
