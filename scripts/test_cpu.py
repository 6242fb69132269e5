#!/usr/bin/env python3
"""Where the test suite's CPU goes: each meson test's user and system time, its children's included
(a test's time in meson's log is wall time, shared with the test beside it).

    meson test -C build --wrapper "$PWD/scripts/test_cpu.py" [TESTS...]   # records, MHLA_TEST_CPU_LOG
    scripts/test_cpu.py --report [LOG]                                      # the table, largest first

As a wrapper it runs the test's command, then appends one line to the log named by
MHLA_TEST_CPU_LOG (default test-cpu.log in the current folder, which is meson's build folder):
"NAME USER_S SYSTEM_S WALL_S EXIT", NAME being the test's cache folder (tests/meson.build gives
every test its own MHLA_CACHE_DIR, named after it). The suite is nearly all compiling, so run it
cold to see what a fresh clone pays: an empty HOME (PoCL's cache), and build/tests/programs*,
build/tests/shaders-unoptimized and build/tests/cache removed.
"""
import os
import resource
import subprocess
import sys
import time


def record(cmd):
    began = time.time()
    rc = subprocess.call(cmd)
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    name = os.path.basename(os.environ.get("MHLA_CACHE_DIR", "")) or os.path.basename(cmd[-1])
    with open(os.environ.get("MHLA_TEST_CPU_LOG", "test-cpu.log"), "a", encoding="utf-8") as log:
        log.write("%s %.1f %.1f %.1f %d\n" % (name, used.ru_utime, used.ru_stime, time.time() - began, rc))
    return rc


def report(path):
    rows = []
    with open(path, encoding="utf-8") as log:
        for line in log:
            name, user, system, wall, rc = line.split()
            rows.append((float(user) + float(system), float(system), float(wall), int(rc), name))
    rows.sort(reverse=True)
    total = sum(r[0] for r in rows)
    print("%-34s %8s %8s %8s %6s" % ("test", "CPU s", "system", "wall s", "share"))
    for cpu, system, wall, rc, name in rows:
        print("%-34s %8.1f %8.1f %8.1f %5.1f%%%s" % (name, cpu, system, wall, 100 * cpu / total if total else 0,
                                                  "" if rc in (0, 77) else "  (exit %d)" % rc))
    print("%d tests, %.0f s of CPU" % (len(rows), total))
    return 0


def main(argv):
    if argv[1:2] == ["--report"]:
        return report(argv[2] if len(argv) > 2 else os.environ.get("MHLA_TEST_CPU_LOG", "test-cpu.log"))
    if len(argv) < 2 or argv[1].startswith("-"):
        sys.stderr.write(__doc__)
        return 2
    return record(argv[1:])


if __name__ == "__main__":
    sys.exit(main(sys.argv))
