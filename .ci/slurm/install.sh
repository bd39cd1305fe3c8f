#!/usr/bin/env bash
# Install the Debian packages of a one-node SLURM cluster (slurmctld, slurmd, the client
# commands and munge) for CI, and make the host name resolve to 127.0.0.1. Needs root and a
# Debian/Ubuntu package mirror; run it BEFORE entering a loopback-only network namespace.
# Installs nothing when the binaries are present.
#
#   bash .ci/slurm/install.sh
set -euo pipefail

have_all() {
    local bin
    for bin in slurmctld slurmd sbatch scontrol squeue sinfo scancel munged; do
        command -v "$bin" >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin" command -v "$bin" >/dev/null 2>&1 || return 1
    done
}

# The node is the short host name, which must resolve to a loopback address (slurmctld and
# slurmd bind to it, and CI runs them in a loopback-only network namespace).
node=$(uname -n)
node=${node%%.*}
first=$(getent ahostsv4 "$node" 2>/dev/null | awk '{print $1; exit}' || true)
[[ -n "$first" ]] || first=$(getent hosts "$node" 2>/dev/null | awk '{print $1; exit}' || true)
case "$first" in
    127.*) ;;
    *)
        [[ $(id -u) -eq 0 ]] || { echo "slurm-ci: '$node' must resolve to 127.0.0.1 (edit /etc/hosts as root)" >&2; exit 1; }
        echo "slurm-ci: host name '$node' resolves to '${first:-nothing}'; putting '127.0.0.1 $node' first in /etc/hosts"
        hosts=$(cat /etc/hosts)
        # rewrite in place: /etc/hosts is often a bind mount that cannot be replaced by rename
        printf '127.0.0.1 %s\n%s\n' "$node" "$hosts" >/etc/hosts
        ;;
esac

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
