# shellcheck shell=bash
# netns-lib.sh — the slow-network test bed's namespaces, bridge and tbf shaping,
# sourced by bench/netns-testbed.sh (gccl-bench over MPI) and bench/ddp-testbed.sh
# (PyTorch DDP), so that both build the same network and clean it up the same way.
#
#   NS_WHO=my-script; TAG=$$; source bench/netns-lib.sh
#   ns_probe                      # exit 77 (skipped) where namespaces or tbf cannot be made
#   remove_stale                  # what dead runs of either script left behind
#   NET=$(pick_subnet)            # a free 10.147.K (a /24 nobody here uses)
#   ns_build N RATE CC            # namespaces 0..N-1 at NET.1..NET.N, shaped when RATE is set
#   ns_unshape / ns_shape RATE    # take the shapers off every link, or put them (back) on
#   remove_run "$TAG"             # in the script's EXIT trap: everything ns_build made
#
# Every namespace is a "host" with one interface ($NS_IF) on the /24, joined by a
# veth pair to a bridge in the root namespace; each veth is shaped on both sides with
#   tc qdisc add dev IF root tbf rate RATE burst 256kb latency 20ms
# (netem is not in this kernel), so every host has a full-duplex RATE link to a
# switch. Everything carries the script's process id (namespaces gccltb-PID-K, links
# gtbPIDb/hK/nK), so that concurrent runs do not collide and a dead run's leftovers
# can be told from a live run's. The caller sets NS_WHO (the prefix of messages) and
# TAG before sourcing, and `set -euo pipefail`.

NS_PREFIX=gccltb # namespaces: gccltb-PID-K
IF_PREFIX=gtb    # links: gtbPIDb (bridge), gtbPIDhK (host side), gtbPIDnK (namespace side, then gtb0)
BRIDGE=$IF_PREFIX${TAG}b
NS_IF=gtb0 # every namespace's interface, one name so that per-rank options are the same on all ranks
HOSTS=()   # the namespaces' addresses, filled by ns_build
ns_name() { echo "$NS_PREFIX-$TAG-$1"; }

# ---- cleanup: ours now, and what dead runs left ------------------------------------

# Is pid a live run of a script that uses this file? (A reused pid of another program
# is not.) Both scripts count: one must not remove the other's network mid-run.
live_run() {
  [[ -r /proc/$1/cmdline ]] && tr '\0' ' ' <"/proc/$1/cmdline" | grep -qE '(netns|ddp)-testbed'
}

# Removes the namespaces and links of run `tag`: ends the processes left in its
# namespaces (the ranks and daemons the run started), deletes the host-side veths
# (their peers go with them), the namespaces and the bridge.
remove_run() {
  local tag=$1 ns pid link
  local nss
  nss=$(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$NS_PREFIX-$tag-[0-9]+$" || true)
  for ns in $nss; do
    for pid in $(ip netns pids "$ns" 2>/dev/null || true); do kill -KILL "$pid" 2>/dev/null || true; done
  done
  for _ in $(seq 50); do # until they are gone (5 s at most), so that nothing outlives the run
    local left=""
    for ns in $nss; do left+=$(ip netns pids "$ns" 2>/dev/null || true); done
    [[ -z $left ]] && break
    sleep 0.1
  done
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' |
    grep -E "^$IF_PREFIX${tag}(b|h[0-9]+|n[0-9]+)$" || true); do
    [[ $link == *b ]] || ip link del "$link" 2>/dev/null || true
  done
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$NS_PREFIX-$tag-[0-9]+$" || true); do
    ip netns del "$ns" 2>/dev/null || true
  done
  ip link del "$IF_PREFIX${tag}b" 2>/dev/null || true
}

remove_stale() {
  local tag
  for tag in $( { ip netns list 2>/dev/null | awk '{print $1}' | sed -nE "s/^$NS_PREFIX-([0-9]+)-[0-9]+$/\1/p"
    ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' |
      sed -nE "s/^$IF_PREFIX([0-9]+)(b|h[0-9]+|n[0-9]+)$/\1/p"; } | sort -u); do
    if [[ $tag != "$TAG" ]] && ! live_run "$tag"; then
      echo "$NS_WHO: removing what run $tag left behind" >&2
      remove_run "$tag"
    fi
  done
}

# ---- a /24 nobody here uses ------------------------------------------------------------

ip2int() {
  local IFS=. a b c d
  read -r a b c d <<<"$1"
  echo $(((a << 24) | (b << 16) | (c << 8) | d))
}

# Every IPv4 address and route prefix of this machine, the root namespace and all
# others (so a concurrent test bed's subnet is seen too).
used_prefixes() {
  {
    ip -4 -o addr show
    ip -4 route show table all
    for ns in $(ip netns list | awk '{print $1}'); do
      ip -n "$ns" -4 -o addr show
      ip -n "$ns" -4 route show table all
    done
  } 2>/dev/null | grep -oE '([0-9]{1,3}\.){3}[0-9]{1,3}(/[0-9]{1,2})?' | sort -u
}

