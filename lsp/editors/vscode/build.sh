#!/usr/bin/env bash
# Builds the VS Code extension (about 15 s with a warm npm cache): installs
# the locked dependencies and compiles src/extension.ts to out/extension.js.
# Pass --package to also produce mcpolicy-0.1.0.vsix with @vscode/vsce.
set -euo pipefail
cd "$(dirname "$0")"
npm ci --no-audit --no-fund
npm run compile
if [[ "${1:-}" == "--package" ]]; then
  npx --yes @vscode/vsce package --no-dependencies
fi
