// Starts mcpolicy-lsp for .mcpolicy files. Everything the editor shows
// (diagnostics, hover, completion, formatting, quick fixes, inlay hints,
// semantic tokens) comes from the server; this file only launches it.

import { ExtensionContext, workspace } from "vscode";
import {
  Executable,
  LanguageClient,
  LanguageClientOptions,
  ServerOptions,
} from "vscode-languageclient/node";

let client: LanguageClient | undefined;

export async function activate(context: ExtensionContext): Promise<void> {
  const command = workspace
    .getConfiguration("mcpolicy")
    .get<string>("server.path", "mcpolicy-lsp");
  const executable: Executable = { command, args: [] };
  const serverOptions: ServerOptions = { run: executable, debug: executable };
  const clientOptions: LanguageClientOptions = {
    documentSelector: [{ scheme: "file", language: "mcpolicy" }, { scheme: "untitled", language: "mcpolicy" }],
  };
  client = new LanguageClient("mcpolicy", "mcpolicy", serverOptions, clientOptions);
  context.subscriptions.push(client);
  await client.start();
}

export async function deactivate(): Promise<void> {
  await client?.stop();
}
