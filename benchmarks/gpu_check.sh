#!/usr/bin/env bash
# The GPU figures of docs/performance.md ("The device engine"), side by side with the same machine's CPU cores, in
# one call of the device tool per part. Prepare here first (once): bash benchmarks/gpu_stage.sh
#
# The device budget is 15 minutes per session, the machine's start and idle time included: the two parts' steps
# sum to ≤ 7 + 4.5 minutes, leaving ~3.5 for the start and the transfers. Run tabular first (the issue's rows),
# vision right after on the still-warm machine.
#
#   tabular (≤ 7 min; device run timeout_s 450):
#     command: bash benchmarks/gpu_check.sh tabular
#     carry:   [".gpu/whl", ".gpu/data/adbench", ".gpu/data/magic", ".gpu/data/academic", ".gpu/data/adult",
#               ".gpu/data/bank"]
#     - the CUDA tests (tests/test_device.py, tests/test_device_engine.py; Flower's apps left out: no flwr there)
#     - the README's main job, magic GCA (R = 100), on the GPU; then where its time goes, part by part (R = 10,
#       benchmarks/profile_run.py, ≤ 30 s)
#     - the 25 ADBench files × the bench's five methods, seed 100, IID, no peers: 16 CPU workers vs the batched
#       engine on the GPU with its stacks in GPU_STACKS processes (--processes), each for BENCH_S seconds
#     - the paper's tabular grid (4 presets × the paper's methods × 10 seeds, R = 20), largest runs first: one run
#       after another in one process (INPROC_S s), 16 workers (GRID_S s), the batched engine on the GPU with its
#       stacks in processes of their own (GPU_GRID_S s)
#   vision (≤ 4.5 min; timeout_s 300):
#     command: bash benchmarks/gpu_check.sh vision
#     carry:   [".gpu/whl", ".gpu/data/fashion_mnist", ".gpu/data/adbench"]
#     - the tabular preset's GMM for 1, 8 and 32 runs: scikit-learn on one CPU thread vs the torch engine's batched
#       fit on the GPU (benchmarks/bench_gmm_full.py, ≤ 30 s)
#     - the K-means backend the same way, for 1, 8 and 32 runs (bench_gmm_full.py --backend kmeans, ≤ 20 s)
#     - an evaluation's detection metrics for 1, 8 and 32 runs: NumPy on the host vs where the scores are, on the
#       GPU (benchmarks/bench_metrics.py, ≤ 15 s)
#     - a Fashion-MNIST GCA round's parts on the GPU, the conv AE's client axis as one grouped convolution (vmap)
#       vs one convolution per client, the CPU's choice (benchmarks/bench_vision.py, ≤ 30 s)
#     - Fashion-MNIST GCA R = 10 on the GPU (FM_GPU_S s at most)
#     - the 25-file bench on the GPU with its GPU_STACKS stacks as threads of one process (THREADS_S s): against the
#       tabular part's --processes figure, what one interpreter lock costs
#     - Fashion-MNIST GCA on 16 CPU threads (FM_CPU_S s: the rounds and epochs it reaches)
#     - the per-round checkpoints the machine's disk takes per second, 1 and 16 processes of 8 runs each
#       (benchmarks/bench_checkpoint_disk.py, ≈ 10 s): whether checkpoints cap the run-rounds a GPU completes
#
# A window's work is what its runs completed, read afterwards here (not on the device's time): the runs' small
# files come back in $OUT/runs_<part>.tgz, and benchmarks/window_work.py turns the rounds they completed into
# protocol FLOPs per second (a stacked engine finishes its runs together at the end: finished runs would miss
# its work); benchmarks/agreement.py pairs finished runs with the same runs computed on a CPU.
# A part's steps each run under `timeout`: a step cut short reports what finished. Everything printed is also in
# $OUT/gpu_check_<part>.txt, which the device tool brings back.
set -u
cd "$(dirname "$0")/.."
PART=${1:-tabular}
PY=${PY:-python3}
DATA=${FEDGCA_DATA_DIR:-.gpu/data}
WORK=${WORK:-/tmp/fedgca-gpu-check}
BENCH_S=${BENCH_S:-55}
INPROC_S=${INPROC_S:-30}
GRID_S=${GRID_S:-30}
GPU_GRID_S=${GPU_GRID_S:-45}
FM_GPU_S=${FM_GPU_S:-90}  # R = 10: over 90 s, R = 100 cannot make the issue's 15 minutes anyway
THREADS_S=${THREADS_S:-40}
FM_CPU_S=${FM_CPU_S:-35}
CORES=${CORES:-16}
GPU=${GPU:-cuda}  # GPU=cpu: a smoke test of the script itself on a machine without one
# the batched engine's stacks at once, each on its own CUDA stream (not yet tuned on a card): with --processes each
# in a worker process of its own (one core each), else threads of one process
GPU_STACKS=${GPU_STACKS:-16}
BACK=${OUT:-$WORK-out}  # what comes back from the device machine
LOG=$BACK/gpu_check_$PART.txt
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
# a sweep or bench for at most $1 seconds: "<runs finished> runs in <seconds> s" and a "window" line for
# benchmarks/window_work.py
timed() {
    local limit=$1 dir=$2; shift 2
    local t0=$SECONDS
    timeout --signal=TERM --kill-after=10 "$limit" "$@" > "$dir.log" 2>&1
    local rc=$? took=$((SECONDS - t0))
    echo "$(finished "$dir") runs in $took s (rc $rc$([ $rc = 124 ] && echo ': stopped at the limit')); window $(basename "$dir") $took"
}
# the runs' small files (no checkpoints, models or per-row scores), after every step: a part stopped at the
# device's limit still brings back what finished
keep() {
    tar czf "$BACK/runs_$PART.tgz.tmp" -C "$WORK" --exclude='*.pt' --exclude=clients --exclude=test_rows.csv \
        --exclude=metrics_clients.csv --exclude=.lock . 2>/dev/null && mv "$BACK/runs_$PART.tgz.tmp" "$BACK/runs_$PART.tgz"
    grep -rh "capture failed" "$WORK"/*.log 2>/dev/null | sort | uniq -c | head -3
}

say "machine"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -2
$PY -c "import torch; print('torch', torch.__version__, 'CUDA', torch.version.cuda, 'sees', torch.cuda.device_count(), 'GPU')"
echo "cores: $(nproc)"
rm -rf "${WORK:?}"/*
DMON=
command -v nvidia-smi > /dev/null && { nvidia-smi dmon -s u -d 2 -o T > "$BACK/dmon_$PART.txt" 2>&1 & DMON=$!; }

if [ "$PART" = tabular ]; then
    say "CUDA tests (CPU agreement, the device engine on the card)"
    FEDGCA_DATA_DIR=$DATA timeout 75 $PY -m pytest -q -p no:cacheprovider -n 8 tests/test_device.py \
        tests/test_device_engine.py -k "not flower" -rfE 2>&1 | grep -v "Warning\|^  \|^$" | tail -12

    say "README main job on the GPU: magic GCA, R = 100"
    rm -rf "$WORK/magic"
    t0=$SECONDS
    timeout 60 $FEDGCA run --dataset magic --method gca --device "$GPU" --data-dir "$DATA" --out "$WORK/magic" \
        > "$WORK/magic.log" 2>&1
    echo "rc $? in $((SECONDS - t0)) s; $(summary "$WORK/magic")"
    keep

    say "where the README job's time goes on the GPU: magic GCA, R = 10, part by part"
    timeout 30 $PY benchmarks/profile_run.py --rounds 10 --device "$GPU" --data-dir "$DATA" 2>&1 | grep -v "^USDT"

    say "25 ADBench files, seed 100, IID, no peers: $CORES CPU workers vs the GPU, $BENCH_S s each"
    rm -rf "$WORK/bench_cpu" "$WORK/bench_gpu"
    echo "cpu ($CORES workers): $(timed "$BENCH_S" "$WORK/bench_cpu" $FEDGCA bench "$DATA/adbench" --out "$WORK/bench_cpu" \
        --seeds 100 --peers none --workers "$CORES" --no-plots)"
    echo "gpu (batched engine): $(timed "$BENCH_S" "$WORK/bench_gpu" $FEDGCA bench "$DATA/adbench" --out "$WORK/bench_gpu" \
        --seeds 100 --peers none --executor batched --workers "$GPU_STACKS" --processes --set device="$GPU" --no-plots)"
    keep

    say "the paper's tabular grid, 10 seeds, R = 20, largest runs first"
    methods=$($PY -c "from fedgca import methods; print(', '.join(repr(m) for m in methods.names(in_paper=True)))")
    for dev in cpu "$GPU"; do
        printf '[base]\nrounds = 20\ndevice = "%s"\n[grid]\ndataset = ["academic", "adult", "bank", "magic"]\nmethod = [%s]\nseed = [%s]\n' \
            "$dev" "$methods" "$(seq -s, 100 100 1000)" > "$WORK/grid_$dev.toml"
    done
    for mode in inproc-1 cpu-all gpu-batched; do
        rm -rf "$WORK/grid_$mode"
        case $mode in
            inproc-1) spec=grid_cpu limit=$INPROC_S args=(--workers 0) ;;
            cpu-all) spec=grid_cpu limit=$GRID_S args=(--workers "$CORES") ;;
            gpu-batched) spec=grid_$GPU limit=$GPU_GRID_S args=(--executor batched --workers "$GPU_STACKS" --processes) ;;
        esac
        echo "$mode: $(timed "$limit" "$WORK/grid_$mode" $FEDGCA sweep "$WORK/$spec.toml" --out "$WORK/grid_$mode" \
            --data-dir "$DATA" --order longest-first "${args[@]}")"
        keep
    done
elif [ "$PART" = vision ]; then
    say "the tabular GMM (full, K = 80, magic's 2,472 codes): scikit-learn one run after another vs the torch engine's batch"
    timeout 30 $PY benchmarks/bench_gmm_full.py --device "$GPU" --runs 1 8 32 --repeat 1 2>&1 | grep -v "^USDT"
    say "the K-means backend (10 inits, K = 80, magic's shape): scikit-learn one run after another vs the torch engine's batch"
    timeout 20 $PY benchmarks/bench_gmm_full.py --backend kmeans --device "$GPU" --runs 1 8 32 --repeat 1 2>&1 | grep -v "^USDT"
    say "an evaluation's detection metrics (magic's 10 clients × 13,376 test rows): NumPy on the host vs on the GPU"
    timeout 15 $PY benchmarks/bench_metrics.py --device "$GPU" --runs 1 8 32 2>&1 | grep -v "^USDT"
    say "a Fashion-MNIST GCA round's parts on the GPU: one grouped convolution (vmap) vs one per client"
    timeout 30 $PY benchmarks/bench_vision.py --device "$GPU" --data-dir "$DATA" 2>&1 | grep -v "^USDT\|threshold comes"

    say "Fashion-MNIST GCA, R = 10, on the GPU (at most $FM_GPU_S s)"
    rm -rf "$WORK/fmnist_$GPU"
    t0=$SECONDS
    timeout "$FM_GPU_S" $FEDGCA run --dataset fashion_mnist --method gca --rounds 10 --device "$GPU" --threads 1 \
        --data-dir "$DATA" --out "$WORK/fmnist_$GPU" > "$WORK/fmnist_$GPU.log" 2>&1
    echo "$GPU: rc $? in $((SECONDS - t0)) s; $(summary "$WORK/fmnist_$GPU")"
    keep
    if [ -d "$DATA/adbench" ]; then
        say "25 ADBench files on the GPU, $GPU_STACKS stacks as threads of one process (the tabular part: --processes), $THREADS_S s"
        rm -rf "$WORK/bench_gpu_threads"
        echo "gpu (batched engine, one process): $(timed "$THREADS_S" "$WORK/bench_gpu_threads" $FEDGCA bench "$DATA/adbench" \
            --out "$WORK/bench_gpu_threads" --seeds 100 --peers none --executor batched --workers "$GPU_STACKS" \
            --set device="$GPU" --no-plots)"
        keep
    fi
    say "Fashion-MNIST GCA on $CORES CPU threads (at most $FM_CPU_S s: the rounds it reaches)"
    rm -rf "$WORK/fmnist_cpu"
    t0=$SECONDS
    timeout "$FM_CPU_S" $FEDGCA run --dataset fashion_mnist --method gca --rounds 10 --device cpu --threads "$CORES" \
        --data-dir "$DATA" --out "$WORK/fmnist_cpu" > "$WORK/fmnist_cpu.log" 2>&1
    echo "cpu: rc $? in $((SECONDS - t0)) s; $(summary "$WORK/fmnist_cpu")"
    keep
    say "per-round checkpoints the disk under $WORK takes per second (a tabular run's 1.3 MB, and 8 MB)"
    timeout 20 $PY benchmarks/bench_checkpoint_disk.py --processes 1 "$CORES" --runs 8 --mb 1.3 8 --seconds 1.5 \
        --dir "$WORK" 2>&1 | grep -v "^USDT"
else
    echo "usage: bash benchmarks/gpu_check.sh tabular|vision"
    exit 2
fi
say "done"
[ -n "$DMON" ] && kill "$DMON" 2> /dev/null
