#!/bin/sh
# Rewrites the C++ blocks of docs/guide.md and README.md from the regions of the files they name (see
# tests/test_docs.cpp), after building test_docs in BUILD_DIR (default: build).
#
#   docs/update_snippets.sh [BUILD_DIR]
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-"$root/build"}
cmake --build "$build" --target test_docs
CKPT_UPDATE_SNIPPETS=1 "$build/tests/test_docs" --run_test=guide/every_block_is_its_marked_region --log_level=message
# Then check the result the way CI does.
"$build/tests/test_docs" --run_test=guide --log_level=warning
