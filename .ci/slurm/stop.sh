#!/usr/bin/env bash
# Stop the CI cluster started by .ci/slurm/start.sh: cancel its jobs, then end the daemons
# by the PIDs it recorded (TERM, then KILL after 10 s). Safe to run twice.
#
#   bash .ci/slurm/stop.sh [STATE_DIR]
set -uo pipefail
export PATH="$PATH:/usr/sbin:/sbin"
DIR=${1:-${K9_SLURM_DIR:-/tmp/k9bench-slurm}}

if [[ ! -f "$DIR/pids" ]]; then
    echo "slurm-ci: no cluster recorded in $DIR"
    exit 0
fi
if [[ -f "$DIR/etc/slurm.conf" ]]; then
    SLURM_CONF="$DIR/etc/slurm.conf" scancel --quiet --full --user=root 2>/dev/null || true
    # give running batch scripts a moment to exit before their daemon goes
    for _ in $(seq 20); do
        [[ -z "$(SLURM_CONF="$DIR/etc/slurm.conf" squeue -h -t R,CG 2>/dev/null)" ]] && break
        sleep 0.5
    done
fi
mapfile -t pids <"$DIR/pids"
# reverse start order: slurmd, slurmctld, munged
for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill -TERM "${pids[i]}" 2>/dev/null || true
done
for _ in $(seq 100); do
    alive=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    [[ $alive -eq 0 ]] && break
    sleep 0.1
done
for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
rm -f "$DIR/pids"
if [[ -f "$DIR/extra_lo_addr" ]]; then
    ip addr del "$(cat "$DIR/extra_lo_addr")" dev lo 2>/dev/null || true
    rm -f "$DIR/extra_lo_addr"
fi
echo "slurm-ci: cluster in $DIR stopped"
