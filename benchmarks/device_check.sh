#!/usr/bin/env bash
# Device check for `nbscope forecast`: on a machine with any accelerator JAX runs on (an NVIDIA GPU or a TPU),
#   1. prints the device (nbscope info --jax) and keeps the fingerprint,
#   2. runs `nbscope loops --quick` and `nbscope bench --size quick` on it, and builds a calibrated device entry
#      from them (`nbscope forecast --calibrate-from`),
#   3. profiles each lecture twice in real kernels: on the CPU with program data (what the forecast reads) and on
#      the accelerator as it is (no program collection, so its times are the device's own),
#   4. prints the forecast of each CPU run for the table's entry of this device and the calibrated one against
#      the accelerator run, per cell, with the error (`nbscope forecast --measured`; a TPU's compile is forecast
#      and compared too),
#   5. with TRIALS=1, tries on the accelerator each remedy nbscope proposes for the accelerator's run
#      (`nbscope diagnose RUN --try --repeats 1`: a function that fails there kept on the CPU, a warm compile
#      cache, ...), each trial two more runs of the notebook,
#   6. exports every run as JSON beside the store, ready to commit as labelled fixtures (tests/files/device/).
#
#   OUT=/tmp/out [TRIALS=1] bash benchmarks/device_check.sh [LECTURE ...]
#
# Without an accelerator (JAX sees only the CPU) it stops at once, exit 2. gpu_check.sh runs this script.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$SECONDS
if [ $# -eq 0 ]; then set -- ../shared/corpus/numpy_vs_numba_vs_jax.md ../shared/corpus/jax_intro.md; fi
OUT=${OUT:-$PWD/device-check-out}
NBSCOPE=${NBSCOPE:-python3 -m nbscope}
mkdir -p "$OUT"
DB="$OUT/nbscope.db"
log() { printf '\n== %s (%ds)\n' "$*" "$((SECONDS - started))"; }
fail() { echo "device_check: $*" >&2; exit 2; }
for lecture in "$@"; do [ -f "$lecture" ] || fail "lecture $lecture not found"; done

# What JAX runs on here: its platform (gpu, tpu) and the device's kind (Tesla T4, TPU v5 lite).
read -r PLATFORM DEVICE_KIND < <(python3 - <<'PY' || echo "none none"
import jax
device = jax.devices()[0]
print(device.platform if device.platform != "cpu" else "none", device.device_kind.replace(" ", "_"))
PY
)
[ "$PLATFORM" != none ] || fail "JAX sees no accelerator here (only the CPU): this check needs a GPU or TPU machine"
DEVICE_KIND=${DEVICE_KIND//_/ }
JAX_PLATFORM=$([ "$PLATFORM" = gpu ] && echo cuda || echo "$PLATFORM")
log "device: $DEVICE_KIND ($PLATFORM)"
$NBSCOPE info --jax --json > "$OUT/fingerprint.json"
$NBSCOPE info --jax

# The table's entry for this device (by the name JAX or NVML gives it), if any; the calibrated one is beside it.
TABLE_KEY=$(python3 - "$DEVICE_KIND" <<'PY'
import sys
from nbscope.analyse.forecast.devices import load_table, resolve
try:
    print(resolve(load_table(), [sys.argv[1]])[0].key)
except Exception:
    print("")
PY
)
BASE=${TABLE_KEY:-$([ "$PLATFORM" = tpu ] && echo tpu-v5e || echo h100)}
echo "table entry: ${TABLE_KEY:-none (the calibrated entry takes its other figures from $BASE)}"

newest() {  # the newest run of a kind in the store
    python3 - "$DB" "$1" <<'PY'
import sys
from nbscope.record.store import Store
rows = Store(sys.argv[1]).runs(kind=sys.argv[2], limit=1)
print(rows[0]["id"] if rows else "")
PY
}

log "nbscope loops --quick, bench --size quick"
CALIBRATE=()
timeout 150 $NBSCOPE loops --quick --db "$DB" && CALIBRATE+=(--calibrate-from "$(newest loops)") \
    || echo "loops did not finish in 150 s: no loop slope calibrated"
timeout 150 $NBSCOPE bench --size quick --only loops,jax,transfer,dispatch --db "$DB" \
    && CALIBRATE+=(--calibrate-from "$(newest bench)") || echo "bench did not finish in 150 s"
DEVICES=${TABLE_KEY}
if [ ${#CALIBRATE[@]} -gt 0 ]; then
    rm -f "$OUT/devices.toml"
    $NBSCOPE forecast "${CALIBRATE[@]}" --db "$DB" --name measured --base "$BASE" --append-to "$OUT/devices.toml"
    DEVICES=measured${TABLE_KEY:+,$TABLE_KEY}
fi
[ -n "$DEVICES" ] || fail "no table entry for $DEVICE_KIND and nothing calibrated: nothing to forecast for"
DEVICE_FILE=()
[ -f "$OUT/devices.toml" ] && DEVICE_FILE=(--devices "$OUT/devices.toml")

for lecture in "$@"; do
    name=$(basename "$lecture" .md)
    log "profile $name on the CPU (with program data) and on the $PLATFORM"
    timeout 600 $NBSCOPE profile "$lecture" --jax-platform cpu --programs --allow-errors --db "$DB" >/dev/null \
        || fail "the CPU profile of $lecture failed or took over 600 s"
    cpu_run=$(newest profile)
    timeout 600 $NBSCOPE profile "$lecture" --jax-platform "$JAX_PLATFORM" --allow-errors --db "$DB" >/dev/null \
        || fail "the $PLATFORM profile of $lecture failed or took over 600 s"
    device_run=$(newest profile)
    log "forecast of run $cpu_run vs run $device_run"
    $NBSCOPE forecast "$cpu_run" --gpu "$DEVICES" "${DEVICE_FILE[@]}" --db "$DB" --measured "$device_run" --all
    $NBSCOPE forecast "$cpu_run" --gpu "$DEVICES" "${DEVICE_FILE[@]}" --db "$DB" --measured "$device_run" --json \
        > "$OUT/forecast-$name.json"
    if [ "${TRIALS:-0}" = 1 ]; then
        log "diagnose --try of run $device_run: each remedy nbscope proposes, tried on the $PLATFORM"
        timeout 1800 $NBSCOPE diagnose "$device_run" --try --repeats 1 --db "$DB" \
            || echo "the trials of $name did not finish in 1800 s (those that did are stored)"
    fi
done

for id in $(python3 -c "from nbscope.record.store import Store; print(' '.join(str(r['id']) for r in Store('$DB').runs(limit=50)))"); do
    $NBSCOPE export "$id" -o "$OUT/run-$id.json" --db "$DB" >/dev/null
done
log "done: outputs in $OUT"
ls -l "$OUT"
