#!/usr/bin/env python3
"""Writes the cffi declarations of libmhla's public API from the real headers.

Why generated: the Python binding (cffi in ABI mode) lays out mhla_config and mhla_device_info from
these declarations; taking them from include/mhla_reference.h (which includes mhla.h) through the C
preprocessor means a field added to a header reaches Python at the next build, never a hand copy
that drifts. The OpenCL types are opaque handles here, so no OpenCL header is needed.

usage: gen_cdef.py CC [CC_ARGS...] -- HEADER OUTPUT
"""
import os
import subprocess
import sys
import tempfile

CL_STUB = """typedef struct _cl_mem *cl_mem;
typedef struct _cl_context *cl_context;
typedef struct _cl_command_queue *cl_command_queue;
typedef struct _cl_device_id *cl_device_id;
typedef struct _cl_event *cl_event;
typedef int32_t cl_int;
typedef uint32_t cl_uint;
"""


def main():
    argv = sys.argv[1:]
    sep = argv.index("--")
    cc, (header, output) = argv[:sep], argv[sep + 1:]
    with tempfile.TemporaryDirectory() as stubs:
        os.makedirs(os.path.join(stubs, "CL"))
        with open(os.path.join(stubs, "CL", "cl.h"), "w") as f:
            f.write(CL_STUB)
        for name in ("stddef.h", "stdint.h"):  # cffi knows size_t, int64_t, ... itself
            open(os.path.join(stubs, name), "w").close()
        # -U__GNUC__: the header then defines MHLA_API as nothing, and no attribute reaches cffi.
        text = subprocess.run(cc + ["-E", "-P", "-w", "-nostdinc", "-U__GNUC__", "-U__clang__",
                                    "-I", stubs, header],
                              check=True, stdout=subprocess.PIPE).stdout.decode()
    lines = [l for l in text.splitlines() if l.strip()]
    tmp = output + ".tmp"
    with open(tmp, "w") as f:
        f.write("\n".join(lines) + "\n")
    os.replace(tmp, output)


if __name__ == "__main__":
    main()
