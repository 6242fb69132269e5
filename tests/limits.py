"""Runs one test command under several forced device limits (MHLA_LIMITS): the work-group limit and
the local memory a GPU or a phone would give the kernels, on the CPU devices CI has.

    limits.py WG:LOCAL[,WG:LOCAL...] CMD ARGS...      e.g. 64:16K,256:48K

The library fits its tiles to the limits it holds (host/core/context.c reads MHLA_LIMITS, lowering
the device's own), so a kernel that assumes a larger group or more local memory than it asked for
fails here. Exits with the first failing run's status (77, Meson's SKIP, only if every run
skipped), printing one line per setting.
"""
import os
import subprocess
import sys

SKIP = 77


def main():
    if len(sys.argv) < 3:
        sys.exit("usage: limits.py WG:LOCAL[,WG:LOCAL...] CMD ARGS...")
    settings = [s.split(":") for s in sys.argv[1].split(",")]
    cmd = sys.argv[2:]
    if cmd[0].endswith(".py"):  # tests/run_with.py: under this interpreter
        cmd = [sys.executable] + cmd
    worst, skipped = 0, 0
    for wg, local in settings:
        env = dict(os.environ, MHLA_LIMITS="wg=%s,local=%s" % (wg, local))
        print("== MHLA_LIMITS=%s" % env["MHLA_LIMITS"], flush=True)
        rc = subprocess.run(cmd, env=env).returncode
        print("== MHLA_LIMITS=%s: %s" % (env["MHLA_LIMITS"], "passed" if rc == 0 else
                                         "skipped" if rc == SKIP else "FAILED (exit %d)" % rc), flush=True)
        if rc == SKIP:
            skipped += 1
        elif rc != 0 and worst == 0:
            worst = rc
    if worst:
        sys.exit(worst)
    sys.exit(SKIP if skipped == len(settings) else 0)


if __name__ == "__main__":
    main()
