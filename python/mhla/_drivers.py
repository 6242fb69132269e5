"""Where the OpenCL ICD loader finds drivers, for a package installed without root.

The wheel carries libmhla, CLBlast and the ICD loader (ocl-icd), which reads the drivers' .icd files
from /etc/OpenCL/vendors, or from OCL_ICD_VENDORS where that is set. `pip install 'mhla[pocl]'`
adds PoCL's CPU driver from PyPI (the pocl-binary-distribution wheel, as pyopencl's `pocl` extra
does); it installs its library into site-packages, where no loader looks. So when that wheel is
installed and OCL_ICD_VENDORS is not set, the package makes a vendors folder of its own for this
process: an .icd file naming that PoCL by its full path, beside links to the system's .icd files
(so the system's drivers stay visible), and points OCL_ICD_VENDORS at it before the loader's first
call. MHLA_PYPI_POCL=0 turns this off. The folder is removed at exit (the loader reads it once).
"""
import atexit
import glob
import importlib.util
import os
import shutil
import tempfile

SYSTEM_VENDORS = "/etc/OpenCL/vendors"


def pypi_pocl():
    """The full path of pocl-binary-distribution's libpocl, or None where it is not installed."""
    spec = importlib.util.find_spec("pocl_binary_distribution")
    if spec is None or not spec.submodule_search_locations:
        return None
    site = os.path.dirname(list(spec.submodule_search_locations)[0])
    # Its wheel puts the library where pyopencl's own loader looks: site-packages/pyopencl/.libs.
    found = sorted(glob.glob(os.path.join(site, "pyopencl", ".libs", "libpocl*.so*")))
    return found[0] if found else None


def use_pypi_pocl():
    """Points the ICD loader at PyPI's PoCL as described above; returns the library's path, or None
    where nothing was changed (not installed, turned off, or OCL_ICD_VENDORS already set)."""
    if os.environ.get("OCL_ICD_VENDORS") or os.environ.get("MHLA_PYPI_POCL", "1") == "0":
        return None
    lib = pypi_pocl()
    if lib is None:
        return None
    folder = tempfile.mkdtemp(prefix="mhla-opencl-vendors-")
    atexit.register(shutil.rmtree, folder, True)
    with open(os.path.join(folder, "pypi-pocl.icd"), "w") as f:
        f.write(lib + "\n")
    for icd in sorted(glob.glob(os.path.join(SYSTEM_VENDORS, "*.icd"))):
        os.symlink(icd, os.path.join(folder, "system-" + os.path.basename(icd)))
    os.environ["OCL_ICD_VENDORS"] = folder
    return lib


def no_device_hint():
    """What to add to a no-device message in Python: the extra that brings a CPU driver."""
    if pypi_pocl() is None:
        return ("; in Python without root, pip install 'mhla[pocl]' adds PoCL's CPU driver from PyPI "
                "(pocl-binary-distribution).")
    return ""
