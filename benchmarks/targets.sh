#!/usr/bin/env bash
# The GPU targets of issues 41, 42 and 43 in one call, random weights at the released shapes.
#
#   benchmarks/targets.sh OUT [STEP ...]        # every step by default, in this order:
#
#   decode       Qwen3-VL-8B and Qwen3.5-9B decode, bf16 and FP8, against the weight-read floor
#                (copy bandwidth measured in the same process); the 9B's first question on a
#                32-frame clip; a 768-frame first question's prefill and keys and values a token.
#                The 8B's part is decode_bench --quick's run (issue 41's new side).
#   stop_prune   Qwen3-VL-8B FP8 with the FP8 KV cache, 2,048 frames in 64k tokens: three Stops at
#                random times in the prefill, then the clip pruned at 0.75 against unpruned (token
#                choice included).
#   encoder      the 8B tower's encoder_bench (issue 41's new side), then a 2,048-frame clip's
#                chunks through the graphs with and without pruning (graph hits).
#   memory       five fresh processes at once through the real engine, FP8 quantized on load:
#                768 frames at the full budget (9B, 8B, and the 8B with the FP8 KV cache), 2,048
#                frames in 64k tokens with the FP8 KV cache (8B, 9B); peak max_memory_reserved and
#                the steady state after load.
#   decode_old   the old tree's decode_bench --quick (issue 41).
#   encoder_old  the old tree's encoder_bench, same counts as the new one's (issue 41).
#
# Each step runs under `timeout` (its own cap, and never past the whole run's BUDGET_S; a step that
# would have less than it needs is skipped), writes its
# benchmark's JSON and Markdown table and its log under OUT/STEP, and a failed step leaves the
# others to run. OUT/steps.tsv records each step's exit code and seconds; the last thing is one
# line per target (benchmarks/targets_summary.py, also OUT/targets.md).
#
# Environment: PYTHON (python3), BUDGET_S (280), CACHE (random checkpoints and compile caches,
# $HOME/.cache/framewise-bench), BASELINE (the old tree, .baseline), OLD_SITE (where the old tree's
# package is installed, /tmp/oldsite), PEAK_OWNERS (N: the memory runs name the N largest owners of
# the memory at the load's peak and at the clip's, memory_bench.py --peak-owners).
#
# The memory step needs the random 8B and 9B checkpoints on disk (about 37 GB): the script writes
# them in the background once the decode step is done, and the memory step waits for them;
# `benchmarks/targets.sh OUT checkpoints` writes them alone, e.g. while the packages install.
#
# Run counts (issue 41), read from docs/benchmarks/log.md: decode --quick as it is (128 new
# tokens, one follow-up: 254 steps, whose p99 lies within 4 % of their mean in the logged 8B runs,
# so their mean is known far inside 3 %; the first question, which leans on the host, as the median
# of five repeats). The encoder: 30 timed requests per workload and mode after 3 warm-ups, and a
# stream of 50 (the logged fused runs put p99 within 8 % of the mean, so 30 requests give the mean
# to about 1 %). Whole runs of one tree differed by up to 4.6 % there (the 448x448 image; 2.5 % at
# 16 frames): more requests do not narrow that, another old/new pair would.

set -u
OUT=${1:?usage: benchmarks/targets.sh OUT [STEP ...]}
shift
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
REPO=$(cd "$(dirname "$0")/.." && pwd)
PYTHON=${PYTHON:-python3}
BUDGET_S=${BUDGET_S:-280}
CACHE=${CACHE:-$HOME/.cache/framewise-bench}
BASELINE=$(cd "$REPO" && realpath -m "${BASELINE:-.baseline}")
OLD_SITE=${OLD_SITE:-/tmp/oldsite}
PEAK_OWNERS=${PEAK_OWNERS:-}
STEPS=${*:-decode stop_prune encoder memory decode_old encoder_old}
SUMMARY_S=10  # kept back for the summary
CLIP_64K=(--frames 2048 --pixels 134217728)  # 2,048 frames within 64k video tokens (2,048 pixels a token)

export PYTHON CACHE OUT BASELINE OLD_SITE PEAK_OWNERS
export FRAMEWISE_CACHE_DIR=$CACHE/compile-new TRITON_CACHE_DIR=$CACHE/compile-new/triton
cd "$REPO" || exit 1
DEADLINE=$((SECONDS + BUDGET_S - SUMMARY_S))

# step NAME CAP_S NEED_S COMMAND...: run COMMAND in OUT/NAME under min(CAP_S, time left), logging
# there; skipped when less than NEED_S (what it cannot do without) is left.
step() {
    local name=$1 cap=$2 need=$3 left=$((DEADLINE - SECONDS))
    shift 3
    mkdir -p "$OUT/$name"
    if ((left < need)); then
        printf '%s\tskipped\t0\n' "$name" >>"$OUT/steps.tsv"
        echo "== $name: skipped, ${left} s left" | tee "$OUT/$name/log.txt"
        return
    fi
    local limit=$((cap < left ? cap : left)) started=$SECONDS
    echo "== $name (at most ${limit} s): $*"
    timeout --kill-after=10 "$limit" "$@" >"$OUT/$name/log.txt" 2>&1
    local code=$?
    printf '%s\t%s\t%s\n' "$name" "$code" "$((SECONDS - started))" >>"$OUT/steps.tsv"
    echo "   exit $code after $((SECONDS - started)) s; last line: $(tail -n 1 "$OUT/$name/log.txt")"
}

