#!/usr/bin/env bash
# Runs the checks worth a lent GPU machine's few minutes, from the builds that
# scripts/gpu_prepare.sh left in gpu-carry/: such a machine has NVIDIA's OpenCL driver but none of
# our build tools, so nothing is built here. Run from the repository root, with gpu-carry/ carried
# along; through the device tool that is `run` with carry ["gpu-carry"] and the command
# `bash scripts/gpu_check.sh`. Everything goes to ${OUT:-gpu-out}/, as at most 6 files: the device
# tool brings back 8 at most, so the JSON files below travel in one archive, bench-json.tar.gz
# (`tar -xzf bench-json.tar.gz` where they come back), beside the text files:
#
#   info.txt           nvidia-smi -L, `mhla info`, what was built (gpu-carry/source.txt), the
#                      libraries the programs load, and the steps' verdicts and wall times
#   bench-new.json     mhla-bench of the working tree's build: N = 1024, 4096, 16384, causal chunks
#                      64 and 128, decode after 8192 tokens, forward and backward rows; then one
#                      B = 8, N = 4096 mhla row, added to the same file's rows (each row carries its
#                      batch, and --compare matches rows on it)
#   bench-base.json    the same with the baseline build (gpu-carry/base, gpu_prepare.sh --base),
#                      run right after the new one, on the same machine
#   bench.txt          their text tables, then `mhla-bench --compare bench-base.json bench-new.json`,
#                      and at the end the GPU speed targets (scripts/gpu_targets.py: a table of each
#                      target's figure in bench-base, -new, -nextdecode, -onelaunch and -tuned.json), also printed
#   selftest.txt       `mhla selftest` with the device's own tuning row, then with row=gpu
#   suite.txt          scripts/device_suite.py: the opencl, unit and cli tests on the device, then
#                      the last lines of each failed test's log
#   tune.txt           with GPU_CHECK_TUNE=SECONDS: `mhla tune --export` for that long (stages
#                      GPU_CHECK_TUNE_STAGES, default tiled,tiled-backward,tiled-causal,decode,mixing,backward), stored in
#                      this run's scratch database, then the bench's table with it
#   bench-tuned.json   that bench: GPU_CHECK_TUNED_OPS (default mhla,linear,mhla-bwd,mhla-causal,decode) at
#                      GPU_CHECK_N (and GPU_CHECK_CHUNK, GPU_CHECK_DECODE)
#   bench-kernelgate.json  the new build's mhla, mhla-causal and decode rows at GPU_CHECK_GATE_N (default
#                      1024,4096) with --gate kernel (every other bench call here: --gate event, as the
#                      baseline build's bench times), and --compare of them against bench-new.json:
#                      how much of the small rows' time was the runtime starting a gated run
#   bench-nomarks.json the kernel-gated mhla and mhla-causal rows again with --no-stage-marks (the
#                      library's markers between a forward's stages off), and --compare of them
#                      against bench-kernelgate.json: what the markers cost a forward
#   bench-untiledbwd.json  step untiledbwd: the new build's backward rows (GPU_CHECK_UNTILED_OPS,
#                      default mhla-bwd,linear-bwd,mhla-gqa-bwd) with MHLA_TUNING=bt_tq=0,dm_t=0, the
#                      untiled read-outs (backward_readout.cl) and dMc products (bwd_dmixing_part) the
#                      tiled backward replaced, and --compare of
#                      them against the same rows of bench-new.json (bench.txt)
#   bench-untiledcausal.json  step untiledcausal: the new build's causal rows
#                      (GPU_CHECK_UNTILED_CAUSAL_OPS, default mhla-causal,mhla-causal-bwd,decode, at
#                      GPU_CHECK_N and GPU_CHECK_DECODE) with
#                      MHLA_TUNING=ct_sq=0,cp_ti=0,cs_tk=0,bc_sq=0,dm_t=0,dec_dp=1: the untiled chunk summaries
#                      (causal_summary.cl), read-out (causal_output.cl) and prefix (causal_prefix.cl
#                      plus CLBlast's GEMM blocks) that the tiled kernels replaced, the backward's
#                      read-outs of backward_causal_readout.cl and its dMc products of bwd_dmixing_part,
#                      the decoder's step walking Dk per
#                      work-item and its chunk start in causal_prefix_one (not in parts), and --compare
#                      of them against the same rows of bench-new.json (bench.txt)
#   bench-fusedcausal.json  step fusedcausal: the new build's causal backward rows (mhla-causal-bwd at
#                      GPU_CHECK_N and GPU_CHECK_CHUNK) with MHLA_TUNING=bct_fuse=1: the tiled dq, dk
#                      and dv in one launch (bc_dqkv_tiled, their widths at run time) where the GPU
#                      rows launch three, and --compare of them against bench-new.json (bench.txt)
#   bench-nextdecode.json  step nextdecode: the new build's decode rows (decode, decode-gqa at
#                      GPU_CHECK_DECODE and GPU_CHECK_CHUNK) with MHLA_TUNING=dec_next=1: every step
#                      sums its share of the next chunk's prefix, so a chunk start is one launch like
#                      any step (no decoder_prefix), and --compare of them against bench-new.json
#                      (bench.txt): whether the steps' extra traffic costs more than the chunk start
#   bench-onelaunch.json  step onelaunch: the new build's short forwards (mhla, linear, mhla-gqa at
#                      GPU_CHECK_ONE_N, default 1024,2048) with MHLA_TUNING=tl_one=16384: each one
#                      launch (forward_one.cl: every query block's groups mix their summary from all
#                      the keys themselves) where the tiled stages are two or three, and --compare of
#                      them against bench-new.json (bench.txt): whether the launches saved are worth
#                      M times the summary's multiply-adds
#   bench-official.json, bench-official-untiled.json  step official: the mhla and mhla-bwd rows at
#                      GPU_CHECK_N with the official normalizer (--normalizer official), as the GPU rows
#                      run it now (the tiled forward, the dots mixed in the read-out) and with
#                      MHLA_TUNING=tiled=0 (the untiled forward with CLBlast's GEMMs it took before),
#                      and --compare of the two (bench.txt)
#   bench-fuse-off.json, bench-fuse-on.json  step fuse: the B = 8 mhla and mhla-bwd rows at
#                      GPU_CHECK_B8_N (M = 16 at 4096, whole blocks) with MHLA_TUNING=tl_fuse=0,bt_fuse=0
#                      (the mixing in launches of its own) and tl_fuse=16,bt_fuse=16,fuse_mb=65536 (every read-out mixing
#                      its block's matrix itself, M reads of each piece), and --compare of the two
#                      (bench.txt): whether the launches saved are worth the re-reads at this size;
#                      bench-fuse-off-small.json, bench-fuse-on-small.json: the same at B = 1, N = 1024
#                      (tl_fuse=64: the blocks' segments too), the small end where fuse_mb draws the line
#
# The steps run in the order bench, untiledbwd, untiledcausal, fusedcausal, nextdecode, onelaunch, fuse, official,
# selftest, tune, suite: the most wanted output first (tune's search is bounded by its budget, the suite by the
# deadline), each under `timeout` so that one hang cannot take the machine's whole time; a failed step does not stop the others, and the exit
# status is 1 when any step failed or was left out for want of time (2: gpu-carry missing).
# The new build's bench runs with --kernels: after each row's timed runs one more records every
# kernel's device time (mhla_context_profile_kernels), printed per row in bench.txt and kept in
# each JSON row's "kernels", the backward's and the causal form's kernels included.
#
# Environment (defaults for an H100/H200 in about 7 minutes):
#   MHLA_DEVICE           the device (default NVIDIA)
#   GPU_CHECK_STEPS       the steps to run, of bench,untiledbwd,untiledcausal,fusedcausal,nextdecode,
#                         onelaunch,fuse,official,selftest,suite,tune (default all eleven; info always runs)
#   GPU_CHECK_DEADLINE    seconds for the whole script (default 450); a step gets what is left,
#                         at most its own limit, and none starts with under 20 s left
#   GPU_CHECK_N           the bench's --n (default 1024,4096,16384)
#   GPU_CHECK_TARGET_MS   the bench's --target-ms (default 60)
#   GPU_CHECK_OPS         the bench's --ops (default mhla,linear,softmax,mhla-causal,mhla-bwd,
#                         linear-bwd,mhla-causal-bwd,decode,mhla-gqa,mhla-cross,mhla-gqa-bwd,decode-gqa)
#   GPU_CHECK_CHUNK       the bench's --chunk (default 64,128)
#   GPU_CHECK_DECODE      the bench's --decode-context (default 8192)
#   GPU_CHECK_B8_N        N of the B = 8 mhla row (default 4096; 'none': no such row)
#   GPU_CHECK_ONE_N       the onelaunch step's --n (default 1024,2048)
#   GPU_CHECK_TEST_TIMEOUT  device_suite.py's limit per test in seconds (default 120)
#   GPU_CHECK_ONLY        device_suite.py --only NAME,NAME (default: every test)
#   GPU_CHECK_TUNE        seconds of `mhla tune` (default 0: no tune step)
#   OUT                   the output folder (default gpu-out)
set -u

