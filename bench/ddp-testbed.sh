#!/usr/bin/env bash
# ddp-testbed.sh — time to accuracy of PyTorch DDP over a real slow network on one
# machine: DDP's own allreduce, PyTorch's fp16 and PowerSGD hooks, and gccl's hooks,
# each row trained from the same weights on the same batches until accuracy levels off.
#
#   bench/ddp-testbed.sh [-n N] [-r RATE] [-o OUTDIR] [-e EPOCHS] [-B BATCH] [-E EVALS]
#                        [-L LR] [-R "ROWS"] [-S STEPS] [-X ARGS] [-l LIB] [-p PYDIR] [-C CC] [-t SECONDS] [-k SECONDS] [-u] [-q] [-A]
#
# Builds N network namespaces (default 4) joined by veth pairs to a bridge, each
# link shaped on both sides with tc tbf to RATE (default 1gbit), as netns-testbed.sh
# does (both use bench/netns-lib.sh), and runs one DDP process per namespace with
# Debian's /usr/bin/python3 (torch 1.13, CPU): gloo over TCP, GLOO_SOCKET_IFNAME the
# namespace's interface, MASTER_ADDR the first namespace's address, one thread per
# rank. Each row is a fresh set of N processes running bench/ddp_tta.py: a
# 5 M-parameter CNN on Fashion-MNIST (Debian's dataset-fashion-mnist, installed
# with apt-get when missing; nothing else is downloaded) for EPOCHS epochs
# (default 10) of global batch BATCH (default 128), from the same initial weights
# on the same batches in every row, test accuracy EVALS times an epoch (default 4).
# The defaults take about 3 hours here; BENCHMARKS.md's run, -B 64 -e 5, about 2
# (smaller batches make DDP's step more communication, 5 epochs reach its plateau).
#
# Before the rows, the split of DDP's step: STEPS steps (-S, default 200; 0: none)
# of the dense row with the links shaped, then the same with the shapers taken off
# (the veths' own speed, which is not free: 4 ranks' TCP and gloo's reductions
# share 2 cores), each followed by STEPS/2 steps under DDP's no_sync (compute alone,
# no communication). It says how much of DDP's step is communication.
#
# Writes to OUTDIR (default a fresh directory under /tmp): results.md (the table:
# median seconds per step, bytes each rank's interface sent per training step
# (headers and ACKs included) and what gccl's hook counted, training wall time to
# reach the target (DDP's final accuracy minus 1 point), final accuracy, whether
# the replicas' parameters are identical, the CPU that niced processes (other
# people's builds) used meanwhile; then the split), results.json, accuracy.png (test accuracy against
# training wall time), per row ROW/rank*.json, ROW/rank*.log and ROW/status,
# run.json, and pkg/: the gccl package and library every rank imported and the
# ddp_tta.py it ran, copied at the start so that a rebuild or an edit during the
# run does not change later rows.
#
#   -R ROWS  rows of bench/ddp_tta.py (default: `ddp_tta.py rows`), e.g. "ddp gccl-uniform4";
#            "none": the split alone
#   -X ARGS  more arguments for every rank's `ddp_tta.py train` (split at spaces), e.g.
#            "--hidden 2048 --channels 32,64" (the model) or "--psgd-start 10"
#   -l LIB   libgccl.so (default build-release/libgccl.so)
#   -p PYDIR the directory that holds the gccl package (default python/), e.g. an
#            exported commit's, to measure that commit's hooks with its library
#   -u       no shaping at all (the rows at the veths' own speed) and no split
#   -q       smoke test: 2 namespaces, the rows ddp and gccl-uniform4, 40 steps on
#            2 560 images, a 2 000-image test set, a 10-step split (< 2 minutes;
#            overrides -n, -e, -B, -E, -R and -S)
#   -t SECONDS  a row that runs longer is stopped and marked so (default 7200)
#   -k SECONDS  a rank still alive this long after writing its results is killed
#            (default 30): torch 1.13's gloo can hang at process exit, and the
#            results are complete by then; the row's status says so
#   -C CC    TCP congestion control in the namespaces (default: the host's)
#   -A       again: trains the rows of -R once more in the existing run directory -o,
#            with that run's settings, package, library and ddp_tta.py (its run.json
#            and pkg/), and no split; e.g. for a row that something outside stopped.
#            The summary then covers every row of the run; run.json lists the reruns
#
# Needs root, ip and tc (else exits 77: skipped), and /usr/bin/python3 with torch
# and the data set (else 77). Exits 0 when every row trained to the end with
# identical replicas, 1 otherwise (the table still shows what ran). A rank that
# stops making progress for 3 minutes prints every thread's stack and exits, which
# fails its row. Everything the script creates carries its process id (namespaces
# gccltb-PID-K, links gtbPIDb/hK/nK) and is removed on exit, error or Ctrl-C; at
# start it removes what earlier runs of this script or netns-testbed.sh left
# behind if their process is gone, and touches nothing else.
set -euo pipefail

