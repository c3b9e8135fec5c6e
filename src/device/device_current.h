/* device_current.h — making a CUDA device current for one call, on whichever
 * thread runs it (device_stage.c): a gccl stream's worker thread has the default
 * device current, a caller's thread may have another. */
#ifndef GCCL_DEVICE_DEVICE_CURRENT_H
#define GCCL_DEVICE_DEVICE_CURRENT_H

/* Makes dev current (nothing when dev < 0). Returns the device device_leave gives
 * back, or -1: none when dev was current already, or when the thread had no CUDA
 * context before (making a device current creates one there, hundreds of MB on
 * a GPU the process may never use). */
int device_enter(int dev);
void device_leave(int prev);

#endif
