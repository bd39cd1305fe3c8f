#!/usr/bin/env bash
# Start a one-node SLURM cluster on loopback for CI and tests: munged, slurmctld and slurmd,
# each as root in the foreground (backgrounded here), with all state under one folder.
#
#   bash .ci/slurm/start.sh [STATE_DIR]        # default: $K9_SLURM_DIR or /tmp/k9bench-slurm
#   source STATE_DIR/env.sh                     # sets SLURM_CONF for sbatch, squeue, scontrol...
#   bash .ci/slurm/stop.sh [STATE_DIR]
#
# The node is the short host name (`uname -n`), which must resolve to a loopback address;
# both daemons listen on loopback only (so it works inside `unshare -n`). It advertises
# 64 CPUs and four A40 GPUs (backed by harmless character devices) so that run_eval.sh's
# own #SBATCH header (--gpus=a40:1, 10 CPUs) is accepted unmodified and array tasks run
# side by side. Ports: $K9_SLURM_CTLD_PORT (16817) and $K9_SLURM_SLURMD_PORT (16818).
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"

DIR=${1:-${K9_SLURM_DIR:-/tmp/k9bench-slurm}}
CTLD_PORT=${K9_SLURM_CTLD_PORT:-16817}
SLURMD_PORT=${K9_SLURM_SLURMD_PORT:-16818}
NODE=$(uname -n)
NODE=${NODE%%.*}
EXTRA_LO_ADDR=127.0.1.1/32

die() { echo "slurm-ci: $*" >&2; exit 1; }

# STATE_DIR is wiped below: only ever a folder this script made (or an empty/absent one)
if [[ -e "$DIR" ]]; then
    [[ -d "$DIR" ]] || die "$DIR exists and is not a folder; give another STATE_DIR"
    if [[ -n "$(ls -A "$DIR")" ]] && ! grep -qs '^# Written by .ci/slurm/start.sh' "$DIR/etc/slurm.conf"; then
        die "refusing to wipe $DIR: it is not empty and was not made by .ci/slurm/start.sh; give a new or empty STATE_DIR"
    fi
fi

for bin in munged slurmctld slurmd sinfo; do
    command -v "$bin" >/dev/null 2>&1 || die "$bin not found; run .ci/slurm/install.sh first"
done
[[ $(id -u) -eq 0 ]] || die "the CI cluster runs its daemons as root; run as root"
if [[ -f "$DIR/pids" ]]; then
    die "$DIR/pids exists: a cluster may be running there; stop it with .ci/slurm/stop.sh $DIR"
fi

rm -rf "$DIR"
mkdir -p "$DIR"/{etc,state,spool,log,run}

# SLURM resolves names with getaddrinfo(AF_INET, AI_ADDRCONFIG), which answers nothing when
# the only IPv4 address around is 127.0.0.1 (a loopback-only namespace such as `unshare -n`).
# A second loopback address on lo makes it answer; stop.sh removes it again.
if ! getent ahostsv4 "$NODE" >/dev/null 2>&1 && command -v ip >/dev/null 2>&1 &&
    ! ip -4 -o addr show | awk '{print $4}' | grep -qv '^127\.0\.0\.1/'; then
    if ip addr add "$EXTRA_LO_ADDR" dev lo 2>/dev/null; then
        echo "$EXTRA_LO_ADDR" >"$DIR/extra_lo_addr"
        echo "slurm-ci: loopback-only network: added $EXTRA_LO_ADDR to lo so that getaddrinfo resolves '$NODE'"
    fi
fi
addr=$(getent ahostsv4 "$NODE" | awk '{print $1; exit}' || true)
case "$addr" in
    127.*) ;;
    *) die "host name '$NODE' resolves to '${addr:-nothing}' (IPv4), not a loopback address; put '127.0.0.1 $NODE' first in /etc/hosts (.ci/slurm/install.sh does)" ;;
esac
mkdir -m 0700 "$DIR/munge-key"
mkdir -m 0755 "$DIR/munge-run"
mkdir -m 0700 "$DIR/munge-lib"
chmod 0755 "$DIR"
dd if=/dev/urandom of="$DIR/munge-key/munge.key" bs=1024 count=1 status=none
chmod 0400 "$DIR/munge-key/munge.key"
MUNGE_SOCKET="$DIR/munge-run/munge.socket.2"