ARGS_GIVEN="$*"
HERE=$(cd "$(dirname "$0")" && pwd)
ROOT=$(cd "$HERE/.." && pwd)
PY=/usr/bin/python3 # Debian's: its torch, numpy and matplotlib (the pyenv one lacks them)
N=4 RATE=1gbit OUTDIR="" EPOCHS=10 BATCH=128 EVALS=4 LR=0.05 ROWS="" SPLIT=200 LIB=$ROOT/build-release/libgccl.so PYDIR=$ROOT/python
CC="" LIMIT=7200 GRACE=30 SHAPED=1 QUICK=0 XARGS=() AGAIN=0
usage() {
  sed -n '2,/^set -euo/{/^#/s/^# \{0,1\}//p}' "$0" >&2
  exit 2
}
while getopts "n:r:o:e:B:E:L:R:S:X:l:p:C:t:k:uqAh" opt; do
  case $opt in
    n) N=$OPTARG ;;
    r) RATE=$OPTARG ;;
    o) OUTDIR=$OPTARG ;;
    e) EPOCHS=$OPTARG ;;
    B) BATCH=$OPTARG ;;
    E) EVALS=$OPTARG ;;
    L) LR=$OPTARG ;;
    R) ROWS=$OPTARG ;;
    S) SPLIT=$OPTARG ;;
    X) read -r -a XARGS <<<"$OPTARG" ;;
    l) LIB=$OPTARG ;;
    p) PYDIR=$OPTARG ;;
    C) CC=$OPTARG ;;
    t) LIMIT=$OPTARG ;;
    k) GRACE=$OPTARG ;;
    u) SHAPED=0 ;;
    q) QUICK=1 ;;
    A) AGAIN=1 ;;
    *) usage ;;
  esac
