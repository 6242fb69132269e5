#!/usr/bin/env python3
"""Runs a test program with hwloc reporting the machine's real memory:

    real_memory.py CMD ARGS...

PoCL sizes its CPU device (CL_DEVICE_GLOBAL_MEM_SIZE, and from it CL_DEVICE_MAX_MEM_ALLOC_SIZE) from
the memory hwloc finds in the NUMA node, which a virtual machine may understate (seen here: 6.6 to
15 GiB of a 24 GiB VM, so no buffer past 2 or 4 GiB). This exports the topology hwloc sees (through
libhwloc, which PoCL itself loads), sets the NUMA node's memory to MemTotal from /proc/meminfo, and
runs CMD with HWLOC_XMLFILE pointing at it (HWLOC_THISSYSTEM=1: it still describes this machine).
The rest of the topology (cores, caches) is hwloc's own. Where libhwloc cannot be loaded or the
topology has not exactly one NUMA node, CMD runs unchanged (it then skips, saying why, if the device
is too small).
"""
import ctypes
import ctypes.util
import os
import re
import subprocess
import sys
import tempfile


def mem_total():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return 0


def export_topology(path):
    """hwloc's topology of this machine as XML at path; False where libhwloc is not there."""
    name = ctypes.util.find_library("hwloc") or "libhwloc.so.15"
    try:
        hw = ctypes.CDLL(name)
    except OSError:
        return False
    topo = ctypes.c_void_p()
    hw.hwloc_topology_export_xml.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_ulong]
    if hw.hwloc_topology_init(ctypes.byref(topo)) != 0:
        return False
    try:
        return hw.hwloc_topology_load(topo) == 0 and hw.hwloc_topology_export_xml(topo, path.encode(), 0) == 0
    finally:
        hw.hwloc_topology_destroy(topo)


def main(cmd):
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="mhla-hwloc-") as tmp:
        xml = os.path.join(tmp, "topology.xml")
        total = mem_total()
        if total and export_topology(xml):
            text = open(xml).read()
            nodes = re.findall(r'(<object type="NUMANode"[^>]*local_memory=")(\d+)(")', text)
            if len(nodes) == 1 and int(nodes[0][1]) < total:
                text = re.sub(r'(<object type="NUMANode"[^>]*local_memory=")(\d+)(")',
                              lambda m: m.group(1) + str(total) + m.group(3), text)
                with open(xml, "w") as f:
                    f.write(text)
                env.update(HWLOC_XMLFILE=xml, HWLOC_THISSYSTEM="1")
                print("real_memory: hwloc reports %.1f GiB for the NUMA node (it found %.1f GiB)"
                      % (total / 2**30, int(nodes[0][1]) / 2**30), flush=True)
        return subprocess.run(cmd, env=env).returncode


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.stderr.write(__doc__)
        sys.exit(2)
    sys.exit(main(sys.argv[1:]))