cd "$(dirname "$0")/.." || exit 2
root=$PWD
carry=$root/gpu-carry
if [ ! -x "$carry/build/cli/mhla" ] || [ ! -f "$carry/tests.json" ]; then
    echo "gpu_check: no gpu-carry/build here: run scripts/gpu_prepare.sh first and carry gpu-carry" >&2
    exit 2
fi

out=${OUT:-gpu-out}
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
# Only this run's results: a file left from an earlier run would read as this one's.
(cd "$out" && rm -f info.txt bench-new.json bench-base.json bench.txt selftest.txt suite.txt \
    tune.txt bench-tuned.json bench-kernelgate.json bench-nomarks.json bench-untiledcausal.json bench-untiledbwd.json \
    bench-fusedcausal.json bench-nextdecode.json bench-onelaunch.json bench-fuse-off.json bench-fuse-on.json bench-fuse-off-small.json \
    bench-fuse-on-small.json bench-official.json \
    bench-official-untiled.json bench-json.tar.gz)
device=${MHLA_DEVICE:-NVIDIA}
export MHLA_DEVICE=$device
steps=",${GPU_CHECK_STEPS:-bench,untiledbwd,untiledcausal,fusedcausal,nextdecode,onelaunch,fuse,official,selftest,suite,tune},"
deadline=$(( $(date +%s) + ${GPU_CHECK_DEADLINE:-450} ))
bench_n=${GPU_CHECK_N:-1024,4096,16384}
target_ms=${GPU_CHECK_TARGET_MS:-60}
ops=${GPU_CHECK_OPS:-mhla,linear,softmax,mhla-causal,mhla-bwd,linear-bwd,mhla-causal-bwd,decode,mhla-gqa,mhla-cross,mhla-gqa-bwd,decode-gqa}
chunk=${GPU_CHECK_CHUNK:-64,128}
decode=${GPU_CHECK_DECODE:-8192}
b8_n=${GPU_CHECK_B8_N:-4096}
test_timeout=${GPU_CHECK_TEST_TIMEOUT:-120}
tune_s=${GPU_CHECK_TUNE:-0}

