"""Makes the package in ../ importable without installing it, and offers a helper
that runs one function per thread rank."""

import os
import sys
import threading

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)


def run_ranks(n, fn, timeout=60):
    """fn(rank) on n threads; returns their results, re-raising the first exception."""
    results, errors = [None] * n, [None] * n

    def body(r):
        try:
            results[r] = fn(r)
        except BaseException as e:  # reported below, on the test's thread
            errors[r] = e

    threads = [threading.Thread(target=body, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
        assert not t.is_alive(), "a rank thread did not finish in %d s" % timeout
    for e in errors:
        if e is not None:
            raise e
    return results
