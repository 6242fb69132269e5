#!/usr/bin/env bash
# Builds here what scripts/gpu_check.sh needs on a GPU machine that is lent for a few minutes and
# has none of our build tools (no Meson, no compiler, no CLBlast or cmocka, possibly no ICD file
# for its OpenCL driver), into one ignored folder, gpu-carry/, small enough to travel with a copy
# of the working tree:
#
#   gpu-carry/build/       a release build of the working tree as it is now: the test programs,
#                          cli/mhla, bench/mhla-bench and libmhla.so, laid out as in the build
#                          folder (the programs find the library through their $ORIGIN rpath);
#                          stripped, no object files
#   gpu-carry/base/        with --base REV: mhla-bench, mhla and libmhla.so of revision REV, for
#                          A/B timings on the same machine in the same minutes
#   gpu-carry/tests.json   the test list for scripts/device_suite.py
#   gpu-carry/lib/         the shared libraries the programs link that such a machine may lack
#                          (the ocl-icd loader, CLBlast, cmocka)
#   gpu-carry/icd/         an ICD folder naming NVIDIA's OpenCL library (OCL_ICD_VENDORS)
#   gpu-carry/source.txt   which tree was built (commit, changed files, base revision)
#
# usage: scripts/gpu_prepare.sh [--base REV]
#
# Then on the GPU machine, from the repository root, with gpu-carry carried along (the device
# tool `run` with carry ["gpu-carry"] and the command `bash scripts/gpu_check.sh`).
#
# The builds themselves live outside the repository (GPU_PREPARE_WORK, default
# /tmp/gpu-prepare): Ninja then rebuilds only what changed on the next call, and gpu-carry/
# receives copies of just the files that run. Nothing tracked is touched; gpu-carry/ is listed
# in .git/info/exclude, so that it stays out of `git status` without a change to .gitignore.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

