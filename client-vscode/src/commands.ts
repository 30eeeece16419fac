// The extension's commands. Long-running ones return when the server's job ends; their progress
// and cancel button come from the server's work-done progress, which vscode-languageclient shows.

import * as vscode from 'vscode';

import type { ServerConnection } from './connection';
import { parseKnowledgeBase } from './kbModel';
import { type KnowledgeBaseView, SHOW_KNOWLEDGE_BASE_COMMAND } from './knowledgeBaseView';
import { type NsightComputeDeps, openReport } from './nsightCompute';
import { parseKernelProfile, parseNcuReport } from './profileModel';
import { type KernelTarget, OPEN_IN_NSIGHT_COMPUTE_COMMAND, type ProfileViews, SHOW_PROFILE_COMMAND } from './profileView';
import type { ServerSession } from './session';
import { SHOW_OUTPUT_COMMAND } from './statusBar';

export const COMMANDS = {
  optimizeAtCursor: 'kernelblaster.optimizeAtCursor',
  writeKernel: 'kernelblaster.writeKernel',
  profileFile: 'kernelblaster.profileFile',
  showKnowledgeBase: SHOW_KNOWLEDGE_BASE_COMMAND,
  showProfile: SHOW_PROFILE_COMMAND,
  openInNsightCompute: OPEN_IN_NSIGHT_COMPUTE_COMMAND,
  restartServer: 'kernelblaster.restartServer',
  showOutput: SHOW_OUTPUT_COMMAND,
} as const;

/** LSP error codes for a request the client or the server cancelled: not a failure to report. */
const CANCELLED_CODES = new Set([-32800, -32802]);

export interface Views {
  readonly knowledgeBase: KnowledgeBaseView;
  readonly profiles: ProfileViews;
  readonly nsightCompute: NsightComputeDeps;
}

export function registerCommands(session: ServerSession, views: Views, output: vscode.OutputChannel): vscode.Disposable[] {
  const { knowledgeBase } = views;
  const run =
    <A extends unknown[]>(name: string, body: (...args: A) => Promise<void>) =>
    async (...args: A): Promise<void> => {
      try {
        await body(...args);
      } catch (error) {
        reportFailure(name, error, output);
      }
    };
  return [
    vscode.commands.registerCommand(COMMANDS.optimizeAtCursor, run('Optimize', () => optimizeAtCursor(session, output))),
    vscode.commands.registerCommand(COMMANDS.profileFile, run('Profile', () => profileFile(session))),
    vscode.commands.registerCommand(COMMANDS.writeKernel, run('Write kernel', () => writeKernel(session, output))),
    vscode.commands.registerCommand(
      COMMANDS.showKnowledgeBase,
      run('Knowledge base', () => showKnowledgeBase(session, knowledgeBase)),
    ),
    vscode.commands.registerCommand(
      COMMANDS.showProfile,
      run('Show profile', (target?: unknown) => showProfile(session, views.profiles, target)),
    ),
    vscode.commands.registerCommand(
      COMMANDS.openInNsightCompute,
      run('Open in Nsight Compute', (target?: unknown) => openInNsightCompute(session, views.nsightCompute, output, target)),
    ),
    vscode.commands.registerCommand(COMMANDS.restartServer, () => session.restart()),
    vscode.commands.registerCommand(COMMANDS.showOutput, () => {
      output.show();
    }),
  ];
}

async function optimizeAtCursor(session: ServerSession, output: vscode.OutputChannel): Promise<void> {
  const ready = await withServer(session, await cudaEditorReadyToRun('optimize'));
  if (ready === undefined) {
    return;
  }
  const { editor, connection } = ready;
  const { document } = editor;
  const uri = document.uri.toString();
  const kernel = await kernelAtCursor(connection, document, editor.selection.active, 'optimize');
  if (kernel === undefined || !(await saved(document))) {
    return;
  }
  const answer = await connection.executeCommand('kernelblaster.optimize', [
    { uri, kernel, technique: null, version: document.version },
  ]);
  const result = parseOptimizeResult(answer);
  if (!result.applied) {
    // The server has already shown why (window/showMessage): saying it again would show it twice.
    output.appendLine(`Optimize ${kernel}: ${result.message}`);
    return;
  }
  // An edit whose memory safety was not checked (or that passed faster candidates over) is
  // offered as a warning, not as plain good news; the server has said why already.
  const offer = result.warning ? vscode.window.showWarningMessage : vscode.window.showInformationMessage;
  const show = await offer(`KernelBlaster: ${result.message}`, 'Show Diff');
  if (show === 'Show Diff') {
    await connection.executeCommand('kernelblaster.showDiff', [{ uri, kernel }]);
  }
}

