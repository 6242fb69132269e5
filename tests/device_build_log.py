#!/usr/bin/env python3
"""Every specialization the host emits (specializations.py) built by the device under test's own
compiler, with its compile cache off, and no build log may hold a warning (tests/build_log.c):
a warning is printed on stderr by PoCL ("N warnings generated.") and usually means slow code
(a vector wider than the device's registers changes the calling convention).

    device_build_log.py BUILD_LOG_EXE KERNEL_DIR PROGRAM...
"""
import os
import subprocess
import sys
import tempfile

from specializations import collect, write_dump


def main(argv):
    if len(argv) < 4:
        sys.stderr.write(__doc__)
        return 2
    build_log, kernel_dir = argv[1], argv[2]
    specs = collect(argv[3:], "device_build_log")
    fd, dump = tempfile.mkstemp(prefix="mhla-specs-")
    os.close(fd)
    try:
        write_dump(specs, dump)
        # A program from the compile cache comes back with an empty log.
        env = dict(os.environ, POCL_KERNEL_CACHE="0", MESA_SHADER_CACHE_DISABLE="true")
        return subprocess.run([build_log, kernel_dir, dump], env=env).returncode
    finally:
        os.unlink(dump)


if __name__ == "__main__":
    sys.exit(main(sys.argv))
