#!/usr/bin/env bash
# Tests the VSIX itself, not the source tree: installs the pinned tools
# (package-lock.json), packages the extension with @vscode/vsce, unpacks the
# VSIX in a fresh directory with no node_modules above it, checks what it
# carries, and loads its entry point under node with a stub `vscode`
# module (test/load-entry.js), so a module the bundle needs but does not
# carry fails here as it would in the editor. A control run proves the
# loader does fail on such a module. Needs node >= 20, npm and python3.
set -euo pipefail
cd "$(dirname "$0")/.."

# The README promises node >= 20: a pinned tool that wants a newer node
# (npm's EBADENGINE warning) breaks that promise, so it fails here.
# package.json's `overrides` keeps @vscode/vsce's @azure/identity on a
# release for node 20.
npm ci --no-audit --no-fund 2>&1 | tee npm-ci.log
if grep -q EBADENGINE npm-ci.log; then
  echo "a pinned package needs a newer node than the documented >= 20 (node $(node --version)):" >&2
  grep -A3 EBADENGINE npm-ci.log >&2
  rm -f npm-ci.log
  exit 1
fi
rm -f npm-ci.log
npm run typecheck
rm -f mcpolicy-*.vsix
# No `repository`: the project has no public home yet, and a placeholder
# URL would be published as if it were one (the readme links no relative path).
npx vsce package --no-dependencies --allow-missing-repository
vsix=$(ls mcpolicy-*.vsix)

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 -c 'import sys, zipfile; zipfile.ZipFile(sys.argv[1]).extractall(sys.argv[2])' "$vsix" "$work"
ext="$work/extension"

echo "VSIX contents:"
(cd "$ext" && find . -type f | sort | sed 's/^/  /')
for f in package.json dist/extension.js LICENSE.txt icon.png readme.md \
  syntaxes/mcpolicy.tmLanguage.json language-configuration.json; do
  [[ -f "$ext/$f" ]] || { echo "the VSIX lacks $f" >&2; exit 1; }
done
for f in src tsconfig.json node_modules test; do
  [[ ! -e "$ext/$f" ]] || { echo "the VSIX carries $f, which .vscodeignore leaves out" >&2; exit 1; }
done

NODE_PATH= node test/load-entry.js "$ext"

# Control: an entry point requiring a package the VSIX does not carry (the
# unbundled build of old) must fail to load.
mkdir -p "$work/control/out"
cat >"$work/control/package.json" <<'JSON'
{ "name": "control", "main": "./out/extension.js" }
JSON
echo 'require("vscode"); require("vscode-languageclient/node"); exports.activate = exports.deactivate = () => {};' \
  >"$work/control/out/extension.js"
if NODE_PATH= node test/load-entry.js "$work/control" 2>"$work/control.err"; then
  echo "the loader accepted an entry point whose dependency is missing" >&2
  exit 1
fi
grep -q "vscode-languageclient/node" "$work/control.err"
echo "control: $(cat "$work/control.err")"
echo "VSIX ok: $vsix ($(wc -c <"$vsix") bytes)"
