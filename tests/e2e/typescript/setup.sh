#!/bin/sh
# Installs the pinned TypeScript SDK and server-everything (package-lock.json)
# for cli/tests/proxy_typescript.rs. Needs node >= 20 and npm.
set -eu
cd "$(dirname "$0")"
npm ci --no-audit --no-fund
