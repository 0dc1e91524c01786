#!/bin/bash
# Slurm Prolog: gate every allocation on preflight's node-local checks.
#
# slurm.conf:
#   Prolog=/etc/slurm/prolog.d/preflight.sh
#   PrologFlags=Alloc                  # run at allocation time, on every node of the job
#   PrologEpilogTimeout=60             # above the budget below
#   SchedulerParameters=nohold_on_prolog_fail   # requeued jobs start again elsewhere
#
# On NO-GO `preflight prologue` drains this node with "preflight: <check> <summary>" (an
# admin's own drain reason is never overwritten) and exits 1: Slurm requeues the job and it
# runs on healthy nodes. `preflight resume <nodes>` undoes preflight's drains after repair.
#
# Settings (environment, or edit the defaults):
#   PREFLIGHT        the preflight executable (e.g. /opt/preflight/bin/preflight)
#   PREFLIGHT_BUDGET seconds the checks may take (default 20)
#   PREFLIGHT_ARGS   extra arguments, e.g. "--only gpu.xid --only gpu.health" or "--dry-run"
#   PREFLIGHT_LOG    log file (default /var/log/preflight/prologue.log)
#
# Slurm runs the Prolog with an almost empty environment: set PATH to where the GPU and IB
# tools live.

set -u
export PATH="${PATH:+$PATH:}/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

PREFLIGHT="${PREFLIGHT:-preflight}"
BUDGET="${PREFLIGHT_BUDGET:-20}"
ARGS="${PREFLIGHT_ARGS:-}"
LOG="${PREFLIGHT_LOG:-/var/log/preflight/prologue.log}"
NODE="${SLURMD_NODENAME:-$(hostname -s)}"

mkdir -p "$(dirname "$LOG")" 2>/dev/null || LOG=/dev/null

# The command bounds itself; the outer timeout only guards against a broken installation.
# shellcheck disable=SC2086  # ARGS is a list of words on purpose
out="$(timeout --kill-after=2 "$((BUDGET + 5))" "$PREFLIGHT" prologue --budget "$BUDGET" --node "$NODE" $ARGS 2>&1)"
rc=$?

{
    echo "$(date -Is) job=${SLURM_JOB_ID:-none} node=$NODE rc=$rc"
    [ -n "$out" ] && printf '%s\n' "$out"
} >>"$LOG" 2>/dev/null

if [ "$rc" -ne 0 ] && command -v logger >/dev/null 2>&1; then
    logger -t preflight -p daemon.warning "prologue NO-GO on $NODE (job ${SLURM_JOB_ID:-none}, rc $rc)" || true
fi

exit "$rc"