# Scratch outside the tree: the library's caches (program binaries, tuning database) start empty,
# so that nothing stored by an earlier run, or by `mhla tune`, changes what is measured.
tmp=$(mktemp -d /tmp/gpu-check.XXXXXX)
export MHLA_CACHE_DIR=$tmp/cache

# The carried loader, CLBlast and cmocka come first: the machine may have none of them. The
# programs find libmhla.so through their rpath ($ORIGIN/../host); its folder stays out of
# LD_LIBRARY_PATH on purpose, since that is searched before the rpath and would give the baseline's
# programs the new library.
export LD_LIBRARY_PATH=$carry/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# NVIDIA's driver may be installed without its ICD file (/etc/OpenCL/vendors/nvidia.icd): the
# carried folder names its library. Only where that library is there and the device asked for is
# NVIDIA's, so that elsewhere (PoCL standing in for a GPU) the system's ICD files still count.
if [ -z "${OCL_ICD_VENDORS:-}" ] && { [ "$device" = NVIDIA ] || echo "$device" | grep -qi nvidia; } &&
   { [ -e /usr/lib/x86_64-linux-gnu/libnvidia-opencl.so.1 ] ||
     { ldconfig -p || /sbin/ldconfig -p; } 2>/dev/null | grep -q libnvidia-opencl.so.1; }; then
    export OCL_ICD_VENDORS=$carry/icd
