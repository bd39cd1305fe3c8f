#!/usr/bin/env bash
# Install the Debian packages of a one-node SLURM cluster (slurmctld, slurmd, the client
# commands and munge) for CI. Needs root and a Debian/Ubuntu package mirror; run it BEFORE
# entering a loopback-only network namespace. Does nothing when the binaries are present.
#
#   bash .ci/slurm/install.sh
set -euo pipefail

have_all() {
    local bin
    for bin in slurmctld slurmd sbatch scontrol squeue sinfo scancel munged; do
        command -v "$bin" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin" command -v "$bin" >/dev/null 2>&1 || return 1
    done
}

if have_all; then
    echo "slurm-ci: slurm and munge already installed"
    exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
    echo "slurm-ci: installing slurm needs root (apt-get)" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# The packages' init scripts may try to start the daemons; .ci/slurm/start.sh runs its own.
apt-get install -y -qq --no-install-recommends slurmctld slurmd slurm-client munge >/dev/null
echo "slurm-ci: installed $(PATH="$PATH:/usr/sbin" slurmctld -V 2>/dev/null || echo slurm)"
