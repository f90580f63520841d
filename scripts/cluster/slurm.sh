#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, of its own: Debian's slurmctld and slurmd with
# a munge daemon, each with its own key, socket, ports and state folder, so that jobs
# are submitted with sbatch and started with srun (PMIx) exactly as on a research
# cluster. Used by the tests (tests/it/mpi/slurm.rs) and to try scripts/cluster/slurm.sbatch
# before taking it to a real cluster.
#
#   scripts/cluster/slurm.sh up        start the daemons (installs nothing: see below)
#   scripts/cluster/slurm.sh env       print `export SLURM_CONF=...` for sbatch/srun/sinfo
#   scripts/cluster/slurm.sh status
#   scripts/cluster/slurm.sh down      stop them and remove the state folder (idempotent)
#
# Needs root and Debian's packages: apt-get install slurmd slurmctld slurm-client munge.
# Everything lives in $TP_SLURM_DIR (default /tmp/tp-slurm): slurm.conf, the munge key
# and socket, logs, spool and state; the daemons talk on localhost ports 6917/6918
# (TP_SLURM_PORT, +1), away from a system Slurm's 6817/6818. Nothing outside that folder
# is written, and `down` leaves no daemon of ours behind.
# --help (or -h) prints this header and exits, building and running nothing.
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0; }
set -euo pipefail

DIR=${TP_SLURM_DIR:-/tmp/tp-slurm}
PORT=${TP_SLURM_PORT:-6917}
CONF=$DIR/slurm.conf

die() {
  echo "slurm-cluster: error: $*" >&2
  exit 2
}

require() {
  [ "$(id -u)" = 0 ] || die "the daemons need root: run it as root (sudo)"
  for c in slurmctld slurmd munged sbatch srun; do
    command -v "$c" >/dev/null || die "$c is missing: apt-get install slurmd slurmctld slurm-client munge"
  done
}

# A daemon of ours, by its pid file.
alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

down() {
  for pid in "$DIR/slurmd.pid" "$DIR/slurmctld.pid" "$DIR/munged.pid"; do
    if alive "$pid"; then
      kill "$(cat "$pid")" 2>/dev/null || true
      for _ in $(seq 50); do alive "$pid" || break; sleep 0.1; done
      alive "$pid" && kill -9 "$(cat "$pid")" 2>/dev/null || true
    fi
  done
  rm -rf "$DIR"
}

up() {
  require
  down
  mkdir -p "$DIR/state" "$DIR/spool" "$DIR/log"
  chmod 700 "$DIR"
  # munge: a key of our own and a socket in the folder (a system munged keeps its own).
  dd if=/dev/urandom of="$DIR/munge.key" bs=1024 count=1 status=none
  chmod 400 "$DIR/munge.key"
  munged --force --key-file="$DIR/munge.key" --socket="$DIR/munge.socket" \
    --pid-file="$DIR/munged.pid" --log-file="$DIR/log/munged.log" \
    --seed-file="$DIR/munged.seed"
  local host cpus mem
  host=$(hostname -s)
  # At least 8 CPUs declared, whatever the machine has: the documented examples start 4
  # tasks, which a 2-core node would otherwise leave pending forever
  # (Reason=PartitionConfig). Oversubscribed ranks share the cores: slower, same bits.
  # config_overrides makes slurmd take the declared count instead of draining the node.
  cpus=$(nproc)
  ((cpus >= 8)) || cpus=8
  mem=$(awk '/MemTotal/ { print int($2 / 1024 * 0.9) }' /proc/meminfo)
  cat > "$CONF" <<EOF
ClusterName=tp-harness
SlurmctldHost=$host
SlurmctldPort=$PORT
SlurmdPort=$((PORT + 1))
AuthType=auth/munge
AuthInfo=socket=$DIR/munge.socket
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/log/slurmctld.log
SlurmdLogFile=$DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=pmix
JobCompType=jobcomp/none
AccountingStorageType=accounting_storage/none
SlurmdParameters=config_overrides
NodeName=$host CPUs=$cpus RealMemory=$mem State=UNKNOWN
PartitionName=tp Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
EOF
  slurmctld -f "$CONF"
  slurmd -f "$CONF"
  for _ in $(seq 100); do
    if SLURM_CONF=$CONF sinfo -h -o %T 2>/dev/null | grep -q idle; then
      echo "slurm-cluster: up ($host, $cpus CPUs declared on $(nproc) cores); eval \"\$($0 env)\" to use sbatch and srun"
      return 0
    fi
    sleep 0.2
  done
  tail -n 5 "$DIR/log/slurmctld.log" "$DIR/log/slurmd.log" >&2 || true
  down
  die "the node did not come up in 20 s (its logs are above)"
}

case "${1:-}" in
  up) up ;;
  down) down; echo "slurm-cluster: down" ;;
  env) echo "export SLURM_CONF=$CONF" ;;
  status)
    if alive "$DIR/slurmctld.pid"; then SLURM_CONF=$CONF sinfo; else echo "slurm-cluster: not running"; fi
    ;;
  *) die "usage: $0 up|env|status|down" ;;
esac
