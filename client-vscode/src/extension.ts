// Entry point: wires the real language client and process probes into `activateWith`.

import type * as vscode from 'vscode';

import { type Activated, activateWith } from './activation';
import { languageClientConnection } from './languageClient';
import { checkPython, findExecutable } from './probes';

let activated: Activated | undefined;

export function activate(context: vscode.ExtensionContext): void {
  activated = activateWith(context, {
    connect: languageClientConnection,
    findExecutable: (name) => findExecutable(name),
    checkPython: (python) => checkPython(python),
  });
}

/** VS Code waits for this promise, so the server gets its shutdown/exit before the host ends. */
export function deactivate(): Promise<void> | undefined {
  return activated?.session.stop();
}
