// The real `ServerConnection`: vscode-languageclient over stdio.

import * as vscode from 'vscode';
import {
  DidChangeConfigurationNotification,
  ExecuteCommandRequest,
  LanguageClient,
  type LanguageClientOptions,
  ResponseError,
  type ServerOptions,
  State,
} from 'vscode-languageclient/node';

import type { ConnectionFactory } from './connection';
import { answerConfigurationItems, SECTION, serverSettings, type ServerSettings } from './settings';
import { parseJobStatus } from './statusModel';

/** Client id: also makes `kernelblaster.trace.server` the trace setting. */
const CLIENT_ID = 'kernelblaster';
const PYTHON = 'python';

/** CUDA sources, and Python files for the one thing the server does with them: the code action
 * "Write a CUDA kernel for this module" on a KernelBench-style reference. vscode-languageclient
 * has one selector for every feature, so Python files are synced (the server diagnoses none)
 * and their hovers are dropped in the middleware. */
export const DOCUMENT_SELECTOR = [
  { scheme: 'file', language: 'cuda-cpp' },
  { scheme: 'file', language: PYTHON },
];

export function languageClientConnection(output: vscode.OutputChannel): ConnectionFactory {
  return (launch, initializationOptions, events) => {
    const folder = vscode.workspace.workspaceFolders?.[0];
    const executable = {
      command: launch.command,
      args: [...launch.args],
      // The server finds kernelblaster.toml from its working directory.
      options: folder === undefined ? {} : { cwd: folder.uri.fsPath },
    };
    const serverOptions: ServerOptions = { run: executable, debug: executable };
    const readSettings = (scopeUri: string | undefined): ServerSettings =>
      serverSettings(
        vscode.workspace.getConfiguration(SECTION, scopeUri === undefined ? undefined : vscode.Uri.parse(scopeUri)),
      ).settings;
    const clientOptions: LanguageClientOptions = {
      documentSelector: DOCUMENT_SELECTOR,
      initializationOptions,
      outputChannel: output,
      // Sends workspace/didChangeConfiguration on every change of the section; the server then
      // reads it with workspace/configuration (answered by the middleware below).
      synchronize: { configurationSection: SECTION },
      middleware: {
        // The server hovers kernels only: a Python file's hovers never reach it.
        provideHover: (document, position, token, next) =>
          document.languageId === PYTHON ? undefined : next(document, position, token),
        workspace: {
          // Only the server's keys, and only those the user set (see settings.ts): the default
          // answer would be the whole section with client-only keys and editor defaults.
          configuration: async (params, token, next) => {
            const answers = await next(params, token);
            return answers instanceof ResponseError
              ? answers
              : answerConfigurationItems(params.items, answers, readSettings);
          },
          didChangeConfiguration: async () => {
            await client.sendNotification(DidChangeConfigurationNotification.type, {
              settings: { [SECTION]: readSettings(undefined) },
            });
          },
        },
      },
    };
    const client = new LanguageClient(CLIENT_ID, 'KernelBlaster', serverOptions, clientOptions);
    client.onNotification('kernelblaster/jobStatus', (params: unknown) => {
      const status = parseJobStatus(params);
      if (status === undefined) {
        output.appendLine(`Ignored a malformed kernelblaster/jobStatus: ${JSON.stringify(params)}`);
      } else {
        events.onJobStatus(status);
      }
    });
    client.onDidChangeState(({ newState }) => {
      events.onServerPhase(
        newState === State.Running ? 'running' : newState === State.Starting ? 'starting' : 'stopped',
      );
    });
    return {
      start: () => client.start(),
      dispose: () => client.dispose(),
      executeCommand: (command, args) =>
        client.sendRequest(ExecuteCommandRequest.type, { command, arguments: [...args] }),
      grantTrust: () => client.sendNotification('kernelblaster/trustGranted', {}),
    };
  };
}
