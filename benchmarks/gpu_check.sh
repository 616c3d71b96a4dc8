#!/usr/bin/env bash
# GPU check for `nbscope forecast`: on a machine with an NVIDIA GPU, in under 8 minutes,
#   1. prints the device (nvidia-smi, nbscope info --jax) and keeps the fingerprint,
#   2. runs `nbscope loops --quick` on it (µs per lax.scan iteration on the GPU and pinned to the CPU),
#   3. runs `nbscope bench --size quick` for the groups the forecast uses, when time allows,
#   4. builds a calibrated device entry from those runs (`nbscope forecast --calibrate-from`),
#   5. profiles the seed lecture with `--backends cpu,cuda --programs`,
#   6. prints the forecast of the CPU run (nbscope's table entry for this GPU and the calibrated one)
#      against the GPU run, per cell, with the error.
# Everything it measures lands under $OUT (default ./gpu-check-out): the run store, each run exported as
# JSON, the fingerprint, the calibrated devices.toml and the forecast as JSON, ready to commit as a
# labelled fixture.
#
#   OUT=/tmp/out bash benchmarks/gpu_check.sh [LECTURE]
#
# Without an NVIDIA GPU (no nvidia-smi, no GPU listed, or JAX without CUDA) it stops at once, exit 2.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
LECTURE=${1:-../shared/corpus/numpy_vs_numba_vs_jax.md}
OUT=${OUT:-$PWD/gpu-check-out}
NBSCOPE=${NBSCOPE:-python3 -m nbscope}
mkdir -p "$OUT"
DB="$OUT/nbscope.db"
log() { printf '\n== %s (%ds)\n' "$*" "$((SECONDS - started))"; }
fail() { echo "gpu_check: $*" >&2; exit 2; }

[ -f "$LECTURE" ] || fail "lecture $LECTURE not found (pass its path as the first argument)"
command -v nvidia-smi >/dev/null 2>&1 || fail "nvidia-smi not found: this check needs a machine with an NVIDIA GPU and its driver"
GPU_NAME=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -n 1 | sed 's/ *$//') \
    || fail "nvidia-smi could not list a GPU"
[ -n "$GPU_NAME" ] || fail "nvidia-smi lists no GPU"
python3 - <<'EOF' || fail "JAX does not see a GPU here (install jax[cuda12] or jax[cuda13] matching the driver)"
import sys
import jax
sys.exit(0 if any(d.platform == "gpu" for d in jax.devices()) else 1)
EOF

log "device: $GPU_NAME"
nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv | tee "$OUT/nvidia-smi.csv"
$NBSCOPE info --jax --json > "$OUT/fingerprint.json"
$NBSCOPE info --jax

# The table entry this GPU matches (by its NVML name), if any; the calibrated entry is compared beside it.
TABLE_KEY=$(python3 - "$GPU_NAME" <<'EOF'
import sys
from nbscope.analyse.forecast.devices import load_table, resolve
try:
    print(resolve(load_table(), [sys.argv[1]])[0].key)
except Exception:
    print("")
EOF
)
BASE=${TABLE_KEY:-h100}
echo "table entry: ${TABLE_KEY:-none (the calibrated entry takes its other figures from $BASE)}"

run_id() {  # the newest run of a kind in the store
    python3 - "$DB" "$1" <<'EOF'
import sys
from nbscope.record.store import Store
rows = Store(sys.argv[1]).runs(kind=sys.argv[2], limit=1)
print(rows[0]["id"] if rows else "")
EOF
}

log "nbscope loops --quick"
timeout 120 $NBSCOPE loops --quick --db "$DB" || fail "nbscope loops failed or took over 120 s"
LOOPS=$(run_id loops)
CALIBRATE=(--calibrate-from "$LOOPS")

# Budget: 8 minutes in all; the lecture's two 10 M-step scans alone take ~3 minutes on a T4.
if [ $((SECONDS - started)) -lt 100 ]; then
    log "nbscope bench --size quick (loops, jax, transfer, dispatch)"
    if timeout 90 $NBSCOPE bench --size quick --only loops,jax,transfer,dispatch --db "$DB"; then
        CALIBRATE+=(--calibrate-from "$(run_id bench)")
    else
        echo "bench did not finish in time: calibrating from the loops run alone"
    fi
else
    echo "skipping bench: the loop sweep took long"
fi

log "calibrated device entry"
rm -f "$OUT/devices.toml"
$NBSCOPE forecast "${CALIBRATE[@]}" --db "$DB" --name measured --base "$BASE" -o "$OUT/devices.toml"

log "profile $LECTURE on cpu and cuda"
timeout 270 $NBSCOPE profile "$LECTURE" --backends cpu,cuda --programs --db "$DB" --json > "$OUT/backends.json" \
    || fail "profiling the lecture failed or took over 270 s (what was measured is in $DB)"
read -r CPU_RUN GPU_RUN < <(python3 - "$OUT/backends.json" <<'EOF'
import json, sys
runs = {r["backend"]: r for r in json.load(open(sys.argv[1]))["backends"]}
cpu, gpu = runs.get("cpu", {}), runs.get("cuda", {})
if not gpu.get("available"):
    sys.exit(f"gpu_check: the cuda run is unavailable: {gpu.get('reason')}")
print(cpu.get("run_id"), gpu.get("run_id"))
EOF
)
[ -n "${GPU_RUN:-}" ] && [ "$GPU_RUN" != None ] && [ "$CPU_RUN" != None ] || fail "the lecture's cpu and cuda runs are not both in $DB"

log "forecast of the CPU run vs the GPU run"
GPUS=measured${TABLE_KEY:+,$TABLE_KEY}
$NBSCOPE forecast "$CPU_RUN" --gpu "$GPUS" --devices "$OUT/devices.toml" --db "$DB" --measured "$GPU_RUN" --all
$NBSCOPE forecast "$CPU_RUN" --gpu "$GPUS" --devices "$OUT/devices.toml" --db "$DB" --measured "$GPU_RUN" --json \
    > "$OUT/forecast.json"

for id in $(python3 -c "from nbscope.record.store import Store; print(' '.join(str(r['id']) for r in Store('$DB').runs(limit=50)))"); do
    $NBSCOPE export "$id" -o "$OUT/run-$id.json" --db "$DB" >/dev/null
done
log "done: outputs in $OUT"
ls -l "$OUT"
