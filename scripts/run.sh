#!/usr/bin/env bash
# The main job: installs what is missing, builds, then runs MHLA on a generated 2D input on the
# default device (MHLA_DEVICE picks another), checked against the C reference, with its time.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
exec "$MHLA_BUILD_DIR/examples/forward_2d" "$@"
