#!/usr/bin/env bash
# netns-testbed.sh — a real slow network on one machine, and gccl over it against
# Open MPI's ring MPI_Allreduce, in one run.
#
#   bench/netns-testbed.sh [-n N] [-r RATE] [-s SIZE] [-b BUILD] [-o OUTDIR] [-i ITERS] [-c CODECS]
#                          [-a ALG] [-l LINKS] [-C CC] [-x "MPIRUN ARGS"] [-t SECONDS] [-d] [-q]
#
# Builds N network namespaces (default 4), each a "host" with one interface (gtb0)
# on a private /24 it picks unused on this machine, joined by veth pairs to a
# bridge; each veth is shaped on both sides with
#   tc qdisc add dev IF root tbf rate RATE burst 256kb latency 20ms
# (RATE default 1gbit; netem is not in this kernel), so every host has a
# full-duplex RATE link to a switch. Then one mpirun, started in the first
# namespace, runs one rank per namespace (a fake plm_rsh_agent maps each host
# address to its namespace and runs the daemon under `ip netns exec`; TCP BTL
# only) with Open MPI's allreduce forced to its ring (the strongest dense
# baseline, DESIGN.md), and runs gccl-bench --mpi there: the MPI ring row, gccl's
# dense ring, rhd and tree (--dense-best), and every codec, on SIZE of float32
# (default 100M), checked (-c 1) and timed after a warm-up call: each row is the
# median of 5 timings of ITERS calls each (-i, default 1; gccl-bench -m).
# Prints one table: speed-up of each row against Open MPI's ring and against
# gccl's best dense, what each rank's interface transmitted per call (gtb0's
# counters: headers included) and how much of the link that used, the ranks'
# CPU time per call, and each codec's bar from issue 5.
#
#   -d      no dense rows of gccl's own (only Open MPI's ring and the codecs): about
#           half the run, for A/B comparisons of codec work (vs_dense then empty)
#   -q      smoke test: 2 namespaces, 1 MiB, fp16 only (< 1 minute;
#           overrides -n, -s, -i and -c)
#   -o DIR  keeps testbed.txt (gccl-bench's output), testbed.json (-J) and
#           summary.txt; default: a fresh directory under /tmp, printed at the end
#   -c SPECS  codecs instead of the issue's six
#   -a ALG  Open MPI's allreduce for the baseline row (coll_tuned_allreduce_algorithm:
#           4 ring, the default; 3 recursive doubling, 5 segmented ring, 6 Rabenseifner)
#   -l LINKS  Open MPI's btl_tcp_links (TCP connections per pair of ranks; default 1,
#           Open MPI's own). With 2 ranks, whose every exchange runs both ways
#           between the same pair, one connection reaches about half the link rate
#           (16 MiB ring allreduce at 1 Gbit/s: 255 ms with 1, 150 ms with 2); with
#           4 ranks, 2 connections changed nothing measurable.
#   -C CC   TCP congestion control in the namespaces (one of the host's
#           net.ipv4.tcp_allowed_congestion_control); default: the host's own,
#           which new namespaces inherit. The header line says which ran. On
#           this host (bbr) gccl's rows ran 0-4% faster with reno and Open
#           MPI's ring did not move (BENCHMARKS.md)
#   -t SECONDS  gives up (exit 1, everything removed) when the run takes longer
#           (default 1800): a launch that hangs must not hold the machine
#   -x ARGS extra mpirun arguments (split at spaces) for every row, e.g.
#           "--mca btl_tcp_progress_thread 1"
#   -e CMD  runs CMD (split at spaces; a path relative to BUILD/bench, e.g.
#           "mpi-ab interposer -b 4 -e 64M") under the same mpirun instead of
#           gccl-bench, prints its output and no table (the shapers' packets
#           sent and dropped go to stderr). -a 0 leaves Open MPI's allreduce as
#           it chooses (with -e only).
#
# Needs root, ip, tc and Open MPI (else exits with 77: skipped); gccl built with
# MPI (BUILD/bench/gccl-bench, default BUILD: build). Exits 0 when the run
# succeeded with every checked result right, whether or not the bars were met.
# Everything it creates carries its process id (namespaces gccltb-PID-K, links
# gtbPIDb/hK/nK) and is removed on exit, error or Ctrl-C; at start it removes
# what earlier runs left behind if their process is gone, and touches nothing else.
set -euo pipefail

