#!/usr/bin/env bash
# Several hosts on one machine: each a Linux network namespace with its own address,
# joined through veth pairs to one bridge, each host's outgoing link shaped with tc.
# Commands run across them with OpenMPI over TCP, as on a real cluster.
#
#   scripts/cluster/netns.sh up N [--rate R] [--delay D]
#   scripts/cluster/netns.sh run N [--slots S] [--rate R] [--delay D] -- CMD ARGS...
#   scripts/cluster/netns.sh down
#   scripts/cluster/netns.sh status
#
# Hosts tpn-h1..tpn-hN are 10.231.0.1..N/24, the bridge tpn-br 10.231.0.254 (mpirun runs
# in the root namespace and reaches the hosts through it). R is a tc rate (1gbit,
# 200mbit): each host's egress goes through a token bucket (tbf) of that rate, so every
# host has a full-duplex link of R to the switch. D (e.g. 1ms) adds one-way delay with
# netem where the kernel has it; where it does not, the script says so and goes on
# without. `run` brings the hosts up, starts CMD on N x S ranks with mpirun (S slots per
# host, ranks filled host by host, so consecutive ranks - a TP group - share a host), and
# always tears everything down, also on failure or Ctrl-C. `down` is idempotent: it
# leaves no namespace, veth or bridge of ours. Root only (network namespaces).
# --help (or -h) prints this header and exits, building and running nothing.
[[ "${1:-}" == -h || "${1:-}" == --help ]] && { sed -n '2,/^[^#]/s/^# \{0,1\}//p' "$0"; exit 0; }
set -euo pipefail

PREFIX=tpn
BRIDGE=${PREFIX}-br
SUBNET=10.231.0
CIDR=$SUBNET.0/24

die() {
  echo "netns-cluster: error: $*" >&2
  exit 2
}

require_root() {
  [ "$(id -u)" = 0 ] || die "network namespaces need root: run it as root (sudo)"
  command -v ip >/dev/null && command -v tc >/dev/null \
    || die "ip and tc are missing: apt-get install iproute2"
}

hosts() { ip netns list 2>/dev/null | awk '{print $1}' | grep "^${PREFIX}-h[0-9]*$" || true; }

down() {
  for ns in $(hosts); do
    # Stray processes would keep the namespace's links alive.
    for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$ns" 2>/dev/null || true
  done
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep "^${PREFIX}-" || true); do
    ip link del "$link" 2>/dev/null || true
  done
}

# The token bucket: what may leave at the veth's own speed after the link has idled. A
# wire has none, and a large bucket refilled while the ranks compute lets much of each
# all-reduce message through unshaped (measured: 1 Gbit/s tttt ran 20% faster than its
# rate allows with a 125 KB bucket); 16 KB (11 frames; tbf splits larger GSO packets)
# keeps the link close to its rate. TP_NETNS_BURST (bytes) overrides it.
burst_for() {
  echo "${TP_NETNS_BURST:-16384}"
}

tc_rate_bits() {
  local r=${1,,}
  case "$r" in
    *gbit) echo $(( ${r%gbit} * 1000000000 )) ;;
    *mbit) echo $(( ${r%mbit} * 1000000 )) ;;
    *kbit) echo $(( ${r%kbit} * 1000 )) ;;
    *bit) echo "${r%bit}" ;;
    *) die "rate $1: give it as tc does, e.g. 1gbit, 200mbit, 500kbit" ;;
  esac
}

netem_available() {
  local probe=${PREFIX}-probe
  ip link add "$probe" type dummy 2>/dev/null || return 1
  local ok=1
  tc qdisc add dev "$probe" root netem delay 1ms 2>/dev/null && ok=0
  ip link del "$probe" 2>/dev/null || true
  return $ok
}

up() {
  local n=$1 rate=$2 delay=$3
  [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 250 ] || die "N must be 1..250, got $n"
  down
  local use_delay=""
  if [ -n "$delay" ]; then
    if netem_available; then
      use_delay=$delay
    else
      echo "netns-cluster: note: this kernel has no netem qdisc: links get no added delay (only the rate)" >&2
    fi
  fi
  ip link add "$BRIDGE" type bridge
  ip addr add "$SUBNET.254/24" dev "$BRIDGE"
  ip link set "$BRIDGE" up
  for i in $(seq 1 "$n"); do
    local ns=${PREFIX}-h$i veth=${PREFIX}-h$i
    ip netns add "$ns"
    ip link add "$veth" type veth peer name "${veth}p"
    ip link set "${veth}p" netns "$ns"
    ip -n "$ns" link set "${veth}p" name eth0
    ip -n "$ns" addr add "$SUBNET.$i/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    ip link set "$veth" master "$BRIDGE"
    ip link set "$veth" up
    if [ -n "$rate" ]; then
      local burst
      burst=$(burst_for "$rate")
      if [ -n "$use_delay" ]; then
        ip netns exec "$ns" tc qdisc add dev eth0 root handle 1: netem delay "$use_delay"
        ip netns exec "$ns" tc qdisc add dev eth0 parent 1: handle 2: tbf rate "$rate" burst "$burst" latency 200ms
      else
        ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst "$burst" latency 200ms
      fi
    elif [ -n "$use_delay" ]; then
      ip netns exec "$ns" tc qdisc add dev eth0 root netem delay "$use_delay"
    fi
  done
  echo "netns-cluster: $n host(s) up on $CIDR${rate:+, links shaped to $rate}${use_delay:+, $use_delay delay}"
}