fi

new=$carry/build
base=$carry/base
[ -x "$base/bench/mhla-bench" ] || base=""

summary=$tmp/summary.txt
failed=0

# step NAME LIMIT_S LOG CMD...: runs CMD under timeout (LIMIT_S, or what is left of the deadline
# when less), its output appended to LOG, and records its verdict and wall time.
step() {
    local name=$1 limit=$2 log=$3 left rc t0 t1 verdict
    shift 3
    left=$(( deadline - $(date +%s) ))
    if [ "$left" -lt 20 ]; then
        printf '%-14s SKIP  (%s s left of GPU_CHECK_DEADLINE)\n' "$name" "$left" | tee -a "$summary"
        failed=1
        return 1
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    echo "== $name (limit ${limit} s): $*" | tee -a "$log"
    t0=$(date +%s.%N)
    timeout -k 10 "$limit" "$@" >>"$log" 2>&1
    rc=$?
    t1=$(date +%s.%N)
    case $rc in
    0) verdict=OK ;;
    124|137) verdict="FAIL  (timed out after ${limit} s)" ;;
    *) verdict="FAIL  (exit status $rc)" ;;
    esac
    [ "$rc" -eq 0 ] || failed=1
    printf '%-14s %-40s %7.1f s\n' "$name" "$verdict" "$(awk "BEGIN { print $t1 - $t0 }")" | tee -a "$summary"
    # The reason, in the device tool's short view of stdout too.
    [ "$rc" -eq 0 ] || grep -v '^$' "$log" | tail -n 3 | cut -c1-200 | sed 's/^/    | /'
    echo >>"$log"
    return "$rc"
}

# cap LIMIT_S: LIMIT_S, or what is left of the deadline when less.
cap() {
    local left=$(( deadline - $(date +%s) ))
    [ "$1" -lt "$left" ] && left=$1
    echo "$left"
}

wants() { case $steps in *",$1,"*) return 0 ;; *) return 1 ;; esac; }

# variant NAME LIMIT_S TUNING BEFORE AFTER ARGS...: the new build's bench again with
# MHLA_TUNING=TUNING and ARGS (its rows, gate and options) into $out/bench-NAME.json, its table into
# bench.txt, then --compare BEFORE AFTER (one of them that file) where both were written.
variant() {
    local name=$1 lim before=$4 after=$5 tuning=$3
    lim=$(cap "$2")
    shift 5
    step "bench-$name" "$lim" "$out/bench.txt" env MHLA_TUNING="$tuning" "$new/bench/mhla-bench" \
        --device "$device" --image none --target-ms "$target_ms" --quiet --max-total-s $(( lim * 4 / 5 )) \
        "$@" --json "$out/bench-$name.json"
    if [ -f "$before" ] && [ -f "$after" ]; then
        step "$name-compare" 30 "$out/bench.txt" "$new/bench/mhla-bench" --compare "$before" "$after"
    fi
}

# ---- info ---------------------------------------------------------------------------------------
info=$out/info.txt
: >"$info"
{
    echo "gpu_check on $(uname -n), $(date -u +%Y-%m-%dT%H:%M:%SZ); MHLA_DEVICE=$device"
    echo "OCL_ICD_VENDORS=${OCL_ICD_VENDORS:-(unset)} LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
    echo "base build: ${base:-none}"
    echo
    cat "$carry/source.txt" 2>/dev/null
    echo
    command -v nvidia-smi >/dev/null && timeout 30 nvidia-smi -L
    echo
    echo "libraries of cli/mhla:"
    ldd "$new/cli/mhla" 2>&1 | sed 's/^/  /'
    echo
} >>"$info" 2>&1
step info 60 "$info" "$new/cli/mhla" info