N=4 RATE=1gbit SIZE=100M BUILD=build OUTDIR="" ITERS=1 QUICK=0 LINKS=1 CC="" EXTRA="" ALG=4 LIMIT=1800 DENSE=--dense-best
COMMAND=""
CODECS="fp16 uniform:bits=8 uniform:bits=4 sign topk:ratio=0.01 randk:ratio=0.01"
usage() {
  sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" >&2
  exit 2
}
while getopts "n:r:s:b:o:i:c:a:l:C:x:e:t:dqh" opt; do
  case $opt in
    n) N=$OPTARG ;;
    r) RATE=$OPTARG ;;
    s) SIZE=$OPTARG ;;
    b) BUILD=$OPTARG ;;
    o) OUTDIR=$OPTARG ;;
    i) ITERS=$OPTARG ;;
    c) CODECS=$OPTARG ;;
    a) ALG=$OPTARG ;;
    l) LINKS=$OPTARG ;;
    C) CC=$OPTARG ;;
    x) EXTRA=$OPTARG ;;
    e) COMMAND=$OPTARG ;;
    t) LIMIT=$OPTARG ;;
    d) DENSE="" ;;
    q) QUICK=1 ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[[ $# -eq 0 ]] || usage
if ((QUICK)); then
  N=2 SIZE=1M ITERS=1 CODECS=fp16
fi
[[ $N =~ ^[0-9]+$ ]] && ((N >= 2 && N <= 250)) || { echo "netns-testbed: -n must be 2..250" >&2; exit 2; }
[[ $ITERS =~ ^[0-9]+$ ]] && ((ITERS >= 1)) || { echo "netns-testbed: -i must be >= 1" >&2; exit 2; }
[[ $LIMIT =~ ^[0-9]+$ ]] && ((LIMIT >= 1)) || { echo "netns-testbed: -t must be >= 1" >&2; exit 2; }
[[ $ALG =~ ^[1-6]$ || ( $ALG == 0 && -n $COMMAND ) ]] || { echo "netns-testbed: -a must be 1..6 (0 with -e)" >&2; exit 2; }
[[ $LINKS =~ ^[0-9]+$ ]] && ((LINKS >= 1 && LINKS <= 16)) || { echo "netns-testbed: -l must be 1..16" >&2; exit 2; }
if [[ -n $CC ]] && ! grep -qwF -- "$CC" /proc/sys/net/ipv4/tcp_allowed_congestion_control 2>/dev/null; then
  echo "netns-testbed: -C $CC is not in this host's tcp_allowed_congestion_control" \
    "($(cat /proc/sys/net/ipv4/tcp_allowed_congestion_control 2>/dev/null))" >&2
  exit 2
fi
# tc's rate units; the link-use column needs bits per second.
if [[ $RATE =~ ^([0-9]+(\.[0-9]+)?)(bit|kbit|mbit|gbit)$ ]]; then
  RATE_BPS=$(awk -v v="${BASH_REMATCH[1]}" -v u="${BASH_REMATCH[3]}" \
    'BEGIN { m = u == "gbit" ? 1e9 : u == "mbit" ? 1e6 : u == "kbit" ? 1e3 : 1; printf "%.0f", v * m }')
else
  echo "netns-testbed: -r RATE: a number with bit, kbit, mbit or gbit (e.g. 1gbit)" >&2
  exit 2
fi
BENCH=$BUILD/bench/gccl-bench
[[ -x $BENCH ]] || { echo "netns-testbed: $BENCH not found (build gccl with MPI)" >&2; exit 2; }
BENCH=$(cd "$(dirname "$BENCH")" && pwd)/gccl-bench
# What the machine lacks is a skip (77, ctest's SKIP_RETURN_CODE), not a failure.
((EUID == 0)) || { echo "netns-testbed: needs root (network namespaces, tc): skipped" >&2; exit 77; }
for tool in ip tc mpirun; do
  command -v $tool >/dev/null || { echo "netns-testbed: $tool not found: skipped" >&2; exit 77; }
done

# The namespaces, bridge, shaping and their cleanup: shared with ddp-testbed.sh.
NS_WHO=netns-testbed
TAG=$$
# shellcheck source=netns-lib.sh
source "$(dirname "$0")/netns-lib.sh"

TMP=""
MPIRUN_PID=""
cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n $MPIRUN_PID ]]; then kill -TERM "$MPIRUN_PID" 2>/dev/null || true; fi
  remove_run "$TAG"
  [[ -n $TMP ]] && rm -rf "$TMP"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- the network ------------------------------------------------------------------------

