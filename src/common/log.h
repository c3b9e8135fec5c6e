/* log.h — GCCL_DEBUG logging to stderr with a rank prefix, filtered by GCCL_DEBUG_SUBSYS. */
#ifndef GCCL_COMMON_LOG_H
#define GCCL_COMMON_LOG_H

enum log_level { LOG_NONE = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_TRACE = 3 };

/* Subsystems, as NCCL_DEBUG_SUBSYS: a comma list of names, ALL, or ^NAME to exclude. */
enum log_subsys {
  LOG_INIT = 1 << 0,
  LOG_COLL = 1 << 1,
  LOG_TUNING = 1 << 2,
  LOG_TRANSPORT = 1 << 3,
  LOG_ALLOC = 1 << 4,
  LOG_ENV = 1 << 5,
  LOG_ALL = ~0
};

/* Reads GCCL_DEBUG and GCCL_DEBUG_SUBSYS (once per process, thread-safe). */
void log_init(void);
/* The rank printed in the calling thread's messages; -1 prints none. */
void log_set_rank(int rank);
int log_enabled(enum log_level level, int subsys);
void log_write(enum log_level level, int subsys, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

#define GCCL_WARN(...) log_write(LOG_WARN, LOG_ALL, __VA_ARGS__)
#define GCCL_INFO(subsys, ...) \
  do { if (log_enabled(LOG_INFO, subsys)) log_write(LOG_INFO, subsys, __VA_ARGS__); } while (0)
#define GCCL_TRACE(subsys, ...) \
  do { if (log_enabled(LOG_TRACE, subsys)) log_write(LOG_TRACE, subsys, __VA_ARGS__); } while (0)

#endif