done
shift $((OPTIND - 1))
[[ $# -eq 0 ]] || usage
# Per-row training arguments beyond the common ones (the smoke run's short rows).
EXTRA=()
if ((QUICK)); then
  N=2 EPOCHS=1 BATCH=64 EVALS=2 ROWS="" SPLIT=10
  EXTRA=(--train-subset 2560 --test-subset 2000)
fi
if ((AGAIN)); then
  [[ -n $OUTDIR && -f $OUTDIR/run.json && -f $OUTDIR/pkg/ddp_tta.py && -n $ROWS ]] ||
    { echo "ddp-testbed: -A needs -o with an earlier run (run.json, pkg/) and -R" >&2; exit 2; }
  # That run's settings, whatever else was given (a rerun must match its rows).
  settings=$("$PY" -c 'import json, sys
r = json.load(open(sys.argv[1]))
print(r["world"], r["link"], r["epochs"], r["batch"], r["evals_per_epoch"], r["lr"], " ".join(r.get("train_args", [])))' \
    "$OUTDIR/run.json") || { echo "ddp-testbed: cannot read $OUTDIR/run.json" >&2; exit 2; }
  read -r N RATE EPOCHS BATCH EVALS LR xargs <<<"$settings"
  read -r -a XARGS <<<"$xargs"
  QUICK=0 SPLIT=0 EXTRA=()
  if [[ $RATE == unshaped ]]; then SHAPED=0 RATE=1gbit; fi
fi
for v in N EPOCHS BATCH EVALS SPLIT LIMIT GRACE; do
  [[ ${!v} =~ ^[0-9]+$ ]] || { echo "ddp-testbed: ${v} must be a number" >&2; exit 2; }
done
((N >= 2 && N <= 250)) || { echo "ddp-testbed: -n must be 2..250" >&2; exit 2; }
((BATCH % N == 0)) || { echo "ddp-testbed: -B must be a multiple of -n" >&2; exit 2; }
[[ $RATE =~ ^[0-9]+(\.[0-9]+)?(bit|kbit|mbit|gbit)$ ]] || { echo "ddp-testbed: -r RATE: e.g. 1gbit" >&2; exit 2; }
if [[ -n $CC ]] && ! grep -qwF -- "$CC" /proc/sys/net/ipv4/tcp_allowed_congestion_control 2>/dev/null; then
  echo "ddp-testbed: -C $CC is not in this host's tcp_allowed_congestion_control" >&2
  exit 2
fi
[[ -f $LIB ]] || { echo "ddp-testbed: $LIB not found (build gccl: cmake --build build-release)" >&2; exit 2; }
[[ -f $PYDIR/gccl/torch.py ]] || { echo "ddp-testbed: no gccl package in $PYDIR" >&2; exit 2; }
# What the machine lacks is a skip (77, ctest's SKIP_RETURN_CODE), not a failure.
((EUID == 0)) || { echo "ddp-testbed: needs root (network namespaces, tc): skipped" >&2; exit 77; }
for tool in ip tc; do
  command -v $tool >/dev/null || { echo "ddp-testbed: $tool not found: skipped" >&2; exit 77; }
done
"$PY" -c "import torch, numpy" 2>/dev/null || { echo "ddp-testbed: $PY has no torch or numpy: skipped" >&2; exit 77; }
if [[ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ]]; then
  echo "ddp-testbed: installing dataset-fashion-mnist" >&2
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist >/dev/null ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist >/dev/null; } ||
    { echo "ddp-testbed: cannot install dataset-fashion-mnist: skipped" >&2; exit 77; }
fi
if [[ -z $ROWS ]]; then
  if ((QUICK)); then ROWS=$("$PY" "$HERE/ddp_tta.py" rows --quick); else ROWS=$("$PY" "$HERE/ddp_tta.py" rows); fi
fi
read -r -d '' -a ROW_LIST <<<"$ROWS" || true
[[ $ROWS != none ]] || ROW_LIST=()

NS_WHO=ddp-testbed
TAG=$$
# shellcheck source=netns-lib.sh
source "$HERE/netns-lib.sh"

RANK_PIDS=()
cleanup() {
  local rc=$? pid
  trap - EXIT INT TERM
  for pid in "${RANK_PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  remove_run "$TAG"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- the network ------------------------------------------------------------------------

ns_probe
remove_stale
NET=$(pick_subnet) || { echo "ddp-testbed: no free 10.147.K.0/24" >&2; exit 1; }
if [[ -z $OUTDIR ]]; then OUTDIR=$(mktemp -d /tmp/gccl-ddp-testbed.XXXXXX); fi
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)
SHAPE_RATE=$RATE
((SHAPED)) || SHAPE_RATE=""
echo "ddp-testbed: $N namespaces on $NET.0/24, links ${SHAPE_RATE:-unshaped}; outputs in $OUTDIR" >&2
ns_build "$N" "$SHAPE_RATE" "$CC"

TTA=$OUTDIR/pkg/ddp_tta.py
if ((AGAIN)); then
  "$PY" -c 'import json, sys, time
p = sys.argv[1]
r = json.load(open(p))
r.setdefault("reruns", []).append({"rows": sys.argv[2].split(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
json.dump(r, open(p, "w"), indent=1)' "$OUTDIR/run.json" "${ROW_LIST[*]}"
else
# The package and library the ranks import, frozen for the whole run.
rm -rf "$OUTDIR/pkg"
mkdir -p "$OUTDIR/pkg"
cp -r "$PYDIR/gccl" "$OUTDIR/pkg/gccl"
rm -rf "$OUTDIR/pkg/gccl/__pycache__"
cp -L "$LIB" "$OUTDIR/pkg/libgccl.so"
cp "$HERE/ddp_tta.py" "$TTA"

# What the summary needs to know of the run, and what it ran on.
dirty=""
git -C "$ROOT" status --porcelain -- python/gccl 2>/dev/null | grep -q . && dirty=" (python/gccl modified)"
[[ $(cd "$PYDIR" && pwd) == "$ROOT/python" ]] || dirty=" (package from $PYDIR)"
env WORLD="$N" LINK="${SHAPE_RATE:-unshaped}" EPOCHS="$EPOCHS" BATCH="$BATCH" EVALS="$EVALS" LR="$LR" ROWS="${ROW_LIST[*]}" \
  SPLIT="$SPLIT" QUICK="$QUICK" LOAD="$(cut -d' ' -f1-3 /proc/loadavg)" GIT="$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo -)$dirty" \
  TCP_CC="$(ip netns exec "$(ns_name 0)" cat /proc/sys/net/ipv4/tcp_congestion_control)" \
  HOOK_SHA="$(sha256sum "$OUTDIR/pkg/gccl/torch.py" | cut -c1-16)" LIB_SHA="$(sha256sum "$OUTDIR/pkg/libgccl.so" | cut -c1-16)" \
  LIB="$(readlink -f "$LIB")" TRAIN_ARGS="${XARGS[*]}" \
  COMMAND="$0 $ARGS_GIVEN" "$PY" -c '
import json, os, sys, time
e = os.environ
json.dump({"world": int(e["WORLD"]), "link": e["LINK"], "epochs": int(e["EPOCHS"]), "batch": int(e["BATCH"]),
           "evals_per_epoch": int(e["EVALS"]), "lr": float(e["LR"]), "rows": e["ROWS"].split(),
           "split_steps": int(e["SPLIT"]), "quick": e["QUICK"] == "1", "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "cores": os.cpu_count(), "load_before": e["LOAD"], "tcp_cc": e["TCP_CC"], "git": e["GIT"],
           "hook_sha256": e["HOOK_SHA"], "lib": e["LIB"], "lib_sha256": e["LIB_SHA"], "train_args": e["TRAIN_ARGS"].split(),
           "command": e["COMMAND"]}, sys.stdout, indent=1)
' >"$OUTDIR/run.json"
fi

# ---- one row: N processes, one per namespace ---------------------------------------------

PORT=29400
LOCK=/tmp/gccl-ddp-testbed.lock
# /proc/stat's "cpu" line, at the start and end of a row: with the ranks' own CPU
# time, how much other processes (other people's builds and tests here) took meanwhile.
cpu_line() { echo "$(date +%s.%N) $(grep '^cpu ' /proc/stat)"; }

# run_row NAME ROW [train args...]: trains one row; writes NAME/status. Returns 0
# when every rank wrote its results.
run_row() {
  local name=$1 row=$2 k pid now
  shift 2
  local dir=$OUTDIR/$name
  rm -rf "$dir"
  mkdir -p "$dir"
  PORT=$((PORT + 1)) # a fresh one per row: the last row's store may linger in TIME_WAIT
  # One row at a time on this machine: rows of concurrent runs take turns, so that
  # none is timed while another trains on the same 2 cores.
  exec {LOCK_FD}>>"$LOCK"
  if ! flock -n "$LOCK_FD"; then
    echo "== $name: waiting for another run's row to finish ($LOCK)" >&2
    flock "$LOCK_FD"
  fi
  echo "== $name ($(date +%T), load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
  cpu_line >"$dir/cpu_start"
  RANK_PIDS=()
  for ((k = 0; k < N; k++)); do
    local log=$dir/rank$k.log
    local cmd=(ip netns exec "$(ns_name $k)" env MASTER_ADDR="${HOSTS[0]}" MASTER_PORT="$PORT"
      GLOO_SOCKET_IFNAME="$NS_IF" OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1
      PYTHONPATH="$OUTDIR/pkg" GCCL_LIBRARY="$OUTDIR/pkg/libgccl.so" PYTHONDONTWRITEBYTECODE=1
      "$PY" "$TTA" train --row "$row" --name "$name" --rank "$k" --world "$N" --out "$OUTDIR"
      --net-if "$NS_IF" "$@")
    # (The ranks do not inherit the lock: one left behind must not hold it.)
    if ((k == 0)); then
      "${cmd[@]}" > >(tee "$log" >&2) 2>&1 {LOCK_FD}>&- & # rank 0 reports its evaluations as they come
    else
      "${cmd[@]}" >"$log" 2>&1 {LOCK_FD}>&- &
    fi
    RANK_PIDS+=($!)
  done
  # Watch the ranks: a rank that wrote its results gets GRACE s to exit; one that
  # failed takes the others down GRACE s later (a peer gone mid-collective can
  # leave them blocked until gloo's timeout); a row longer than LIMIT is stopped.
  local start=$SECONDS failed="" killed="" fail_at=0 rc alive
  local done_at=() exited=()
  while :; do
    alive=0
    for ((k = 0; k < N; k++)); do
      pid=${RANK_PIDS[k]}
      [[ -n ${exited[k]:-} ]] && continue
      if ! kill -0 "$pid" 2>/dev/null; then
        rc=0
        wait "$pid" || rc=$?
        exited[k]=$rc
        if ((rc != 0)) && [[ -z $failed ]] && [[ ! -f $dir/rank$k.json ]]; then
          failed="rank $k exited $rc: $({ grep -E '[A-Za-z]+(Error|Exception|NotMet)|stalled|SIGTERM' "$dir/rank$k.log" || true; } | tail -1 | cut -c1-200)"
          fail_at=$SECONDS
        fi
        continue
      fi
      alive=$((alive + 1))
      now=$SECONDS
      if [[ -f $dir/rank$k.json ]]; then
        [[ -n ${done_at[k]:-} ]] || done_at[k]=$now
        if ((now - done_at[k] >= GRACE)); then
          kill -KILL "$pid" 2>/dev/null || true
          killed+="${killed:+, }$k"
        fi
      elif [[ -n $failed ]] && ((now - fail_at >= GRACE)); then
        kill -KILL "$pid" 2>/dev/null || true
      elif ((now - start >= LIMIT)); then
        [[ -n $failed ]] || { failed="stopped after $LIMIT s (-t)"; fail_at=$now; }
        kill -KILL "$pid" 2>/dev/null || true
      fi
    done
    ((alive == 0)) && break
    sleep 1
  done
  RANK_PIDS=()
  cpu_line >"$dir/cpu_end"
  exec {LOCK_FD}>&- # lets the next row of any run go
  local status=ok
  [[ -n $killed ]] && status="ok; rank(s) $killed killed $GRACE s after writing results (hung at exit)"
  [[ -n $failed ]] && status="FAILED: $failed"
  echo "$status" >"$dir/status"
  echo "== $name: $status ($((SECONDS - start)) s)" >&2
  [[ -z $failed ]]
}

COMMON=(--epochs "$EPOCHS" --batch "$BATCH" --lr "$LR" ${EXTRA[@]+"${EXTRA[@]}"} ${XARGS[@]+"${XARGS[@]}"})
status=0

# The split first: it says at once whether this model and batch make DDP's step
# communication-bound on this bed.
if ((SHAPED && SPLIT > 0)); then
  SPLIT_ARGS=("${COMMON[@]}" --max-steps "$SPLIT" --evals-per-epoch 0 --compute-steps $(((SPLIT + 1) / 2)))
  run_row split-shaped ddp "${SPLIT_ARGS[@]}" || status=1
  ns_unshape
  run_row split-unshaped ddp "${SPLIT_ARGS[@]}" || status=1
  ns_shape "$RATE"
fi

for row in ${ROW_LIST[@]+"${ROW_LIST[@]}"}; do
  run_row "$row" "$row" "${COMMON[@]}" --evals-per-epoch "$EVALS" || status=1
done

if ((SHAPED)); then
  read -r up_sent up_drop down_sent down_drop < <(ns_shaper_totals)
  echo "tbf since the last reshaping: uplinks sent $up_sent packets, dropped $up_drop; downlinks sent $down_sent, dropped $down_drop" \
    >"$OUTDIR/shapers.txt"
fi
echo "ddp-testbed: summary ($(date +%T), load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
"$PY" "$HERE/ddp_tta.py" summarize --out "$OUTDIR" || status=1 # this checkout's summary, of any run
for row in ${ROW_LIST[@]+"${ROW_LIST[@]}"}; do
  grep -q '^ok' "$OUTDIR/$row/status" 2>/dev/null || status=1
done
grep -qE '\| NO \|' "$OUTDIR/results.md" && status=1
echo "ddp-testbed: outputs in $OUTDIR" >&2
exit $status
