#!/usr/bin/env bash
# Runs libFuzzer harnesses (tests/fuzz/fuzz_*.c, built in a -Dfuzz=true build folder: see
# tests/fuzz/meson.build) on their seed corpora, tests/fuzz/corpus/NAME, for a set time or number of
# inputs, and prints one line per harness: PASS or FAIL, executions, coverage (libFuzzer's cov:
# edges and ft: features) and corpus size. New inputs go to a work corpus (--keep DIR, else a
# temporary folder), never into the checked-in seeds; a crash leaves its input in the artifact
# folder (MHLA_FUZZ_ARTIFACTS, default ./fuzz-artifacts) and its report in the printed log tail.
#   tests/fuzz/run.sh [--seconds S | --runs N] [--seed N] [--keep DIR] HARNESS|BUILD_DIR...
# e.g. build-fuzz/tests/fuzz/fuzz_npy, or build-fuzz for every harness built there.
# The exit status is 1 when any harness failed, else 77 (skip) when one found no OpenCL device.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/../sanitize/options.sh"
limit=(-runs=10000) seed=1 keep=""
while [ $# -gt 0 ]; do
    case "$1" in
        --seconds) limit=(-max_total_time="$2"); shift 2 ;;
        --runs) limit=(-runs="$2"); shift 2 ;;
        --seed) seed=$2; shift 2 ;;
        --keep) keep=$2; shift 2 ;;
        -*) echo "run.sh: unknown option $1" >&2; exit 2 ;;
        *) break ;;
    esac
done
[ $# -gt 0 ] || { echo "usage: run.sh [--seconds S | --runs N] [--seed N] [--keep DIR] HARNESS|BUILD_DIR..." >&2; exit 2; }
artifacts=${MHLA_FUZZ_ARTIFACTS:-$PWD/fuzz-artifacts}
mkdir -p "$artifacts"
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
# A build folder stands for all its harnesses.
exes=()
for arg in "$@"; do
    if [ -d "$arg/tests/fuzz" ]; then
        mapfile -t found < <(find "$arg/tests/fuzz" -maxdepth 1 -type f -executable -name 'fuzz_*' | sort)
        exes+=("${found[@]}")
    else
        exes+=("$arg")
    fi
done
failed=0 skipped=0
for exe in "${exes[@]}"; do
    name=$(basename "$exe")
    name=${name#fuzz_}
    work=${keep:+$keep/$name}
    work=${work:-$scratch/$name}
    mkdir -p "$work"
    log=$scratch/$name.log
    start=$(date +%s)
    rc=0
    # -close_fd_mask=1: the harnesses' stdout (the CLI's --help text) is noise; reports go to stderr.
    "$exe" -seed="$seed" "${limit[@]}" -close_fd_mask=1 -print_final_stats=1 -timeout=60 \
        -artifact_prefix="$artifacts/$name-" "$work" "$here/corpus/$name" >"$log" 2>&1 || rc=$?
    secs=$(( $(date +%s) - start ))
    # The last status line ("#N DONE cov: C ft: F corp: K/..."), else the last one printed.
    stats=$(grep -E '^#[0-9]+' "$log" | tail -n 1 || true)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$stats")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$stats")
    corp=$(sed -n 's/.* corp: \([0-9]*\).*/\1/p' <<<"$stats")
    if [ "$rc" -eq 77 ]; then
        skipped=1
        echo "fuzz_$name: SKIP ($(tail -n 1 "$log"))"
    elif [ "$rc" -eq 0 ]; then
        echo "fuzz_$name: PASS ${execs:-?} executions in ${secs} s, cov ${cov:-?} ft ${ft:-?}, corpus ${corp:-?} (seed $seed)"
    else
        failed=1
        echo "fuzz_$name: FAIL (exit $rc) after ${execs:-?} executions in ${secs} s; artifacts in $artifacts; log tail:"
        tail -n 60 "$log"
    fi
done
# 77 (meson's SKIP) only when nothing failed and a harness had no device.
[ "$failed" = 0 ] && [ "$skipped" = 1 ] && exit 77
exit $failed
