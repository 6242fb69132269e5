# Sourced by scripts/test.sh --sanitize and tests/fuzz/run.sh: the sanitizer runtime options.
# ASan: leak checks at exit, with this folder's suppressions (the OpenCL stack's own allocations,
# by library). UBSan: any report is an error (halt_on_error), with its stack.
# OpenCL: PoCL's ICD only, unless OCL_ICD_VENDORS says otherwise. The ICD loader otherwise loads
# every installed driver; Mesa's clover (mesa-opencl-icd, for the rusticl suite) then leaks from
# pipe_swrast.so, which it unloads before the leak check, so the stack ends in an unnamed module
# that no suppression can match (the slow unwinder would name the caller, but makes every LLVM
# kernel compile so slow that the cli suite took over 10 minutes).
mhla_sanitize_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export ASAN_OPTIONS="detect_leaks=1:${ASAN_OPTIONS:-}"
# use_tls=0: LeakSanitizer's tracer crashed now and then ("Tracer caught signal 11") walking the
# thread-local storage of PoCL's threads at the exit of an `mhla` process (about one cli suite run in
# three); without TLS as roots it cannot hide a leak, only report more, and no run here reported any.
export LSAN_OPTIONS="suppressions=$mhla_sanitize_dir/lsan.supp:print_suppressions=0:use_tls=0:${LSAN_OPTIONS:-}"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:${UBSAN_OPTIONS:-}"
if [ -z "${OCL_ICD_VENDORS:-}" ] && [ -f /etc/OpenCL/vendors/pocl.icd ]; then
    export OCL_ICD_VENDORS=/etc/OpenCL/vendors/pocl.icd
fi
# Symbolized stacks: llvm-14 installs its symbolizer under a versioned name only.
if [ -z "${ASAN_SYMBOLIZER_PATH:-}" ] && [ -x /usr/lib/llvm-14/bin/llvm-symbolizer ]; then
    export ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-14/bin/llvm-symbolizer
fi
