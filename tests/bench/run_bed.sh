# run_bed.sh — sourced by the test beds' smoke tests (netns_smoke.sh, ddp_smoke.sh).
#
#   run_bed bench/SCRIPT ARGS...   sets BED_RC (its exit status) and BED_LEFT (how many
#                                  namespaces and links of that run are still there)
#
# The bed runs in the background so that its process id, which names everything it
# makes (namespaces gccltb-PID-K, links gtbPID*), is known: only those must be gone.
# Counting all gccltb-* before and after would blame a run for what another one,
# live or dead, has (a bed removes dead runs' leftovers when it starts).
run_bed() {
  bash "$@" &
  local pid=$!
  wait $pid
  BED_RC=$?
  BED_LEFT=$({ ip netns list 2>/dev/null; ip -o link show 2>/dev/null; } |
    grep -cE "gccltb-$pid-|gtb${pid}[bhn]" || true)
}