ns_probe
remove_stale
NET=$(pick_subnet) || { echo "netns-testbed: no free 10.147.K.0/24" >&2; exit 1; }
SUBNET=$NET.0/24
TMP=$(mktemp -d /tmp/gccl-testbed.XXXXXX)
if [[ -z $OUTDIR ]]; then OUTDIR=$(mktemp -d /tmp/gccl-testbed-out.XXXXXX); fi
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)

echo "netns-testbed: $N namespaces on $SUBNET, links shaped to $RATE (tbf burst 256kb latency 20ms)" >&2
ns_build "$N" "$RATE" "$CC"

# mpirun's hosts are the namespaces' addresses; the agent it would call ssh maps
# them back to namespaces. Remote commands come as ssh gets them: one shell line.
AGENT=$TMP/ns-agent
{
  echo '#!/bin/sh'
  echo 'while [ "${1#-}" != "$1" ]; do shift; done # no ssh options apply'
  echo 'host=$1; shift'
  echo 'case $host in'
  for ((k = 0; k < N; k++)); do echo "  ${HOSTS[k]}) ns=$(ns_name $k) ;;"; done
  echo '  *) echo "ns-agent: unknown host $host" >&2; exit 1 ;;'
  echo 'esac'
  # Each launch is logged, with its exit status, for a launch that stalls.
  echo "echo \"\$(date +%T.%N) \$host: start\" >>$TMP/agent.log"
  echo 'ip netns exec "$ns" /bin/sh -c "$*"'
  echo 'rc=$?'
  echo "echo \"\$(date +%T.%N) \$host: exit \$rc\" >>$TMP/agent.log"
  echo 'exit $rc'
} >"$AGENT"
chmod +x "$AGENT"
for h in "${HOSTS[@]}"; do echo "$h slots=1"; done >"$TMP/hostfile"

# ---- the run ------------------------------------------------------------------------------

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
TUNABLES=glibc.malloc.hugetlb=1:glibc.malloc.mmap_threshold=4294967295:glibc.malloc.trim_threshold=68719476736
MPIRUN=(mpirun --hostfile "$TMP/hostfile" -np "$N" --bind-to none
  --mca plm_rsh_agent "$AGENT" --mca plm_rsh_no_tree_spawn 1 --mca rtc ^hwloc
  --mca btl "tcp,self" --mca btl_tcp_if_include "$SUBNET" --mca oob_tcp_if_include "$SUBNET"
  --mca mpi_yield_when_idle 1 --mca btl_tcp_links "$LINKS"
  --mca coll_tuned_use_dynamic_rules 1 --mca coll_tuned_allreduce_algorithm "$ALG"
  -x "GLIBC_TUNABLES=$TUNABLES")
read -r -a extra_args <<<"$EXTRA"
MPIRUN+=("${extra_args[@]}")
ARGS=(--mpi allreduce -d float -o sum -b "$SIZE" -e "$SIZE" -n "$ITERS" -m -w 1 -z -c 1
  ${DENSE:+"$DENSE"} --codec "$CODECS" --net-if "$NS_IF" --net-gbps "$(awk -v b="$RATE_BPS" 'BEGIN { print b / 1e9 }')"
  -J "$OUTDIR/testbed.json")