cat > "$DIR/etc/slurm.conf" <<CONF
# Written by .ci/slurm/start.sh: a one-node CI cluster on loopback.
ClusterName=k9ci
SlurmctldHost=${NODE}(127.0.0.1)
SlurmctldPort=${CTLD_PORT}
SlurmdPort=${SLURMD_PORT}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire=5: a requeued job restarts in seconds instead of minutes
AuthInfo=socket=${MUNGE_SOCKET},cred_expire=5
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
StateSaveLocation=${DIR}/state
SlurmdSpoolDir=${DIR}/spool
SlurmctldPidFile=${DIR}/run/slurmctld.pid
SlurmdPidFile=${DIR}/run/slurmd.pid
SlurmctldLogFile=${DIR}/log/slurmctld.log
SlurmdLogFile=${DIR}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
# the node may advertise more CPUs and memory than the machine has
SlurmdParameters=config_overrides
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_interval=2,bf_interval=2
# No DependencyParameters=kill_invalid_depend on purpose: run_eval.sh submits its array merge
# job with --kill-on-invalid-dep=yes, and tests/test_slurm.py checks that this alone cancels
# it when a task fails (clusters' defaults leave such a job pending forever).
ReturnToService=2
KillWait=15
MinJobAge=600
SlurmdTimeout=60
InactiveLimit=0
GresTypes=gpu
NodeName=${NODE} NodeAddr=127.0.0.1 NodeHostname=${NODE} CPUs=64 Sockets=1 CoresPerSocket=64 ThreadsPerCore=1 RealMemory=64000 Gres=gpu:a40:4 State=UNKNOWN
PartitionName=ci Nodes=ALL Default=YES MaxTime=INFINITE State=UP
CONF

# A file-less GPU makes the node invalid: name real character devices.
cat > "$DIR/etc/gres.conf" <<CONF
AutoDetect=off
NodeName=${NODE} Name=gpu Type=a40 File=/dev/null
NodeName=${NODE} Name=gpu Type=a40 File=/dev/zero
NodeName=${NODE} Name=gpu Type=a40 File=/dev/full
NodeName=${NODE} Name=gpu Type=a40 File=/dev/urandom
CONF

cat > "$DIR/env.sh" <<ENV
export SLURM_CONF=${DIR}/etc/slurm.conf
ENV
export SLURM_CONF="$DIR/etc/slurm.conf"

pids=()
start_daemon() {  # name, command...
    local name=$1
    shift
    setsid "$@" </dev/null >"$DIR/log/$name.out" 2>&1 &
    pids+=("$!")
    echo "$!" >>"$DIR/pids"
}

start_daemon munged munged -F --force --key-file="$DIR/munge-key/munge.key" --socket="$MUNGE_SOCKET" \
    --pid-file="$DIR/munge-run/munged.pid" --log-file="$DIR/log/munged.log" --seed-file="$DIR/munge-lib/munged.seed"
for _ in $(seq 50); do [[ -S "$MUNGE_SOCKET" ]] && break; sleep 0.1; done
[[ -S "$MUNGE_SOCKET" ]] || { cat "$DIR/log/munged.out" "$DIR/log/munged.log" >&2 2>/dev/null || true; die "munged did not start"; }

start_daemon slurmctld slurmctld -D -f "$SLURM_CONF"
start_daemon slurmd slurmd -D -f "$SLURM_CONF" -N "$NODE"

state=""
deadline=$((SECONDS + 30))
while ((SECONDS < deadline)); do
    # a daemon that died will not come back: stop waiting at once
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null || { state="a daemon (pid $pid) exited"; break 2; }; done
    state=$(timeout 5 sinfo -h -N -o %t 2>/dev/null | head -n1 || true)
    [[ "$state" == idle ]] && break
    sleep 0.2
done
if [[ "$state" != idle ]]; then
    echo "slurm-ci: node not idle (${state:-no answer}); logs:" >&2
    tail -n 20 "$DIR"/log/*.log "$DIR"/log/*.out >&2 2>/dev/null || true
    bash "$(dirname "$0")/stop.sh" "$DIR" || true
    die "cluster did not come up"
fi
echo "slurm-ci: cluster up (node $NODE idle; state in $DIR; source $DIR/env.sh)"
