"""The binding: cffi in ABI mode over the libmhla shared library built into this package.

Why cffi's ABI mode and not a C extension: the library already exports a plain C API with opaque
handles, so the binding needs no C code of its own to compile, keep in step or debug; the
declarations are generated from the public headers at build time (python/gen_cdef.py), so a
struct field added there cannot drift from what Python lays out; and cffi releases the GIL in
every call, so a Python thread waiting on the device does not stop the others.
"""
import os
import platform

import cffi

from . import _drivers

_here = os.path.dirname(os.path.abspath(__file__))


def _find(env, names):
    path = os.environ.get(env)
    if path:
        return path
    for name in names:
        candidate = os.path.join(_here, name)
        if os.path.exists(candidate):
            return candidate
    raise ImportError(
        "mhla: %s not found next to %s and %s is not set: install the package with "
        "'pip install --no-build-isolation .' from the libmhla source tree" % (names[0], __file__, env))


def _open(path):
    """The library, or an ImportError that says which file failed to load, why, and on what
    platform (a wheel copied to a system it was not built for fails here, if pip let it in)."""
    try:
        return ffi.dlopen(path)
    except OSError as e:
        raise ImportError(
            "mhla: cannot load %s: %s. This system: %s %s, %s; a wheel runs on the systems its file name "
            "names (manylinux_2_34_x86_64: Linux x86_64 with glibc 2.34 or later), others build from "
            "source ('pip install --no-build-isolation .' in the libmhla tree)"
            % (path, e, platform.system(), platform.machine(), " ".join(platform.libc_ver()) or "no glibc")) from e


ffi = cffi.FFI()
with open(_find("MHLA_CDEF", ["_cdef.h"])) as _f:
    ffi.cdef(_f.read())
# Before the library's first OpenCL call: PyPI's PoCL, where the mhla[pocl] extra installed it.
_drivers.use_pypi_pocl()
lib = _open(_find("MHLA_LIBRARY", ["_libmhla.so", "_libmhla.dylib", "_libmhla.dll"]))

NULL = ffi.NULL


class MHLAError(Exception):
    """A libmhla call failed. `status` is the library's status code, `status_name` its name
    ("MHLA_ERR_INVALID_SHAPE"), and the text is the library's message naming the offending value."""

    def __init__(self, status, message):
        self.status = int(status)
        self.status_name = ffi.string(lib.mhla_status_name(status)).decode()
        self.message = message
        super().__init__("%s: %s" % (self.status_name, message))


class InvalidArgument(MHLAError, ValueError):
    """MHLA_ERR_INVALID_ARGUMENT, and a wrong dtype, layout or non-contiguous array."""


class InvalidShape(MHLAError, ValueError):
    """MHLA_ERR_INVALID_SHAPE, and arrays whose shapes disagree."""


class BufferTooSmall(MHLAError, ValueError):
    """MHLA_ERR_BUFFER_TOO_SMALL."""


class Unsupported(MHLAError):
    """MHLA_ERR_UNSUPPORTED: not supported by this build or device."""


class DeviceError(MHLAError):
    """A failure on or of the OpenCL device (the base of the next five)."""


class DeviceNotFound(DeviceError, LookupError):
    """MHLA_ERR_DEVICE_NOT_FOUND (the message lists the devices)."""


class OutOfDeviceMemory(DeviceError, MemoryError):
    """MHLA_ERR_OUT_OF_DEVICE_MEMORY."""


class BuildFailed(DeviceError):
    """MHLA_ERR_BUILD_FAILED (the message holds the build log)."""


class OpenCLError(DeviceError):
    """MHLA_ERR_OPENCL."""


class BlasError(DeviceError):
    """MHLA_ERR_BLAS: a CLBlast call failed."""


class OutOfHostMemory(MHLAError, MemoryError):
    """MHLA_ERR_OUT_OF_HOST_MEMORY."""


class SequenceTooLong(MHLAError, ValueError):
    """MHLA_ERR_SEQUENCE_TOO_LONG: longer than the mixing matrix covers."""


class CapacityExceeded(MHLAError):
    """MHLA_ERR_CAPACITY_EXCEEDED: a decoder stepped past its capacity."""


class ConfigMismatch(MHLAError):
    """MHLA_ERR_CONFIG_MISMATCH."""


class MPIError(MHLAError):
    """MHLA_ERR_MPI."""


class FileError(MHLAError, OSError):
    """MHLA_ERR_IO: a file could not be created, written or renamed (the message names it)."""


ERRORS = {
    lib.MHLA_ERR_INVALID_ARGUMENT: InvalidArgument,
    lib.MHLA_ERR_INVALID_SHAPE: InvalidShape,
    lib.MHLA_ERR_BUFFER_TOO_SMALL: BufferTooSmall,
    lib.MHLA_ERR_UNSUPPORTED: Unsupported,
    lib.MHLA_ERR_DEVICE_NOT_FOUND: DeviceNotFound,
    lib.MHLA_ERR_OUT_OF_DEVICE_MEMORY: OutOfDeviceMemory,
    lib.MHLA_ERR_OUT_OF_HOST_MEMORY: OutOfHostMemory,
    lib.MHLA_ERR_BUILD_FAILED: BuildFailed,
    lib.MHLA_ERR_OPENCL: OpenCLError,
    lib.MHLA_ERR_BLAS: BlasError,
    lib.MHLA_ERR_SEQUENCE_TOO_LONG: SequenceTooLong,
    lib.MHLA_ERR_CAPACITY_EXCEEDED: CapacityExceeded,
    lib.MHLA_ERR_CONFIG_MISMATCH: ConfigMismatch,
    lib.MHLA_ERR_MPI: MPIError,
    lib.MHLA_ERR_IO: FileError,
}


def invalid(message):
    """InvalidArgument for a refusal the binding makes itself (a wrong dtype, a closed handle)."""
    return InvalidArgument(lib.MHLA_ERR_INVALID_ARGUMENT, message)


def bad_shape(message):
    """InvalidShape for arrays whose shapes disagree with each other or with the layout."""
    return InvalidShape(lib.MHLA_ERR_INVALID_SHAPE, message)


def error(status, message):
    """The exception for a status (MHLAError for one this binding does not know)."""
    return ERRORS.get(status, MHLAError)(status, message)


def check(status, ctx=None):
    """Raises the status's exception with the library's message: the context's for calls on a
    context (it survives other threads' calls), else this thread's last message."""
    if status == lib.MHLA_OK:
        return
    text = lib.mhla_context_message(ctx) if ctx is not None else NULL
    message = ffi.string(text).decode(errors="replace") if text != NULL else ""
    if not message:
        message = ffi.string(lib.mhla_last_message()).decode(errors="replace")
    if status == lib.MHLA_ERR_DEVICE_NOT_FOUND and message.startswith("no OpenCL device found"):
        message += _drivers.no_device_hint()
    raise error(status, message or ffi.string(lib.mhla_strerror(status)).decode())
