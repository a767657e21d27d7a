#!/usr/bin/env bash
# CI: build the real helm (for tests/deploy) from the Go module proxy; skipped when already built.
exec bash "$(dirname "$0")/install-helm.sh"