write_checkpoints() {
    for size in 8B 3.5-9B; do
        "$PYTHON" benchmarks/memory_bench.py --size "$size" --cache "$CACHE" --prepare || return 1
    done
}

# Five fresh processes at once: torch.cuda.max_memory_reserved is each process's own.
memory_runs() {
    local long=(--dtypes fp8 --scenarios long --new-tokens 8 --cache "$CACHE" --compile-cache "$FRAMEWISE_CACHE_DIR"
                --timeout 140 ${PEAK_OWNERS:+--peak-owners "$PEAK_OWNERS"})
    local wide=(--long-frames 2048 --long-pixels 134217728 --set decoding.kv_cache_dtype=fp8 --label 2048-kvfp8)
    "$PYTHON" benchmarks/memory_bench.py --size 3.5-9B "${long[@]}" --label 768 --out "$OUT/memory/9b-768" &
    "$PYTHON" benchmarks/memory_bench.py --size 8B "${long[@]}" --label 768 --out "$OUT/memory/8b-768" &
    "$PYTHON" benchmarks/memory_bench.py --size 8B "${long[@]}" --set decoding.kv_cache_dtype=fp8 --label 768-kvfp8 \
        --out "$OUT/memory/8b-768-kvfp8" &
    "$PYTHON" benchmarks/memory_bench.py --size 8B "${long[@]}" "${wide[@]}" --out "$OUT/memory/8b-2048" &
    "$PYTHON" benchmarks/memory_bench.py --size 3.5-9B "${long[@]}" "${wide[@]}" --out "$OUT/memory/9b-2048" &
    wait
}

# The old tree's scripts put their repository's root first on sys.path. There its source folder
# framewise/ (which holds no core/) would shadow the installed package, and framewise.core would then
# come from the new tree's editable install; so they run from a copy of their benchmarks/ and tests/
# alone, and `import framewise` finds OLD_SITE's.
old_tree() {
    [[ -d $OLD_SITE/framewise ]] || { echo "no old tree installed in $OLD_SITE"; return 1; }
    local run=$OUT/old-tree-run part
    rm -rf "$run" && mkdir -p "$run" || return 1
    for part in benchmarks tests; do
        [[ -d $BASELINE/$part ]] && cp -r "$BASELINE/$part" "$run/"
    done
    cd "$run" || return 1
    FRAMEWISE_CACHE_DIR=$CACHE/compile-old TRITON_CACHE_DIR=$CACHE/compile-old/triton PYTHONPATH=$OLD_SITE${PYTHONPATH:+:$PYTHONPATH} "$PYTHON" "$@"
}
export -f write_checkpoints memory_runs old_tree

if [[ " $STEPS " == *" checkpoints "* ]]; then
    write_checkpoints
    exit $?
fi
# The checkpoints are written beside the steps after decode (whose first questions lean on the
# host), niced, in their own session where setsid is at hand, so that the whole of it can be stopped.
CHECKPOINTS=
start_checkpoints() {
    if [[ -z $CHECKPOINTS && " $STEPS " == *" memory "* ]]; then
        local session=()
        command -v setsid >/dev/null && session=(setsid)
        "${session[@]}" nice -n 19 bash -c write_checkpoints >"$OUT/checkpoints.log" 2>&1 &
        CHECKPOINTS=$!
    fi
}

for name in $STEPS; do
    [[ $name == stop_prune || $name == encoder || $name == memory ]] && start_checkpoints
    case $name in
    decode)
        step decode 200 60 "$PYTHON" benchmarks/decode_bench.py --sizes 8B,3.5-9B --dtypes bfloat16,fp8 --modes framewise \
            --follow-ups 1 --mode-budgets framewise=90 --long-frames 768 --long-repeats 1 --out "$OUT/decode" ;;
    stop_prune)
        step stop_prune 75 40 "$PYTHON" benchmarks/prefill_chunk_bench.py --size 8B --dtype fp8 --kv-cache fp8 \
            "${CLIP_64K[@]}" --chunks 1024 --repeats 1 --stops 3 --pruning 0.75 --out "$OUT/stop_prune" ;;
    encoder)
        step encoder 75 30 "$PYTHON" benchmarks/encoder_bench.py --towers 8B --runs 30 --warmup 3 --stream 50 \
            --pruning-check 0.75 --out "$OUT/encoder" ;;
    memory)
        echo "== waiting for the checkpoints ($OUT/checkpoints.log)"
        if wait "$CHECKPOINTS"; then
            step memory 150 50 bash -c memory_runs
        else
            printf 'memory\tcheckpoints\t0\n' >>"$OUT/steps.tsv"
            mkdir -p "$OUT/memory" && cp "$OUT/checkpoints.log" "$OUT/memory/log.txt"
        fi
        CHECKPOINTS= ;;
    decode_old)
        step decode_old 90 40 bash -c 'old_tree "$@"' _ benchmarks/decode_bench.py --quick --out "$OUT/decode_old" ;;
    encoder_old)
        step encoder_old 75 30 bash -c 'old_tree "$@"' _ benchmarks/encoder_bench.py --towers 8B --runs 30 --warmup 3 \
            --stream 50 --out "$OUT/encoder_old" ;;
    *)
        echo "unknown step $name" ;;
    esac
done

[[ -n $CHECKPOINTS ]] && { kill -- -"$CHECKPOINTS" || kill "$CHECKPOINTS"; } 2>/dev/null
"$PYTHON" benchmarks/targets_summary.py "$OUT"