status() {
  local hs
  hs=$(hosts)
  if [ -z "$hs" ]; then
    echo "netns-cluster: no hosts up"
    return
  fi
  for ns in $hs; do
    echo "$ns: $(ip -n "$ns" -4 -o addr show dev eth0 | awk '{print $4}') $(ip netns exec "$ns" tc qdisc show dev eth0 | head -1)"
  done
}

run() {
  local n=$1 slots=$2 rate=$3 delay=$4
  shift 4
  [ "$#" -ge 1 ] || die "run needs a command after --"
  command -v mpirun >/dev/null || die "mpirun is missing: apt-get install openmpi-bin libopenmpi-dev"
  # Global: the EXIT trap reads it after this function returns.
  WORK=$(mktemp -d)
  # Whatever happens from here on, the hosts go away.
  trap 'down; rm -rf "${WORK:-}"' EXIT
  up "$n" "$rate" "$delay"
  : >"$WORK/hostfile"
  for i in $(seq 1 "$n"); do echo "$SUBNET.$i slots=$slots" >>"$WORK/hostfile"; done
  # mpirun's remote-shell agent: start the daemon inside the namespace of the host
  # whose address it was given, under that host's own name (a UTS namespace): OpenMPI
  # keys its session directories and shared-memory files by host name, and hosts that
  # share one collide (crashes and hangs).
  cat >"$WORK/agent" <<EOF
#!/usr/bin/env bash
host=\$1; shift
name=${PREFIX}-h\${host##*.}
exec ip netns exec "\$name" unshare --uts -- bash -c "hostname \$name && \$*"
EOF
  chmod +x "$WORK/agent"
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  # Each namespace believes it owns every core: no binding (else all ranks pin to core
  # 0), and one math thread per rank unless the caller says otherwise. `routed direct`
  # avoids the daemons' tree routing, which fails now and then between namespaces.
  # OpenMPI's TCP transport sends a message above its eager limit (64 KiB) only after
  # the receiver's clear-to-send, which waits behind the receiver's own outgoing data on
  # its shaped link: measured on tttt, +90 ms per step at 500 and at 200 Mbit/s (+40%
  # and +30%). Up to EAGER bytes go at once (TP_NETNS_EAGER overrides it; the
  # collectives here are at most a few MB).
  local EAGER=${TP_NETNS_EAGER:-4194304}
  # In the background, so that a signal reaches the trap at once (bash runs traps only
  # between commands) and the trap can stop mpirun before the hosts are torn down.
  mpirun -n $((n * slots)) --hostfile "$WORK/hostfile" \
    --mca plm_rsh_agent "$WORK/agent" \
    --mca routed direct \
    --mca btl self,vader,tcp \
    --mca btl_tcp_eager_limit "$EAGER" --mca btl_tcp_max_send_size "$EAGER" \
    --mca btl_tcp_if_include "$CIDR" --mca oob_tcp_if_include "$CIDR" \
    --bind-to none --map-by slot \
    -x RAYON_NUM_THREADS="${RAYON_NUM_THREADS:-1}" -x PATH \
    $(env | grep -o '^TP_[A-Z_]*' | sed 's/^/-x /') \
    "$@" &
  MPIRUN=$!
  trap 'kill -TERM "$MPIRUN" 2>/dev/null || true; wait "$MPIRUN" 2>/dev/null || true; exit 130' INT TERM
  local status=0
  wait "$MPIRUN" || status=$?
  return $status
}

usage() {
  sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2
  exit 2
}

[ "$#" -ge 1 ] || usage
cmd=$1
shift
case "$cmd" in
  up | run)
    [ "$#" -ge 1 ] || usage
    n=$1
    shift
    rate="" delay="" slots=1
    while [ "$#" -gt 0 ] && [ "$1" != "--" ]; do
      case "$1" in
        --rate) rate=${2:?--rate needs a value}; tc_rate_bits "$rate" >/dev/null; shift 2 ;;
        --delay) delay=${2:?--delay needs a value}; shift 2 ;;
        --slots) slots=${2:?--slots needs a value}; shift 2 ;;
        *) die "unknown option $1 (see $0 without arguments)" ;;
      esac
    done
    require_root
    if [ "$cmd" = up ]; then
      up "$n" "$rate" "$delay"
    else
      [ "${1:-}" = "--" ] || die "run needs -- before the command"
      shift
      run "$n" "$slots" "$rate" "$delay" "$@"
    fi
    ;;
  down) require_root; down; echo "netns-cluster: down" ;;
  status) require_root; status ;;
  *) usage ;;
esac