# The first 10.147.K.0/24 that overlaps none of them.
pick_subnet() {
  local used k p addr len cand mask
  used=$(used_prefixes)
  for k in $(seq 1 254); do
    cand=$(ip2int "10.147.$k.0")
    local clash=0
    for p in $used; do
      addr=${p%/*}
      len=32
      [[ $p == */* ]] && len=${p#*/}
      ((len > 24)) && len=24 # compare on the shorter of the two prefixes
      mask=$(((0xffffffff << (32 - len)) & 0xffffffff))
      ((len == 0)) && mask=0
      if (((($(ip2int "$addr") ^ cand) & mask) == 0)); then
        clash=1
        break
      fi
    done
    if ((!clash)); then
      echo "10.147.$k"
      return 0
    fi
  done
  return 1
}

# ---- the network ------------------------------------------------------------------------

# A container may forbid namespaces or lack tbf: that is a skip (exit 77, ctest's
# SKIP_RETURN_CODE), found out with a throw-away namespace before anything else is made.
ns_probe() {
  local probe=$NS_PREFIX-probe-$TAG err
  ip netns add "$probe" 2>/dev/null || { echo "$NS_WHO: cannot make network namespaces here: skipped" >&2; exit 77; }
  if ! err=$(ip netns exec "$probe" true 2>&1); then # e.g. in a chroot, whose / is no mount point
    ip netns del "$probe"
    echo "$NS_WHO: cannot run commands in a network namespace here ($err): skipped" >&2
    exit 77
  fi
  if ! ip netns exec "$probe" tc qdisc add dev lo root tbf rate 1gbit burst 256kb latency 20ms 2>/dev/null; then
    ip netns del "$probe"
    echo "$NS_WHO: tc tbf is not available here: skipped" >&2
    exit 77
  fi
  ip netns del "$probe"
}

# tbf_on DEV RATE [CMD...]: DEV's shaper, the command run under CMD (e.g. ip netns exec NS).
tbf_on() {
  local dev=$1 rate=$2
  shift 2
  "$@" tc qdisc add dev "$dev" root tbf rate "$rate" burst 256kb latency 20ms
}

# ns_build N RATE CC: the bridge and N namespaces on $NET.0/24 (NET from pick_subnet),
# namespace k at $NET.(k+1), listed in HOSTS. RATE empty: no shaper (the veths'
# own speed). CC: the namespaces' TCP congestion control, empty for the host's.
ns_build() {
  local n=$1 rate=$2 cc=$3 k ns host_if peer_if addr
  ip link add "$BRIDGE" type bridge
  ip link set "$BRIDGE" up
  HOSTS=()
  for ((k = 0; k < n; k++)); do
    ns=$(ns_name $k)
    host_if=$IF_PREFIX${TAG}h$k peer_if=$IF_PREFIX${TAG}n$k addr=$NET.$((k + 1))
    ip netns add "$ns"
    ip link add "$host_if" type veth peer name "$peer_if"
    ip link set "$peer_if" netns "$ns"
    ip -n "$ns" link set "$peer_if" name $NS_IF
    ip -n "$ns" addr add "$addr/24" dev $NS_IF
    ip -n "$ns" link set lo up
    if [[ -n $cc ]]; then ip netns exec "$ns" sysctl -qw net.ipv4.tcp_congestion_control="$cc"; fi
    ip -n "$ns" link set $NS_IF up
    ip link set "$host_if" master "$BRIDGE" up
    # Both directions: the host's upload (its egress) and its download (the bridge's
    # egress towards it), a full-duplex link of RATE each way.
    if [[ -n $rate ]]; then
      tbf_on $NS_IF "$rate" ip netns exec "$ns"
      tbf_on "$host_if" "$rate"
    fi
    HOSTS+=("$addr")
  done
}

# The shapers of all ${#HOSTS[@]} links off (the veths' own speed) or on at RATE.
ns_unshape() {
  local k
  for ((k = 0; k < ${#HOSTS[@]}; k++)); do
    ip netns exec "$(ns_name $k)" tc qdisc del dev $NS_IF root 2>/dev/null || true
    tc qdisc del dev "$IF_PREFIX${TAG}h$k" root 2>/dev/null || true
  done
}
ns_shape() {
  local rate=$1 k
  ns_unshape
  for ((k = 0; k < ${#HOSTS[@]}; k++)); do
    tbf_on $NS_IF "$rate" ip netns exec "$(ns_name $k)"
    tbf_on "$IF_PREFIX${TAG}h$k" "$rate"
  done
}

# What a shaper did since it was made: "sent_packets dropped overlimits" of DEV,
# run under the command prefix that follows (e.g. ip netns exec NS).
qdisc_stats() {
  local dev=$1
  shift
  "$@" tc -s qdisc show dev "$dev" | awk '/Sent/ { s = $4; d = $7; o = $9; sub(/,/, "", d) } END { print s + 0, d + 0, o + 0 }'
}

# Sums the shapers' counters over every link: "up_sent up_dropped down_sent down_dropped"
# (up: the namespaces' egress; down: the bridge's egress towards them).
ns_shaper_totals() {
  local k s d us=0 ud=0 ds=0 dd=0
  for ((k = 0; k < ${#HOSTS[@]}; k++)); do
    read -r s d _ < <(qdisc_stats $NS_IF ip netns exec "$(ns_name $k)")
    us=$((us + s)) ud=$((ud + d))
    read -r s d _ < <(qdisc_stats "$IF_PREFIX${TAG}h$k")
    ds=$((ds + s)) dd=$((dd + d))
  done
  echo "$us $ud $ds $dd"
}