# ---- bench --------------------------------------------------------------------------------------
if wants bench; then
    txt=$out/bench.txt
    : >"$txt"
    bench_args=(--device "$device" --n "$bench_n" --image none --chunk "$chunk" --decode-context "$decode"
                --target-ms "$target_ms" --ops "$ops" --quiet)
    b8_args=(--device "$device" --batch 8 --n "$b8_n" --image none --ops mhla --target-ms "$target_ms" --quiet)
    # mhla-bench writes its table and JSON at the end: --max-total-s has it estimate, not run, the
    # rows that would not fit before the step's timeout, so that a slow sweep still reports.
    lim=$(cap 180)
    # the new build's rows with each kernel's device time (--kernels: one more run a row)
    # --gate event: the baseline build's bench holds its runs behind a user event; the new build's
    # rows are timed the same way for the A/B, and again behind its kernel gate below.
    step bench-new "$lim" "$txt" "$new/bench/mhla-bench" "${bench_args[@]}" --gate event --kernels \
        --max-total-s $(( lim * 4 / 5 )) --json "$out/bench-new.json"
    if [ -n "$base" ]; then
        lim=$(cap 180)
        step bench-base "$lim" "$txt" "$base/bench/mhla-bench" "${bench_args[@]}" \
            --max-total-s $(( lim * 4 / 5 )) --json "$out/bench-base.json"
    fi
    # The small rows again behind the kernel gate (bench/gate.c): how much of their time was the
    # runtime starting a run held by a user event (gate_ms in the JSON, and the --compare ratio)
    lim=$(cap 60)
    step bench-kernelgate "$lim" "$txt" "$new/bench/mhla-bench" --device "$device" --n "${GPU_CHECK_GATE_N:-1024,4096}" \
        --image none --chunk 64 --decode-context "$decode" --target-ms "$target_ms" --ops mhla,mhla-causal,decode \
        --quiet --gate kernel --max-total-s $(( lim * 4 / 5 )) --json "$out/bench-kernelgate.json"
    [ -f "$out/bench-new.json" ] && [ -f "$out/bench-kernelgate.json" ] &&
        step kernelgate-compare 30 "$txt" "$new/bench/mhla-bench" --compare "$out/bench-new.json" \
            "$out/bench-kernelgate.json"
    # The same forward rows without the library's stage markers (mhla_context_profile_stages(ctx, 0)):
    # what the four markers of every forward cost, as a context without profiling runs it
    variant nomarks 45 "" "$out/bench-kernelgate.json" "$out/bench-nomarks.json" \
        --n "${GPU_CHECK_GATE_N:-1024,4096}" --chunk 64 --ops mhla,mhla-causal --gate kernel --no-stage-marks
    if [ "$b8_n" != none ]; then
        step bench-new-b8 60 "$txt" "$new/bench/mhla-bench" "${b8_args[@]}" --gate event --json "$tmp/b8-new.json"
        [ -n "$base" ] && step bench-base-b8 60 "$txt" "$base/bench/mhla-bench" "${b8_args[@]}" \
            --json "$tmp/b8-base.json"
        # The B = 8 rows join their build's file (its rows carry their batch).
        for which in new base; do
            [ -f "$tmp/b8-$which.json" ] && [ -f "$out/bench-$which.json" ] &&
                python3 - "$out/bench-$which.json" "$tmp/b8-$which.json" <<'EOF'
import json, sys
main, extra = sys.argv[1:]
with open(main) as f:
    a = json.load(f)
with open(extra) as f:
    b = json.load(f)
a["rows"] += b["rows"]
with open(main, "w") as f:
    json.dump(a, f, indent=1)
EOF
        done
    fi
    if [ -n "$base" ] && [ -f "$out/bench-new.json" ] && [ -f "$out/bench-base.json" ]; then
        step bench-compare 30 "$txt" "$new/bench/mhla-bench" --compare "$out/bench-base.json" "$out/bench-new.json"
        grep 'geometric mean' "$txt"
    fi
fi

# ---- untiledbwd: the backward rows with the untiled read-outs, in the same call ------------------
if wants untiledbwd; then
    variant untiledbwd 90 bt_tq=0,dm_t=0 "$out/bench-untiledbwd.json" "$out/bench-new.json" \
        --n "$bench_n" --ops "${GPU_CHECK_UNTILED_OPS:-mhla-bwd,linear-bwd,mhla-gqa-bwd}" --gate event
fi