if [[ -n $COMMAND ]]; then # -e: that program instead of gccl-bench
  read -r -a command_args <<<"$COMMAND"
  BENCH=$(cd "$(dirname "$BENCH")" && pwd)/${command_args[0]}
  [[ -x $BENCH ]] || { echo "netns-testbed: -e: $BENCH not found" >&2; exit 2; }
  ARGS=("${command_args[@]:1}")
fi

{
  echo "# netns-testbed: $N namespaces x 1 rank, $RATE per link (tbf both ways), $SUBNET, btl_tcp_links $LINKS, TCP $(ip netns exec "$(ns_name 0)" cat /proc/sys/net/ipv4/tcp_congestion_control); $(date -Is)"
  echo "# machine: $(nproc) cores; load before the run: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "# ip netns exec $(ns_name 0) ${MPIRUN[*]} $BENCH ${ARGS[*]}"
} | tee "$OUTDIR/testbed.txt" >&2
# Kills the run's mpirun and every process it left in the namespaces.
stop_run() {
  kill -TERM "$MPIRUN_PID" 2>/dev/null || true
  wait "$MPIRUN_PID" 2>/dev/null || true
  local k pid
  for ((k = 0; k < N; k++)); do
    for pid in $(ip netns pids "$(ns_name $k)" 2>/dev/null || true); do kill -KILL "$pid" 2>/dev/null || true; done
  done
  sleep 1
}
# About one launch in 20 stalled here: one of the N daemons (orted) never came up
# and mpirun waited for it forever, the bench never started. A launch that has
# printed nothing of gccl-bench's after LAUNCH_S is stopped and made again (at
# most twice); the agent's log of that launch goes to stderr.
LAUNCH_S=90
header_lines=$(wc -l <"$OUTDIR/testbed.txt")
for attempt in 1 2 3; do
  : >"$TMP/agent.log"
  timeout -k 10 "$LIMIT" ip netns exec "$(ns_name 0)" "${MPIRUN[@]}" "$BENCH" "${ARGS[@]}" >>"$OUTDIR/testbed.txt" 2>&1 &
  MPIRUN_PID=$!
  started=0
  for ((t = 0; t < LAUNCH_S * 2; t++)); do
    if (($(wc -l <"$OUTDIR/testbed.txt") > header_lines)) || ! kill -0 "$MPIRUN_PID" 2>/dev/null; then
      started=1
      break
    fi
    sleep 0.5
  done
  ((started)) && break
  echo "netns-testbed: launch $attempt printed nothing in $LAUNCH_S s; its daemons' launches:" >&2
  cat "$TMP/agent.log" >&2
  stop_run
  ((attempt < 3)) || { MPIRUN_PID=""; echo "netns-testbed: no launch started; giving up" >&2; exit 1; }
done
status=0
wait "$MPIRUN_PID" || status=$?
MPIRUN_PID=""
if ((status != 0)); then
  if ((status == 124 || status == 137)); then
    echo "netns-testbed: the run took longer than $LIMIT s (-t) and was stopped; its output:" >&2
  else
    echo "netns-testbed: the run failed (exit $status); its output:" >&2
  fi
  tail -30 "$OUTDIR/testbed.txt" >&2
  exit 1
fi

# What the shapers did over the whole run: a queue that overflows drops packets,
# and TCP backs off (incast: several senders into one link at once).
read -r up_sent up_drop down_sent down_drop < <(ns_shaper_totals)
SHAPER_LINE="# tbf over the run: uplinks sent $up_sent packets, dropped $up_drop; downlinks sent $down_sent, dropped $down_drop"
if [[ -n $COMMAND ]]; then # -e: its output is the report
  sed -n "$((header_lines + 1)),\$p" "$OUTDIR/testbed.txt"
  echo "$SHAPER_LINE" >&2
  echo "# output kept in $OUTDIR/testbed.txt" >&2
  exit 0
