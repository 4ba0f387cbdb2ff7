// Loads an unpacked VSIX's entry point under plain node, the way VS Code's
// extension host would, with a stub `vscode` module (the one module the
// host provides), and proves that every module the entry point requires
// resolves from inside the unpacked extension. Exit 0 and a list of what was
// required on success; exit 1 with the module that failed otherwise.
//
//   node load-entry.js <unpacked>/extension
"use strict";

const Module = require("module");
const path = require("path");

const root = path.resolve(process.argv[2] || ".");
const manifest = require(path.join(root, "package.json"));
const entry = path.resolve(root, manifest.main);

// Anything read off the stub is another stub: a callable, constructible
// proxy, so that `class X extends vscode.CompletionItem`, `new
// vscode.Disposable(...)` and `vscode.workspace.getConfiguration()` all
// work at load time without listing VS Code's API here.
function stub(name) {
  const target = function () {};
  return new Proxy(target, {
    get(_, prop) {
      if (prop === "prototype") return target.prototype;
      if (prop === Symbol.toPrimitive) return () => name;
      if (prop === "then") return undefined; // not a promise
      return stub(`${name}.${String(prop)}`);
    },
    apply() {
      return stub(`${name}()`);
    },
    construct() {
      return stub(`new ${name}`);
    },
  });
}
const vscode = stub("vscode");

const required = [];
const load = Module._load;
Module._load = function (request, parent, isMain) {
  if (request === "vscode") {
    required.push("vscode (provided by the editor)");
    return vscode;
  }
  if (!Module.isBuiltin(request) && !request.startsWith(".") && !path.isAbsolute(request)) {
    // A package: it must resolve inside the extension, never from a
    // node_modules above it or on NODE_PATH.
    const resolved = Module._resolveFilename(request, parent, isMain);
    if (!resolved.startsWith(root + path.sep)) {
      throw new Error(`${request} resolved outside the extension: ${resolved}`);
    }
  }
  if (!path.isAbsolute(request)) required.push(request);
  return load.apply(this, arguments);
};

let exported;
try {
  exported = require(entry);
} catch (e) {
  console.error(`loading ${path.relative(root, entry)} failed: ${e.message}`);
  process.exit(1);
}
for (const name of ["activate", "deactivate"]) {
  if (typeof exported[name] !== "function") {
    console.error(`${path.relative(root, entry)} exports no ${name}()`);
    process.exit(1);
  }
}
const unique = [...new Set(required)].sort();
console.log(`${path.relative(root, entry)} loaded; it requires: ${unique.join(", ")}`);
