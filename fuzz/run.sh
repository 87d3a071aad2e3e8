#!/usr/bin/env bash
# Runs every fuzz target for a bounded time (default 30 s each; FUZZ_SECONDS to change).
# Needs a nightly toolchain; installs cargo-fuzz if it is missing.
set -euo pipefail
cd "$(dirname "$0")"
seconds="${FUZZ_SECONDS:-30}"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
for target in session_key label entry_json transcript_line inbound_pipeline; do
    echo "== fuzz $target for ${seconds}s"
    cargo +nightly fuzz run "$target" -- -max_total_time="$seconds" -rss_limit_mb=2048
done
