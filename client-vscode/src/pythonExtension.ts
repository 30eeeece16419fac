// The active interpreter of the Python extension (ms-python.python), through its environments API.

import * as vscode from 'vscode';

interface EnvironmentPath {
  readonly id: string;
  readonly path: string;
}

/** The part of the Python extension's exported API used here. */
export interface PythonExtensionApi {
  readonly environments?: {
    getActiveEnvironmentPath(resource?: vscode.Uri): EnvironmentPath;
    resolveEnvironment(
      environment: EnvironmentPath,
    ): Promise<{ readonly executable: { readonly uri: vscode.Uri | undefined } } | undefined>;
  };
}

export const PYTHON_EXTENSION_ID = 'ms-python.python';

/** The interpreter path, or undefined when the extension isn't installed. Rejects, with the
 * reason, when the extension is there but can't say. */
export async function activePythonInterpreter(resource: vscode.Uri | undefined): Promise<string | undefined> {
  const extension = vscode.extensions.getExtension<PythonExtensionApi>(PYTHON_EXTENSION_ID);
  if (extension === undefined) {
    return undefined;
  }
  const api = extension.isActive ? extension.exports : await extension.activate();
  const environments = api.environments;
  if (environments === undefined) {
    throw new Error('this version of the Python extension has no environments API; update it');
  }
  const active = environments.getActiveEnvironmentPath(resource);
  const resolved = await environments.resolveEnvironment(active);
  const executable = resolved?.executable.uri?.fsPath;
  if (executable === undefined) {
    throw new Error(`the active environment ${active.path} has no Python executable`);
  }
  return executable;
}
