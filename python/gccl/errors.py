"""The exceptions of gccl: one GcclError subclass per result code of gccl.h."""


class GcclError(Exception):
    """A gccl call failed. `code` is the gcclResult_t value, `name` its
    gcclGetErrorString, `message` gcclGetLastError's text (what was wrong)."""

    code = -1

    def __init__(self, name, message):
        self.name = name
        self.message = message
        super().__init__("%s: %s" % (name, message) if message else name)


class GcclSystemError(GcclError):
    code = 1


class GcclInternalError(GcclError):
    code = 2


class GcclInvalidArgument(GcclError, ValueError):
    code = 3


class GcclInvalidUsage(GcclError):
    code = 4


class GcclRemoteError(GcclError):
    code = 5


class GcclInProgress(GcclError):
    code = 6


class GcclTimeout(GcclError, TimeoutError):
    code = 7


class GcclCorruptData(GcclError):
    code = 8


BY_CODE = {cls.code: cls for cls in (GcclSystemError, GcclInternalError, GcclInvalidArgument, GcclInvalidUsage,
                                     GcclRemoteError, GcclInProgress, GcclTimeout, GcclCorruptData)}


def raise_for(code, name, message):
    cls = BY_CODE.get(code)
    if cls is None:  # a code this binding does not know: newer library
        err = GcclError(name, message)
        err.code = code
        raise err
    raise cls(name, message)
