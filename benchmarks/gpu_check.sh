#!/usr/bin/env bash
# The GPU figures of docs/performance.md ("The device engine"), side by side with the same machine's CPU cores, in
# one call of the device tool per part. Prepare here first (once): bash benchmarks/gpu_stage.sh
#
#   tabular (≤ 8 min; device run timeout_s 540):
#     command: bash benchmarks/gpu_check.sh tabular
#     carry:   [".gpu/whl", ".gpu/data/adbench", ".gpu/data/magic", ".gpu/data/academic", ".gpu/data/adult",
#               ".gpu/data/bank"]
#     - the CUDA tests (tests/test_device.py, tests/test_device_engine.py; Flower's apps left out: no flwr there)
#     - the README's main job, magic GCA (R = 100), on the GPU
#     - the 25 ADBench files × the bench's five methods, seed 100, IID, no peers: 16 CPU workers vs the batched
#       engine on the GPU, each for BENCH_S seconds (runs finished per minute), and the AUROCs of the runs both
#       finished, run for run
#     - the paper's tabular grid (4 presets × the paper's methods × 10 seeds, R = 20) as a sweep: one run after
#       another in one process, 16 workers, the batched engine on the GPU, each for GRID_S seconds
#   vision (≤ 6 min; timeout_s 400):
#     command: bash benchmarks/gpu_check.sh vision
#     carry:   [".gpu/whl", ".gpu/data/fashion_mnist"]
#     - Fashion-MNIST GCA R = 10 on the GPU and on 16 CPU threads, and their AUROCs
#
# A part's steps each run under `timeout`: a step cut short reports what finished. Everything printed is also in
# $OUT/gpu_check_<part>.txt, which the device tool brings back.
set -u
cd "$(dirname "$0")/.."
PART=${1:-tabular}
PY=${PY:-python3}
DATA=${FEDGCA_DATA_DIR:-.gpu/data}
WORK=${WORK:-/tmp/fedgca-gpu-check}
BENCH_S=${BENCH_S:-90}
GRID_S=${GRID_S:-45}
CORES=${CORES:-16}
GPU=${GPU:-cuda}  # GPU=cpu: a smoke test of the script itself on a machine without one
GPU_STACKS=${GPU_STACKS:-8}  # the batched engine's stacks at once, each on its own CUDA stream (not yet tuned)
LOG=${OUT:-$WORK}/gpu_check_$PART.txt
mkdir -p "$WORK" "$(dirname "$LOG")"
exec > >(tee "$LOG") 2>&1
export PYTHONUNBUFFERED=1 PYTHONPATH=src${PYTHONPATH:+:$PYTHONPATH}
if ls .gpu/whl/*.whl > /dev/null 2>&1; then
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .gpu/whl/*.whl \
        && export PYTHONPATH=$PYTHONPATH:/tmp/site
fi
FEDGCA="$PY -m fedgca.cli.main"

# a run's wall seconds and selected AUROC, or the last round it reached if it was stopped
summary() {
    if [ -f "$1/summary.json" ]; then
        $PY -c "import json,sys; d=json.load(open(sys.argv[1])); \
print('wall_seconds', d['wall_seconds'], 'AUROC', round(d['selected']['auroc'], 4))" "$1/summary.json"
    else
        echo "stopped; last metrics row: $(tail -1 "$1/metrics.csv" 2>/dev/null | cut -d, -f1-3)"
    fi
}
say() { echo; echo "## $* ($(date +%T), load $(cut -d' ' -f1-3 /proc/loadavg))"; }
finished() { local n; n=$(grep -c '"event": "finished"' "$1/ledger.jsonl" 2>/dev/null); echo "${n:-0}"; }
# a sweep or bench for at most $1 seconds: "<runs finished> runs in <seconds> s"
timed() {
    local limit=$1 dir=$2; shift 2
    local t0=$SECONDS
    timeout --signal=TERM --kill-after=10 "$limit" "$@" > "$dir.log" 2>&1
    local rc=$? took=$((SECONDS - t0))
    echo "$(finished "$dir") runs in $took s (rc $rc$([ $rc = 124 ] && echo ': stopped at the limit'))"
}

say "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -2
$PY -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, 'sees', torch.cuda.device_count(), 'GPU')"
echo "cores: $(nproc)"

if [ "$PART" = tabular ]; then
    say "CUDA tests (CPU agreement, the device engine on the card)"
    FEDGCA_DATA_DIR=$DATA timeout 90 $PY -m pytest -q -p no:cacheprovider -n 8 tests/test_device.py \
        tests/test_device_engine.py -k "not flower" 2>&1 | tail -5

    say "README main job on the GPU: magic GCA, R = 100"
    rm -rf "$WORK/magic"
    t0=$SECONDS
    timeout 120 $FEDGCA run --dataset magic --method gca --device "$GPU" --data-dir "$DATA" --out "$WORK/magic" \
        > "$WORK/magic.log" 2>&1
    echo "rc $? in $((SECONDS - t0)) s; $(summary "$WORK/magic")"

    say "25 ADBench files, seed 100, IID, no peers: $CORES CPU workers vs the GPU, $BENCH_S s each"
    rm -rf "$WORK/bench_cpu" "$WORK/bench_gpu"
    echo "cpu ($CORES workers): $(timed "$BENCH_S" "$WORK/bench_cpu" $FEDGCA bench "$DATA/adbench" --out "$WORK/bench_cpu" \
        --seeds 100 --peers none --workers "$CORES" --no-plots)"
    echo "gpu (batched engine): $(timed "$BENCH_S" "$WORK/bench_gpu" $FEDGCA bench "$DATA/adbench" --out "$WORK/bench_gpu" \
        --seeds 100 --peers none --executor batched --workers "$GPU_STACKS" --set device="$GPU" --no-plots)"
    $PY benchmarks/agreement.py "$WORK/bench_cpu" "$WORK/bench_gpu"

    say "the paper's tabular grid, 10 seeds, R = 20: $GRID_S s per mode"
    methods=$($PY -c "from fedgca import methods; print(', '.join(repr(m) for m in methods.names(in_paper=True)))")
    for dev in cpu "$GPU"; do
        printf '[base]\nrounds = 20\ndevice = "%s"\n[grid]\ndataset = ["academic", "adult", "bank", "magic"]\nmethod = [%s]\nseed = [%s]\n' \
            "$dev" "$methods" "$(seq -s, 100 100 1000)" > "$WORK/grid_$dev.toml"
    done
    for mode in inproc-1 cpu-all gpu-batched; do
        rm -rf "$WORK/grid_$mode"
        case $mode in
            inproc-1) spec=grid_cpu args=(--workers 0) ;;
            cpu-all) spec=grid_cpu args=(--workers "$CORES") ;;
            gpu-batched) spec=grid_$GPU args=(--executor batched --workers "$GPU_STACKS") ;;
        esac
        echo "$mode: $(timed "$GRID_S" "$WORK/grid_$mode" $FEDGCA sweep "$WORK/$spec.toml" --out "$WORK/grid_$mode" \
            --data-dir "$DATA" "${args[@]}")"
    done
elif [ "$PART" = vision ]; then
    say "Fashion-MNIST GCA, R = 10: the GPU vs $CORES CPU threads"
    for dev in "$GPU" cpu; do
        rm -rf "$WORK/fmnist_$dev"
        t0=$SECONDS
        timeout 170 $FEDGCA run --dataset fashion_mnist --method gca --rounds 10 --device $dev --threads \
            $([ "$dev" = cpu ] && echo "$CORES" || echo 1) --data-dir "$DATA" --out "$WORK/fmnist_$dev" \
            > "$WORK/fmnist_$dev.log" 2>&1
        echo "$dev: rc $? in $((SECONDS - t0)) s; $(summary "$WORK/fmnist_$dev")"
    done
else
    echo "usage: bash benchmarks/gpu_check.sh tabular|vision"
    exit 2
fi
say "done"