/** The kernel the server's parser says the cursor means; above several, the user picks one. */
async function kernelAtCursor(
  connection: ServerConnection,
  document: vscode.TextDocument,
  cursor: vscode.Position,
  action: string,
): Promise<string | undefined> {
  const position = { line: cursor.line, character: cursor.character };
  const answer = parseKernelAt(
    await connection.executeCommand('kernelblaster.kernelAt', [{ uri: document.uri.toString(), position }]),
  );
  if (answer.kernel !== null) {
    return answer.kernel;
  }
  if (answer.kernels.length === 0) {
    void vscode.window.showWarningMessage(`No __global__ kernel definition found in ${fileName(document.uri)}.`);
    return undefined;
  }
  return vscode.window.showQuickPick([...answer.kernels], {
    placeHolder: `Which kernel should KernelBlaster ${action}?`,
  });
}

/** The server's `kernelblaster.init` on the active Python file: the LLM writes `<stem>.cu`, which
 * the server writes once verified and opens. An existing `.cu` is replaced only after the user
 * says so in a modal dialog (the code action offers the same as "Replace <stem>.cu ..."). */
async function writeKernel(session: ServerSession, output: vscode.OutputChannel): Promise<void> {
  const ready = await withServer(
    session,
    await editorReadyToRun(
      'python',
      'Open a PyTorch reference (a .py with class Model, get_inputs() and get_init_inputs()) to write a CUDA kernel for it.',
      'write a kernel',
    ),
  );
  if (ready === undefined) {
    return;
  }
  const { connection } = ready;
  const { document } = ready.editor;
  const reference = fileName(document.uri);
  const target = reference.replace(/\.py$/, '.cu');
  const replace = await exists(vscode.Uri.file(document.uri.fsPath.replace(/\.py$/, '.cu')));
  if (replace) {
    const choice = await vscode.window.showWarningMessage(
      `${target} exists. Replace it with a new CUDA kernel written for ${reference}? It is replaced only once the new kernel is verified.`,
      { modal: true },
      'Replace',
    );
    if (choice !== 'Replace') {
      return;
    }
  }
  if (!(await saved(document))) {
    return;
  }
  const answer = parseInitReply(
    await connection.executeCommand('kernelblaster.init', [{ uri: document.uri.toString(), replace }]),
  );
  // The server has shown the outcome (window/showMessage) and opened the new kernel.
  output.appendLine(`Write kernel for ${reference}: ${answer.message}`);
}

async function exists(uri: vscode.Uri): Promise<boolean> {
  try {
    await vscode.workspace.fs.stat(uri);
    return true;
  } catch {
    return false;
  }
}

async function profileFile(session: ServerSession): Promise<void> {
  const ready = await withServer(session, await cudaEditorReadyToRun('profile'));
  if (ready === undefined || !(await saved(ready.editor.document))) {
    return;
  }
  const { editor, connection } = ready;
  await connection.executeCommand('kernelblaster.profile', [
    { uri: editor.document.uri.toString(), depth: 'full' },
  ]);
}

async function showKnowledgeBase(session: ServerSession, view: KnowledgeBaseView): Promise<void> {
  const connection = await session.runningConnection();
  if (connection === undefined) {
    return;
  }
  view.show(parseKnowledgeBase(await connection.executeCommand('kernelblaster.knowledgeBase', [])));
}

/** The profile view of the lens's kernel, or of the kernel at the cursor. */
async function showProfile(session: ServerSession, views: ProfileViews, argument: unknown): Promise<void> {
  const found = await kernelTarget(session, argument, 'profile');
  if (found === undefined) {
    return;
  }
  const { connection, target } = found;
  views.show(parseKernelProfile(await connection.executeCommand('kernelblaster.kernelProfile', [target])));
}

async function openInNsightCompute(
  session: ServerSession,
  deps: NsightComputeDeps,
  output: vscode.OutputChannel,
  argument: unknown,
): Promise<void> {
  const found = await kernelTarget(session, argument, 'open in Nsight Compute');
  if (found === undefined) {
    return;
  }
  const { connection, target } = found;
  const report = parseNcuReport(await connection.executeCommand('kernelblaster.ncuReport', [target]));
  const outcome = await openReport(report, deps);
  output.appendLine(
    outcome.kind === 'opened' ? `Opened ${report.path ?? ''} with ${outcome.program}` : `Open in Nsight Compute: ${outcome.message}`,
  );
}

/** The kernel a lens names (`{uri, kernel}`), or the one at the cursor of the active CUDA editor;
 * with the running server's connection. */
