"""The thread that runs a DDP hook state's bucket communication, in bucket order.

Why a thread of our own: DDP waits on the future a hook returns, and everything a
bucket sends should hang off that future (no blocking collective inside the hook,
so backward goes on). Chaining collectives with Future.then() would run Python on
the backend's threads (gloo's), in an order that differs from rank to rank, and
a gloo thread left waiting for the GIL deadlocks the process at exit: DDP's
reducer is destroyed holding the GIL and joins that thread in ~ProcessGroupGloo
(torch 1.13, about one run in five with the old hook). Here no Python runs on a
backend thread: this one thread issues every collective of the hook's process
group in the order the hook queued the buckets (the same on every rank), waits
for each with Work.wait(), and completes a torch.futures.Future of its own.
Tensors handed to the backend stay referenced by their bucket plan, so a
backend thread never frees a tensor that has a Python object either.

A job that fails fails its future and every later one (without issuing their
collectives), so the state reports the first error instead of a mismatched
collective on a peer.
"""

import queue
import threading

import torch

from .errors import GcclRemoteError


class HookWorker:
    """One daemon thread running jobs (functions returning the bucket's tensor) in
    submission order. stop() lets the queued jobs finish, then ends the thread."""

    def __init__(self, name="gccl-hook"):
        self._jobs = queue.SimpleQueue()
        self._thread = threading.Thread(target=_run, args=(self._jobs,), name=name, daemon=True)
        self._thread.start()

    def submit(self, job):
        """A torch.futures.Future that job()'s value (or exception) completes."""
        fut = torch.futures.Future()
        self._jobs.put((job, fut))
        return fut

    def stop(self):
        """Runs what is queued, then ends the thread. Idempotent; safe from a finalizer."""
        if self._thread.is_alive():
            self._jobs.put(None)
            if self._thread is not threading.current_thread():
                self._thread.join()


def _run(jobs):
    failed = None
    while True:
        item = jobs.get()
        if item is None:
            return
        job, fut = item
        del item
        if failed is not None:
            fut.set_exception(GcclRemoteError("remote error", "an earlier bucket's communication failed: %s" % failed))
        else:
            try:
                value = job()
            except BaseException as e:  # the training loop sees it when DDP waits on the future
                failed = e
                fut.set_exception(e)
            else:
                fut.set_result(value)
                del value
        del job, fut  # nothing of the job outlives it on this thread