fi

# ---- the table ----------------------------------------------------------------------------
# gccl-bench's rows with -z: time $6 (us), #wrong $9, codec $10, algo $11, wire $12,
# net $13 (gtb0's transmitted bytes per call), ratio $14, rel_err $15, speed-up
# against gccl's best dense $16, against the MPI row $17, CPU ms per call of all
# ranks $18.
ALG_NAMES=(- linear nonoverlapping recdoubling ring segring rabenseifner)
awk -v rate="$RATE_BPS" -v ratename="$RATE" -v p="$N" -v base="${ALG_NAMES[ALG]}" -v cores="$(nproc)" '
  BEGIN {
    bar["fp16"] = 1.8; bar["uniform:bits=8"] = 3.2; bar["uniform:bits=4"] = 5.5
    bar["sign"] = 10; bar["topk:ratio=0.01"] = 8; bar["randk:ratio=0.01"] = 20
    printf "# allreduce float32 sum, %d ranks (one per namespace), %s links, %d cores; speed-ups against Open MPI'"'"'s %s (vs_mpi)\n", p, ratename, cores, base
    printf "# net: bytes a rank'"'"'s interface sent per call (busiest rank; IP/TCP/MPI headers included); link: net*8 / time / rate\n"
    printf "# cpu: CPU time per call of all ranks'"'"' processes (user + system: compute, polling, the kernel'"'"'s TCP work);\n"
    printf "#   busy: cpu / (time * %d cores), the share of the machine the ranks kept busy\n", cores
    printf "%-20s %-6s %10s %8s %7s %9s %9s %5s %8s %6s %7s %9s %8s %8s %5s  %s\n", "codec", "algo", "size(B)", "time(ms)",
      "busbw", "wire(MB)", "net(MB)", "link", "cpu(ms)", "busy", "ratio", "rel_err", "vs_mpi", "vs_dense", "bar", ""
  }
  /^#/ || NF < 18 { next }
  {
    name = $11 == "mpi" ? "OpenMPI-" base : $10
    net = $13 == "-" ? -1 : $13
    use = net > 0 && $6 > 0 ? sprintf("%4.0f%%", 100 * net * 8 / ($6 * 1e-6) / rate) : "-"
    busy = $18 != "-" && $6 > 0 ? sprintf("%5.0f%%", 100 * $18 / ($6 / 1000) / cores) : "-"
    verdict = ""
    if ($10 in bar) verdict = ($17 >= bar[$10]) ? "met" : "MISSED"
    if ($9 != "0" && $9 != "N/A") verdict = verdict " #wrong=" $9
    busbw = $6 > 0 ? $1 / ($6 * 1e3) * 2 * (p - 1) / p : 0 # from the time: the printed one has 2 decimals
    printf "%-20s %-6s %10d %8.1f %7.4f %9s %9s %5s %8s %6s %7s %9s %8s %8s %5s  %s\n", name, $11, $1, $6 / 1000,
      busbw, $12 == "-" ? "-" : sprintf("%.2f", $12 / 1e6), (net < 0 ? "-" : sprintf("%.2f", net / 1e6)), use,
      $18, busy, $14, $15, $17, $16, (($10 in bar) ? bar[$10] "x" : ""), verdict
  }' "$OUTDIR/testbed.txt" | tee "$OUTDIR/summary.txt"
{
  grep -E "^# (Out of bounds|Open MPI|gccl [0-9])" "$OUTDIR/testbed.txt" || true
  echo "$SHAPER_LINE"
} | tee -a "$OUTDIR/summary.txt"
echo "# load after the run: $(cut -d' ' -f1-3 /proc/loadavg); outputs: $OUTDIR" | tee -a "$OUTDIR/summary.txt"
if grep -q "Out of bounds values : 0 OK" "$OUTDIR/testbed.txt"; then exit 0; fi
echo "netns-testbed: wrong results (see $OUTDIR/testbed.txt)" >&2
exit 1
