#!/usr/bin/env bash
# run_checked.sh — runs an MPI program under mpirun and checks, process by process,
# that gccl ran exactly the MPI_Allreduce calls the program says the interposer
# should have given it, and no other.
#
#   run_checked.sh --np N --expect gccl|measured|none|init-failed|refused|broken -- mpirun ...
#
# Each process of the program prints
#   preload-check: pid P eligible E compressed C comms K
# and runs with GCCL_DEBUG=INFO, GCCL_DEBUG_SUBSYS=INIT,COLL, so gccl logs one
# "AllReduce seq" line per collective it runs (with " codec " when compressed)
# and the interposer one line per gccl communicator made and destroyed; every
# line carries the process id. Expectations per process:
#   gccl         E "AllReduce seq" lines, C of them compressed; K made, K destroyed
#   measured     the interposer times gccl's road and MPI's (GCCL_PRELOAD_ROUTE
#                unset): at most E "AllReduce seq" lines, K made and destroyed,
#                at least one size class decided, and every process decided the
#                same classes the same way (run it on 2 ranks: every
#                communicator then holds both)
#   none         no line from gccl or the interposer (the program without LD_PRELOAD)
#   init-failed  K creation failures reported, nothing made, no gccl call
#   refused      K refusals reported: the first call of each of the K communicators
#                reached gccl (compressed on some ranks only: not counted) and
#                went to MPI after it; K made, K destroyed
#   broken       exactly one failure reported and one communicator aborted; K
#                made, K - 1 destroyed; the E calls that worked and possibly the
#                one that failed reached gccl (a rank may learn that its
#                communicator broke before it logs the call)
# The mpirun exit status must be 0: the program checked its results itself.
set -uo pipefail

np=0
expect=gccl
while [[ $# -gt 0 && "$1" != "--" ]]; do
  case "$1" in
    --np) np=$2; shift 2 ;;
    --expect) expect=$2; shift 2 ;;
    *) echo "run_checked.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
shift # --

log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$@" >"$log" 2>&1
status=$?
cat "$log"
fail() {
  echo "run_checked.sh: FAIL: $*"
  exit 1
}
[[ $status -eq 0 ]] || fail "mpirun exited with status $status"

# mpirun forwards each process's output as it comes, so a line may follow another
# process's unfinished one: every pattern is searched anywhere in a line (-o).
mapfile -t reports < <(grep -oE 'preload-check: pid [0-9]+ eligible [0-9]+ compressed [0-9]+ comms [0-9]+' "$log")
[[ ${#reports[@]} -eq $np ]] || fail "expected $np preload-check lines, found ${#reports[@]}"

# Lines of one process: gccl's and the interposer's prefix is host:pid:tid [rank] GCCL LEVEL.
count() { # pid, regex after "GCCL " (no .*: two lines may share one)
  grep -oE ":$1:[0-9]+ \[-?[0-9]+\] GCCL $2" "$log" | wc -l
}
comm='MPI communicator 0x[0-9a-f]+'

for r in "${reports[@]}"; do
  read -r _ _ pid _ eligible _ compressed _ comms <<<"$r"
  seq=$(count "$pid" 'INFO AllReduce seq ')
  codec=$(count "$pid" 'INFO AllReduce seq [0-9]+ count [0-9]+ [a-z0-9]+ sum root 0 algo [a-z-]+ codec ')
  made=$(count "$pid" 'INFO mpi-preload: gccl communicator ready')
  destroyed=$(count "$pid" "INFO mpi-preload: gccl communicator of $comm destroyed")
  init_failed=$(count "$pid" "WARN mpi-preload: (gcclCommInitMpi on $comm \\([0-9]+ ranks\\) failed|another rank of $comm)")
  refused=$(count "$pid" 'WARN mpi-preload: gcclAllReduce refused')
  failed=$(count "$pid" "WARN mpi-preload: gcclAllReduce of [0-9]+ MPI_[A-Z]+ on $comm failed")
  aborted=$(count "$pid" "INFO mpi-preload: gccl communicator of $comm aborted")
  [[ "$expect" == refused ]] && codec=any
  if [[ "$expect" == measured ]]; then
    [[ $seq -le $eligible ]] && seq=$eligible
    codec=0
    roads=$(grep -oE ":$pid:[0-9]+ \[-?[0-9]+\] GCCL INFO mpi-preload: $comm: allreduce of \[[0-9]+, [0-9]+\) bytes takes [a-zA-Z]+'s road" "$log" |
      sed -E 's/.*allreduce of //' | sort | uniq -c)
    [[ -n "$roads" ]] || fail "pid $pid: no size class was decided"
    [[ -z "${first_roads:-}" ]] && first_roads=$roads
    [[ "$roads" == "$first_roads" ]] || fail "pid $pid decided otherwise: $roads; the first process: $first_roads"
  fi
  [[ "$expect" == broken && $seq -eq $((eligible + 1)) ]] && seq=$eligible
  got="seq=$seq codec=$codec made=$made destroyed=$destroyed aborted=$aborted init_failed=$init_failed"
  got+=" refused=$refused failed=$failed"
  case "$expect" in
    gccl | measured)
      want="seq=$eligible codec=$compressed made=$comms destroyed=$comms aborted=0 init_failed=0 refused=0 failed=0"
      ;;
    none) want="seq=0 codec=0 made=0 destroyed=0 aborted=0 init_failed=0 refused=0 failed=0" ;;
    init-failed) want="seq=0 codec=0 made=0 destroyed=0 aborted=0 init_failed=$comms refused=0 failed=0" ;;
    refused) want="seq=$comms codec=any made=$comms destroyed=$comms aborted=0 init_failed=0 refused=$comms failed=0" ;;
    broken)
      want="seq=$eligible codec=0 made=$comms destroyed=$((comms - 1)) aborted=1 init_failed=0 refused=0 failed=1"
      ;;
    *) fail "unknown expectation $expect" ;;
  esac
  [[ "$got" == "$want" ]] || fail "pid $pid: got $got, want $want"
  echo "run_checked.sh: pid $pid: $got (as expected: $expect)"
done
echo "run_checked.sh: OK"