base_rev=""
while [ $# -gt 0 ]; do
    case "$1" in
    --base) [ $# -ge 2 ] || { echo "gpu_prepare: --base needs a revision" >&2; exit 2; }
            base_rev=$2; shift 2 ;;
    --base=*) base_rev=${1#--base=}; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu_prepare: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

root=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
cd "$root"
carry=$root/gpu-carry
work=${GPU_PREPARE_WORK:-/tmp/gpu-prepare}
stage=$work/build
t_start=$(date +%s)

# Keep gpu-carry/ out of `git status` (and out of the device tool's copy of the tree, which
# takes it only as a carried path).
exclude=$(git rev-parse --git-path info/exclude)
mkdir -p "$(dirname "$exclude")"
grep -qxF '/gpu-carry/' "$exclude" 2>/dev/null || echo '/gpu-carry/' >>"$exclude"

# The option names of a source tree's meson_options.txt: an older revision may lack one, and
# Meson refuses -D for an unknown option.
meson_opts() { # SRC NAME=VALUE...
    local src=$1 kv
    shift
    for kv in "$@"; do
        grep -q "option('${kv%%=*}'" "$src/meson_options.txt" 2>/dev/null && printf -- '-D%s\n' "$kv"
    done
}

# Copies the runnable files of build folder $1 to $2, keeping their relative paths (rpaths are
# $ORIGIN-relative): ELF executables and shared libraries (with their soname links). Static
# libraries, objects (*.p folders) and Meson's own files stay behind.
copy_runtime() { # FROM TO [FILTER-REGEX]
    local from=$1 to=$2 filter=${3:-.} f rel
    rm -rf "$to"
    mkdir -p "$to"
    (cd "$from" && find . -path ./meson-private -prune -o -path '*.p' -prune -o \
        \( -type f -o -type l \) \( -perm -u+x -o -name '*.so' -o -name '*.so.*' \) -print) |
        sed 's|^\./||' | grep -E "$filter" | while read -r rel; do
        f=$from/$rel
        if [ -L "$f" ] || head -c 4 "$f" | grep -q 'ELF'; then
            mkdir -p "$to/$(dirname "$rel")"
            cp -P "$f" "$to/$rel"
        fi
    done
    find "$to" -name '*.so*' -type f -exec strip --strip-unneeded {} + 2>/dev/null || true
    find "$to" -type f -perm -u+x ! -name '*.so*' -exec strip {} + 2>/dev/null || true
}

# ---- the working tree ---------------------------------------------------------------------------
echo "== build of the working tree in $stage"
if [ ! -f "$stage/build.ninja" ]; then
    rm -rf "$stage"
    mkdir -p "$work"
    # shellcheck disable=SC2046
    meson setup "$stage" "$root" --buildtype=release $(meson_opts "$root" mpi=disabled blas=disabled \
        python=disabled fuzz=false tests=enabled)
fi
ninja -C "$stage"
copy_runtime "$stage" "$carry/build"

# The test list, its build paths moved to gpu-carry/build (scripts/device_suite.py maps them to
# wherever gpu-carry/build is on the other machine; gpu_check.sh maps the source paths). Meson
# names source files relative to the build folder (BUILD/../../work/...): resolved first, since
# that relation does not survive the move.
# 'layers' is left out: it reads the library's object files with `nm`, which gpu-carry does not
# hold, and it checks the sources' structure, the same on every device.
# PoCL's compile knobs that every test sets (POCL_WORK_GROUP_SPECIALIZATION, POCL_EXTRA_BUILD_FLAGS)
# are removed too: other implementations ignore them (device_suite.py does not count them as a
# claim on PoCL's devices either).
meson introspect --tests "$stage" >"$work/tests-raw.json"
python3 - "$work/tests-raw.json" "$stage" "$carry/build" "$root" "$carry/tests.json" <<'EOF'
import json, os, sys
raw, stage, build, root, out = sys.argv[1:]
PASSIVE = {"POCL_WORK_GROUP_SPECIALIZATION", "POCL_EXTRA_BUILD_FLAGS"}
def move(x):
    if isinstance(x, str):
        if x == stage or x.startswith(stage + "/"):
            x = os.path.normpath(x)
        return x.replace(stage, build)
    if isinstance(x, list):
        return [move(v) for v in x]
    if isinstance(x, dict):
        return {k: move(v) for k, v in x.items()}
    return x
tests = [move(t) for t in json.load(open(raw))]
for t in tests:
    t["env"] = {k: v for k, v in t["env"].items() if k not in PASSIVE}
dropped = [t["name"] for t in tests if t["name"] == "layers"]
tests = [t for t in tests if t["name"] not in dropped]
json.dump({"build": build, "source": root, "dropped": dropped, "env_removed": sorted(PASSIVE),
           "tests": tests}, open(out, "w"), indent=1)
print(f"tests.json: {len(tests)} tests (left out: {', '.join(dropped) or 'none'})")
EOF

# ---- the baseline revision ----------------------------------------------------------------------
rm -rf "$carry/base"
if [ -n "$base_rev" ]; then
    commit=$(git rev-parse --verify "$base_rev^{commit}")
    bsrc=$work/base-src
    bbuild=$work/base-build
    echo "== baseline $base_rev ($commit) in $bbuild"
    # `git archive` reads the object store only: no worktree entry, nothing in the checkout.
    if [ "$(cat "$work/base-commit" 2>/dev/null)" != "$commit" ] || [ ! -f "$bbuild/build.ninja" ]; then
        rm -rf "$bsrc" "$bbuild" "$work/base-commit"
        mkdir -p "$bsrc"
        git archive "$commit" | tar -x -C "$bsrc"
        # shellcheck disable=SC2046
        meson setup "$bbuild" "$bsrc" --buildtype=release $(meson_opts "$bsrc" mpi=disabled blas=disabled \
            python=disabled fuzz=false tests=disabled)
        echo "$commit" >"$work/base-commit"
    fi
    ninja -C "$bbuild" bench/mhla-bench cli/mhla
    # The kernels are compiled into libmhla.so (kernels/meson.build), so the binaries and the
    # library are the whole baseline.
    copy_runtime "$bbuild" "$carry/base" '^(bench/mhla-bench|cli/mhla|host/lib[^/]*\.so[.0-9]*)$'
fi

# ---- shared libraries and the ICD folder --------------------------------------------------------
rm -rf "${carry:?}/lib" "${carry:?}/icd"
mkdir -p "$carry/lib" "$carry/icd"
want='^(libOpenCL\.so\.1|libclblast\.so\.1|libcmocka\.so\.0)$'
dirs=("$carry/build")
[ -d "$carry/base" ] && dirs+=("$carry/base")
find "${dirs[@]}" -type f -perm -u+x | while read -r f; do
    ldd "$f" 2>/dev/null || true
done | awk '$2 == "=>" && $3 ~ /^\// { print $1, $3 }' | sort -u >"$work/needed.txt"
while read -r name path; do
    if echo "$name" | grep -qE "$want"; then
        cp -L "$path" "$carry/lib/$name"
    fi
done <"$work/needed.txt"
for name in libOpenCL.so.1 libclblast.so.1 libcmocka.so.0; do
    [ -f "$carry/lib/$name" ] || { echo "gpu_prepare: no $name among the programs' libraries" >&2; exit 1; }
done
# What else the programs and CLBlast need: expected on any glibc system (told here, not copied:
# a copied libstdc++ older than the machine's own would break its other programs).
echo "== other libraries the programs need (from the machine itself):"
{ awk '{ print $1 }' "$work/needed.txt"; ldd "$carry/lib/libclblast.so.1" | awk '$2 == "=>" { print $1 }'; } |
    sort -u | grep -vE "$want" | grep -v '^libmhla' | tr '\n' ' '
echo
# NVIDIA's driver registers its OpenCL library through /etc/OpenCL/vendors/nvidia.icd, which a
# container may lack: this folder, as OCL_ICD_VENDORS, names it to the ocl-icd loader.
echo "libnvidia-opencl.so.1" >"$carry/icd/nvidia.icd"

{
    echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
    echo "tree: $(git rev-parse HEAD) ($(git log -1 --format=%s | cut -c1-100))"
    changed=$(git status --short | grep -v ' gpu-carry/' || true)
    if [ -n "$changed" ]; then
        echo "uncommitted changes (sha1 of \`git diff HEAD\` $(git diff HEAD | sha1sum | cut -c1-12), untracked files not in it):"
        echo "$changed" | sed 's/^/  /'
    else
        echo "no uncommitted changes"
    fi
    if [ -n "$base_rev" ]; then
        echo "base: $base_rev = $commit ($(git log -1 --format=%s "$commit" | cut -c1-100))"
    else
        echo "base: none"
    fi
} >"$carry/source.txt"
cat "$carry/source.txt"

# The test programs' caches (program binaries, tuning databases) stay behind: a run here would
# otherwise fill gpu-carry/build/tests/ with PoCL's programs.
rm -rf "$carry/build/tests/cache" "$carry/build/tests/programs" "$carry/build/tests/programs-unoptimized"

echo "== gpu-carry"
du -sh "$carry"/* | sed 's|'"$root"'/||'
bytes=$(du -sb "$carry" | cut -f1)
mib=$(( (bytes + 1048575) / 1048576 ))
echo "total: $mib MiB ($bytes bytes) in gpu-carry/, $(( $(date +%s) - t_start )) s"
if [ "$mib" -gt 40 ]; then
    echo "gpu_prepare: gpu-carry is over 40 MiB: the device tool carries 64 MiB with the tree" >&2
    exit 1
fi
