/* sim_config.c — the link model's configuration, read from the environment (sim.h). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "common/env.h"
#include "common/log.h"
#include "transport/sim.h"

/* *out = the value of `name` if it is a finite non-negative number; 1 if so. */
static int env_double(const char* name, double* out) {
  const char* s = env_str(name);
  if (!s) return 0;
  char* end;
  errno = 0;
  double v = strtod(s, &end);
  if (errno || end == s || *end || !(v >= 0) || isinf(v)) {
    GCCL_WARN("ignoring %s=%s: not a non-negative number", name, s);
    return 0;
  }
  *out = v;
  return 1;
}

int sim_config_from_env(struct sim_config* cfg, int ranks_per_node) {
  double gbps = 0, us = 0;
  int has_rate = env_double("GCCL_SIM_LINK_GBPS", &gbps);
  int has_latency = env_double("GCCL_SIM_LINK_US", &us);
  cfg->ranks_per_node = ranks_per_node > 0 ? ranks_per_node : 1;
  cfg->link_bytes_per_s = gbps * 1e9 / 8;
  cfg->latency_s = us * 1e-6;
  cfg->pace = env_int("GCCL_SIM_LINK_PACE", 1) != 0;
  return has_rate || has_latency;
}
