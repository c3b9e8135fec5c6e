/* log.c — GCCL_DEBUG / GCCL_DEBUG_SUBSYS logging to stderr. */
#include "common/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/env.h"

static enum log_level level = LOG_NONE;
static int subsys_mask = LOG_ALL;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static _Thread_local int thread_rank = -1;

static const struct {
  const char* name;
  int bit;
} subsys_names[] = {{"INIT", LOG_INIT}, {"COLL", LOG_COLL},   {"TUNING", LOG_TUNING},
                    {"TRANSPORT", LOG_TRANSPORT}, {"ALLOC", LOG_ALLOC}, {"ENV", LOG_ENV}, {"ALL", LOG_ALL}};

static int subsys_bit(const char* name, size_t len) {
  for (size_t i = 0; i < sizeof subsys_names / sizeof subsys_names[0]; i++)
    if (strlen(subsys_names[i].name) == len && strncasecmp(subsys_names[i].name, name, len) == 0)
      return subsys_names[i].bit;
  return 0;
}

/* "INIT,COLL" selects those; "^TRANSPORT" selects all but those, as NCCL does. */
static void parse_subsys(const char* s) {
  int invert = (*s == '^');
  if (invert) s++;
  int mask = 0;
  while (*s) {
    size_t len = strcspn(s, ",");
    mask |= subsys_bit(s, len);
    s += len + (s[len] == ',');
  }
  subsys_mask = invert ? ~mask : mask;
}

static void log_read_env(void) {
  const char* d = env_str("GCCL_DEBUG");
  if (d) {
    if (!strcasecmp(d, "WARN")) level = LOG_WARN;
    else if (!strcasecmp(d, "INFO")) level = LOG_INFO;
    else if (!strcasecmp(d, "TRACE")) level = LOG_TRACE;
    else if (!strcasecmp(d, "VERSION") || !strcasecmp(d, "NONE")) level = LOG_NONE;
  }
  const char* s = env_str("GCCL_DEBUG_SUBSYS");
  if (s) parse_subsys(s);
}

void log_init(void) { pthread_once(&once, log_read_env); }

void log_set_rank(int rank) { thread_rank = rank; }

int log_enabled(enum log_level l, int subsys) {
  log_init();
  return l <= level && (subsys & subsys_mask) != 0;
}

void log_write(enum log_level l, int subsys, const char* fmt, ...) {
  if (!log_enabled(l, subsys)) return;
  static const char* const names[] = {"", "WARN", "INFO", "TRACE"};
  char host[64] = "";
  gethostname(host, sizeof host - 1);
  char line[1024];
  int n = snprintf(line, sizeof line, "%s:%d:%d [%d] GCCL %s ", host, (int)getpid(), (int)gettid(), thread_rank,
                   names[l]);
  va_list ap;
  va_start(ap, fmt);
  if (n > 0 && (size_t)n < sizeof line) vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
  va_end(ap);
  fprintf(stderr, "%s\n", line); /* one fprintf per line: lines of threads do not interleave */
}