# ---- untiledcausal: the causal rows (and decode) with the untiled kernels, in the same call -------
if wants untiledcausal; then
    variant untiledcausal 90 ct_sq=0,cp_ti=0,cs_tk=0,bc_sq=0,dm_t=0,dec_dp=1 "$out/bench-untiledcausal.json" \
        "$out/bench-new.json" --n "$bench_n" --chunk "$chunk" --decode-context "$decode" \
        --ops "${GPU_CHECK_UNTILED_CAUSAL_OPS:-mhla-causal,mhla-causal-bwd,decode}" --gate event
fi

# ---- fusedcausal: the causal backward's tiled read-outs in one launch, in the same call ---------
if wants fusedcausal; then
    variant fusedcausal 60 bct_fuse=1 "$out/bench-new.json" "$out/bench-fusedcausal.json" \
        --n "$bench_n" --chunk "$chunk" --ops mhla-causal-bwd --gate event --kernels
fi

# ---- nextdecode: the decode rows with the steps summing the next chunk's prefix, same call -----
if wants nextdecode; then
    variant nextdecode 45 dec_next=1 "$out/bench-new.json" "$out/bench-nextdecode.json" \
        --chunk "$chunk" --decode-context "$decode" --ops decode,decode-gqa --gate event --kernels
fi

# ---- onelaunch: the short forwards in one launch (tl_one), in the same call ----------------------
if wants onelaunch; then
    variant onelaunch 45 tl_one=16384 "$out/bench-new.json" "$out/bench-onelaunch.json" \
        --n "${GPU_CHECK_ONE_N:-1024,2048}" --ops mhla,linear,mhla-gqa --gate event --kernels
fi

# ---- fuse: the mixing inside the read-outs or in its own launches, B = 8, in the same call -------
# (fuse_mb 65536: fusing forced wherever the blocks allow it, past the GPU rows' 32 MiB of re-reads;
# the small rows at B = 1, N = 1024 re-read about 30 MiB where their blocks are whole: the other end
# of the same question, and what sets fuse_mb)
if wants fuse && [ "$b8_n" != none ]; then
    fuse_args=(--batch 8 --n "$b8_n" --ops mhla,mhla-bwd --gate event --kernels)
    variant fuse-off 40 tl_fuse=0,bt_fuse=0 "" "" "${fuse_args[@]}"
    variant fuse-on 40 tl_fuse=16,bt_fuse=16,fuse_mb=65536 "$out/bench-fuse-off.json" "$out/bench-fuse-on.json" \
        "${fuse_args[@]}"
    small_args=(--n 1024 --ops mhla,mhla-bwd --gate event --kernels)
    variant fuse-off-small 25 tl_fuse=0,bt_fuse=0 "" "" "${small_args[@]}"
    variant fuse-on-small 25 tl_fuse=64,bt_fuse=64,fuse_mb=65536 "$out/bench-fuse-off-small.json" \
        "$out/bench-fuse-on-small.json" "${small_args[@]}"
fi

# ---- official: the official normalizer's rows, tiled and untiled, in the same call -------------
if wants official; then
    official_args=(--n "$bench_n" --normalizer official --ops mhla,mhla-bwd --gate event)
    variant official 60 "" "" "" "${official_args[@]}"
    variant official-untiled 60 tiled=0 "$out/bench-official-untiled.json" "$out/bench-official.json" \
        "${official_args[@]}"
fi

# ---- selftest -----------------------------------------------------------------------------------
if wants selftest; then
    log=$out/selftest.txt
    : >"$log"
    step selftest 120 "$log" "$new/cli/mhla" selftest --device "$device"
    step selftest-gpu 120 "$log" "$new/cli/mhla" selftest --device "$device" --tuning row=gpu
    grep -E '^selftest: |^FAIL ' "$log" | head -n 20
fi

# ---- tune ---------------------------------------------------------------------------------------
if wants tune && [ "$tune_s" = 0 ]; then
    echo "tune: not run (GPU_CHECK_TUNE=SECONDS asks for it)"