async function kernelTarget(
  session: ServerSession,
  argument: unknown,
  action: string,
): Promise<{ connection: ServerConnection; target: KernelTarget } | undefined> {
  if (isRecord(argument) && typeof argument.uri === 'string' && typeof argument.kernel === 'string') {
    const connection = await session.runningConnection();
    return connection === undefined ? undefined : { connection, target: { uri: argument.uri, kernel: argument.kernel } };
  }
  const ready = await withServer(session, await cudaEditorReadyToRun(action));
  if (ready === undefined) {
    return undefined;
  }
  const { editor, connection } = ready;
  const kernel = await kernelAtCursor(connection, editor.document, editor.selection.active, action);
  return kernel === undefined ? undefined : { connection, target: { uri: editor.document.uri.toString(), kernel } };
}

/** `editor` and the running server's connection, or undefined when either is missing (the user
 * has been told why). */
async function withServer(
  session: ServerSession,
  editor: vscode.TextEditor | undefined,
): Promise<{ editor: vscode.TextEditor; connection: ServerConnection } | undefined> {
  if (editor === undefined) {
    return undefined;
  }
  const connection = await session.runningConnection();
  return connection === undefined ? undefined : { editor, connection };
}

/** The active CUDA editor, in a trusted workspace; otherwise undefined after saying why. */
function cudaEditorReadyToRun(action: string): Promise<vscode.TextEditor | undefined> {
  return editorReadyToRun('cuda-cpp', `Open a CUDA file (.cu) to ${action} it with KernelBlaster.`, action);
}

/** The active editor of `languageId`, in a trusted workspace; otherwise undefined after saying
 * why (`wrongEditor`, or how to leave Restricted Mode). */
async function editorReadyToRun(
  languageId: string,
  wrongEditor: string,
  action: string,
): Promise<vscode.TextEditor | undefined> {
  const editor = vscode.window.activeTextEditor;
  if (editor?.document.languageId !== languageId) {
    void vscode.window.showWarningMessage(wrongEditor);
    return undefined;
  }
  if (!vscode.workspace.isTrusted) {
    const choice = await vscode.window.showWarningMessage(
      `KernelBlaster can't ${action} in Restricted Mode: it builds and runs code only in a trusted workspace.`,
      'Manage Workspace Trust',
    );
    if (choice === 'Manage Workspace Trust') {
      await vscode.commands.executeCommand('workbench.trust.manage');
    }
    return undefined;
  }
  return editor;
}

/** The server works from the file on disk, so unsaved edits are saved first. */
async function saved(document: vscode.TextDocument): Promise<boolean> {
  if (!document.isDirty || (await document.save())) {
    return true;
  }
  void vscode.window.showWarningMessage(`KernelBlaster: couldn't save ${fileName(document.uri)}.`);
  return false;
}

/** `kernelblaster.optimize`'s answer: `warning` (absent when there is none) says the candidate
 * was not checked for memory errors or faster ones were passed over. */
export function parseOptimizeResult(answer: unknown): { applied: boolean; message: string; warning: string } {
  if (!isRecord(answer) || typeof answer.applied !== 'boolean' || typeof answer.message !== 'string') {
    throw new Error(`the server answered ${JSON.stringify(answer)} instead of {"applied", "message"}`);
  }
  const warning = typeof answer.warning === 'string' ? answer.warning : '';
  return { applied: answer.applied, message: answer.message, warning };
}

/** `kernelblaster.init`'s answer, as docs/protocol.md defines it. */
export function parseInitReply(answer: unknown): { written: boolean; message: string; path: string | null } {
  if (
    !isRecord(answer) ||
    typeof answer.written !== 'boolean' ||
    typeof answer.message !== 'string' ||
    !(answer.path === null || typeof answer.path === 'string')
  ) {
    throw new Error(`the server answered ${JSON.stringify(answer)} instead of {"written", "message", "path"}`);
  }
  return { written: answer.written, message: answer.message, path: answer.path };
}

/** `kernelblaster.kernelAt`'s answer, as docs/protocol.md defines it (the range is not used here). */
export function parseKernelAt(answer: unknown): { kernel: string | null; kernels: readonly string[] } {
  if (
    !isRecord(answer) ||
    !(answer.kernel === null || typeof answer.kernel === 'string') ||
    !Array.isArray(answer.kernels) ||
    !answer.kernels.every((name) => typeof name === 'string')
  ) {
    throw new Error(`the server answered ${JSON.stringify(answer)} instead of {"kernel", "range", "kernels"}`);
  }
  return { kernel: answer.kernel, kernels: answer.kernels };
}

function reportFailure(name: string, error: unknown, output: vscode.OutputChannel): void {
  const code = isRecord(error) ? error.code : undefined;
  const message = error instanceof Error ? error.message : String(error);
  output.appendLine(`${name}: ${message}`);
  if (typeof code === 'number' && CANCELLED_CODES.has(code)) {
    return;
  }
  void vscode.window.showErrorMessage(`KernelBlaster: ${name} failed: ${message}`);
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null;
}

function fileName(uri: vscode.Uri): string {
  return uri.path.slice(uri.path.lastIndexOf('/') + 1);
}
