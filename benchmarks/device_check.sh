#!/usr/bin/env bash
# The GPU paths on a real GPU machine, in one command (about 8 minutes at most on 8 GPUs):
#   1 node     preflight node against the real driver (NVML through ctypes, every nvidia-smi
#              command the probes run); raw captures saved
#   2 sweep    preflight sweep on NCCL across the local GPUs vs a bare torch.distributed loop
#   3 restart  in-process restart on NCCL, one rank SIGKILLed: kill -> next completed step
#   4 replay   replay with the CUDA RNG state: a replayed dropout step is bitwise the same
# Usage: benchmarks/device_check.sh [--dry-run] [--out FILE.json] [--steps node,sweep,restart,replay]
#        benchmarks/device_check.sh --pack [DIR]   (copy preflight's dependencies for a GPU machine)
# Python: $PYTHON, else .venv/bin/python, else python3 (torch with CUDA, no install needed). When it
# cannot import preflight's CLI, the packages `--pack` copied (DEVICE_CHECK_DEPS, default
# reports/device-check-deps, made with a python of the same version) are put on its path.
# Writes FILE.json (default reports/device-check-<UTC time>/device_check.json) and, beside it,
# the captures and logs; exits 1 when a step failed, 0 otherwise, 2 on a usage error.
# Without a GPU (no nvidia-smi or no /dev/nvidia0) or with --dry-run it prints what it would
# run and exits 0 with "no GPU: skipped".
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
HERE="$ROOT/benchmarks/device_check"
DRY=0
PACK=""
OUT=""
STEPS="node,sweep,restart,replay"
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) DRY=1 ;;
        --out) [ $# -ge 2 ] || { echo "--out needs a file" >&2; exit 2; }; OUT=$2; shift ;;
        --out=*) OUT=${1#--out=} ;;
        --steps) [ $# -ge 2 ] || { echo "--steps needs a list" >&2; exit 2; }; STEPS=$2; shift ;;
        --steps=*) STEPS=${1#--steps=} ;;
        --pack) PACK="$ROOT/reports/device-check-deps"
                if [ $# -ge 2 ] && [ "${2#-}" = "$2" ]; then PACK=$2; shift; fi ;;
        -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print } /^set -u/ { exit }' "$0"; exit 0 ;;
        *) echo "unknown argument: $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done
[ -n "${STEPS//,/}" ] || { echo "--steps names no step (node, sweep, restart, replay)" >&2; exit 2; }
for s in ${STEPS//,/ }; do
    case "$s" in node|sweep|restart|replay) ;; *) echo "unknown step: $s (node, sweep, restart, replay)" >&2; exit 2 ;; esac
done

if [ -n "${PYTHON:-}" ]; then PY=$PYTHON
elif [ -x "$ROOT/.venv/bin/python" ]; then PY="$ROOT/.venv/bin/python"
else PY=$(command -v python3 || echo python3)
fi
if [ -n "$PACK" ]; then
    cd "$ROOT" && exec "$PY" "$HERE/pack.py" "$PACK"
fi
DEPS=${DEVICE_CHECK_DEPS:-$ROOT/reports/device-check-deps}
if ! (cd / && PYTHONPATH="$ROOT" "$PY" -c "import typer, tabulate" >/dev/null 2>&1) && [ -d "$DEPS/site" ]; then
    export PYTHONPATH="$DEPS/site${PYTHONPATH:+:$PYTHONPATH}"
    echo "preflight's dependencies from $DEPS/site ($(cat "$DEPS/python.json" 2>/dev/null | head -c 60)...)"
fi
# preflight not installed in that python: this checkout made importable as installed (shim.py)
if ! (cd / && PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$ROOT" "$PY" -c "import preflight.checks" >/dev/null 2>&1); then
    SHIM=$(mktemp -d "${TMPDIR:-/tmp}/device-check-shim.XXXXXX") && "$PY" "$HERE/shim.py" "$SHIM" \
        && export PYTHONPATH="$SHIM${PYTHONPATH:+:$PYTHONPATH}" && echo "preflight is not installed in $PY: $SHIM/preflight loads this checkout"
    trap 'rm -rf "$SHIM"' EXIT
fi
# each step's limit in seconds: 430 s, with the 5 s grace of each kill and the 20 s of the
# environment probe at most 470 s, under 8 minutes
# (DEVICE_CHECK_LIMIT_<STEP> overrides one, e.g. for a slow machine)
limit() {
    local v
    v="DEVICE_CHECK_LIMIT_$(echo "$1" | tr '[:lower:]' '[:upper:]')"
    if [ -n "${!v:-}" ]; then echo "${!v}"; return; fi
    case "$1" in node) echo 80 ;; sweep) echo 160 ;; restart) echo 110 ;; replay) echo 80 ;; esac
}

DEVICE=${DEVICE_CHECK_DEVICE:-/dev/nvidia0}
why=""
command -v nvidia-smi >/dev/null 2>&1 || why="no nvidia-smi on PATH"
[ -z "$why" ] && [ ! -e "$DEVICE" ] && why="no $DEVICE"

if [ "$DRY" = 1 ] || [ -n "$why" ]; then
    echo "device check (dry run${why:+: $why}); python: $PY"
    for s in ${STEPS//,/ }; do
        echo "step $s (timeout $(limit "$s") s):"
        echo "    timeout $(limit "$s") $PY benchmarks/device_check/$s.py --dir OUT"
        (cd "$ROOT" && timeout 60 "$PY" "$HERE/$s.py" --plan 2>/dev/null) || echo "    (its commands could not be listed with $PY)"
    done
    echo "no GPU: skipped"
    exit 0
fi

if [ -z "$OUT" ]; then OUT="$ROOT/reports/device-check-$(date -u +%Y%m%dT%H%M%SZ)/device_check.json"; fi
DIR=$(dirname "$OUT")
mkdir -p "$DIR/steps" || exit 2
OUT="$(cd "$DIR" && pwd)/$(basename "$OUT")"
DIR=$(dirname "$OUT")
# bounded like every step: a driver that hangs nvidia-smi must not hang the check before its steps
echo "device check: $(timeout --kill-after=2 10 nvidia-smi -L 2>/dev/null | grep -c '^GPU ') GPU(s); python: $PY; output: $OUT"
rm -f "$DIR/environment.json"
(cd "$DIR" && timeout 20 "$PY" "$HERE/environment.py" "$DIR/environment.json") || echo "$PY could not describe itself"
specs=()
for s in ${STEPS//,/ }; do
    t=$(limit "$s")
    echo "step $s (at most $t s) ..."
    rm -f "$DIR/steps/$s.json"  # a record left by an earlier run into this folder is not this one's
    start=$(date +%s.%N)
    (cd "$DIR" && PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$ROOT" timeout --kill-after=5 "$t" \
        "$PY" "$HERE/$s.py" --dir "$DIR") >"$DIR/steps/$s.log" 2>&1
    rc=$?
    took=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
    specs+=("$s:$rc:$took:$t")
done
cd "$ROOT" && "$PY" "$HERE/combine.py" "$DIR" "$OUT" "${specs[@]}"