elif wants tune; then
    log=$out/tune.txt
    : >"$log"
    # Stored in this run's scratch database (MHLA_CACHE_DIR, deleted at the end), then the forward
    # rows timed again with it: the tuned figures beside the built-in row's, on the same machine.
    step tune $(( tune_s + 90 )) "$log" "$new/cli/mhla" tune --device "$device" --budget "$tune_s" \
        --stages "${GPU_CHECK_TUNE_STAGES:-tiled,tiled-backward,tiled-causal,decode,mixing,backward}" --export
    grep -E '^tune: ' "$log" | tail -n 6
    lim=$(cap 120)
    step bench-tuned "$lim" "$log" "$new/bench/mhla-bench" --device "$device" --n "$bench_n" --image none \
        --target-ms "$target_ms" --chunk "$chunk" --decode-context "$decode" \
        --ops "${GPU_CHECK_TUNED_OPS:-mhla,linear,mhla-bwd,mhla-causal,decode}" --quiet --gate event \
        --max-total-s $(( lim * 4 / 5 )) --json "$out/bench-tuned.json"
fi

# ---- the device suite ---------------------------------------------------------------------------
if wants suite; then
    log=$out/suite.txt
    : >"$log"
    # The test list names the source tree where it was built: moved here (the build folder too;
    # device_suite.py then has nothing left to move).
    python3 - "$carry/tests.json" "$root" "$new" "$tmp/tests.json" <<'EOF'
import json, sys
src, root, build, out = sys.argv[1:]
with open(src) as f:
    meta = json.load(f)
old = meta["source"]
def move(x):
    if isinstance(x, str):
        return root + x[len(old):] if x == old or x.startswith(old + "/") else x
    if isinstance(x, list):
        return [move(v) for v in x]
    if isinstance(x, dict):
        return {k: move(v) for k, v in x.items()}
    return x
meta = move(meta)
meta["build"] = build
with open(out, "w") as f:
    json.dump(meta, f)
EOF
    only=()
    [ -n "${GPU_CHECK_ONLY:-}" ] && only=(--only "$GPU_CHECK_ONLY")
    step suite 600 "$log" python3 scripts/device_suite.py --build "$new" --tests "$tmp/tests.json" \
        --device "$device" --log-dir "$tmp/suite-logs" --timeout "$test_timeout" "${only[@]}"
    grep -E '^(FAIL|SKIP) |^device ' "$log"
    # The failed tests' logs join suite.txt (their last 80 lines): the device tool brings back 8
    # files at most, and tune's bench needs one.
    for name in $(awk '$1 == "FAIL" { print $NF }' "$log"); do
        [ -f "$tmp/suite-logs/$name.log" ] || continue
        { echo; echo "==== $name.log (last 80 lines)"; tail -n 80 "$tmp/suite-logs/$name.log"; } >>"$log"
    done
fi

# ---- the GPU speed targets: scripts/gpu_targets.py over the files this run wrote --------------
# (after every step and outside the deadline: it reads files and takes no device time). The verdict
# of each target is the last file's that has the row: tuned, else onelaunch, nextdecode, new, base.
if [ -f "$out/bench-new.json" ]; then
    targets=()
    for pair in base:bench-base new:bench-new nextdecode:bench-nextdecode onelaunch:bench-onelaunch \
        tuned:bench-tuned; do
        [ -f "$out/${pair#*:}.json" ] && targets+=("${pair%%:*}=$out/${pair#*:}.json")
    done
    { echo "== targets: scripts/gpu_targets.py ${targets[*]}"; python3 scripts/gpu_targets.py "${targets[@]}"; } \
        >"$tmp/targets.txt" 2>&1 || failed=1
    cat "$tmp/targets.txt" >>"$out/bench.txt"
    cat "$tmp/targets.txt"
fi

{
    echo
    echo "steps:"
    cat "$summary"
} >>"$info"
# The JSON files in one archive: with the five text files, 6 of the device tool's 8.
if ls "$out"/*.json >/dev/null 2>&1; then
    # (python3's tarfile where the machine has no tar)
    (cd "$out" && { if command -v tar >/dev/null; then tar -czf bench-json.tar.gz ./*.json;
                    else python3 -m tarfile -c bench-json.tar.gz ./*.json; fi; } && rm -f ./*.json) ||
        { echo "gpu_check: could not pack the JSON files into bench-json.tar.gz" >&2; failed=1; }
fi
echo "== gpu_check: $(grep -c ' OK ' "$summary") ok, $(grep -vc ' OK ' "$summary") not; files in $out:"
find "$out" -maxdepth 1 -type f -printf '  %f  %s bytes\n' | sort
rm -rf "$tmp"
exit "$failed"
