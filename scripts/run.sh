#!/usr/bin/env bash
# The main job: installs what is missing, builds, then runs `mhla-bench --quick` on the default
# device (MHLA_DEVICE picks another): the device's peak, then MHLA against linear and softmax
# attention at N = 1024, 4096, 16384 and a 64x64 image, causal prefill (mhla-causal) at the same N
# and per-token decoding after 1024, 8192 and 32768 tokens of context, both at the library's chunk
# C = 64 (--chunk 128 times another chunk). Extra arguments go to mhla-bench (e.g. --json out.json
# --plot out.svg).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
exec "$MHLA_BUILD_DIR/bench/mhla-bench" --quick "$@"
