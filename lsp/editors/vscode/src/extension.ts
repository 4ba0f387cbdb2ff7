// Starts mcpolicy-lsp for .mcpolicy files. Everything the editor shows
// (diagnostics, hover, completion, formatting, quick fixes, inlay hints,
// semantic tokens) comes from the server; this file only launches it and
// forwards the `mcpolicy.*` settings (lsp/README.md, "Settings").

import { ExtensionContext, workspace } from "vscode";
import {
  Executable,
  LanguageClient,
  LanguageClientOptions,
  ServerOptions,
} from "vscode-languageclient/node";

let client: LanguageClient | undefined;

export async function activate(context: ExtensionContext): Promise<void> {
  const configuration = workspace.getConfiguration("mcpolicy");
  const command = configuration.get<string>("server.path", "mcpolicy-lsp");
  const executable: Executable = { command, args: [] };
  const serverOptions: ServerOptions = { run: executable, debug: executable };
  const clientOptions: LanguageClientOptions = {
    documentSelector: [
      { scheme: "file", language: "mcpolicy" },
      { scheme: "untitled", language: "mcpolicy" },
    ],
    // The settings at start, then `workspace/didChangeConfiguration` with
    // the whole `mcpolicy` section whenever one of them changes.
    initializationOptions: {
      denyWarnings: configuration.get<boolean>("denyWarnings", false),
      protocol: configuration.get<string | null>("protocol", null),
      codeDocsUrl: configuration.get<string | null>("codeDocsUrl", null),
    },
    synchronize: { configurationSection: "mcpolicy" },
  };
  client = new LanguageClient("mcpolicy", "mcpolicy", serverOptions, clientOptions);
  context.subscriptions.push(client);
  await client.start();
}

export async function deactivate(): Promise<void> {
  await client?.stop();
}
