#!/usr/bin/env bash
# Builds the VS Code extension (about 15 s with a warm npm cache): installs
# the locked dependencies (package-lock.json), type-checks src/extension.ts
# and bundles it with esbuild, vscode-languageclient included, into
# dist/extension.js. Pass --package to also produce mcpolicy-0.1.0.vsix with
# the pinned @vscode/vsce (test/vsix.sh packages it and tests the VSIX).
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund
npm run typecheck
npm run bundle
if [[ "${1:-}" == "--package" ]]; then
  npx vsce package --no-dependencies
fi
