// "Show profile": one webview panel per kernel, rendered by profileViewHtml.ts from the server's
// `kernelblaster.kernelProfile` answer, reused (and revealed) on every show. Its links open the
// blamed lines of the kernel's own file; its button opens the kept report in Nsight Compute.

import { randomBytes } from 'node:crypto';

import * as vscode from 'vscode';

import type { KernelProfileData } from './profileModel';
import { parseProfileMessage, renderProfile } from './profileViewHtml';

export const SHOW_PROFILE_COMMAND = 'kernelblaster.showProfile';
export const OPEN_IN_NSIGHT_COMPUTE_COMMAND = 'kernelblaster.openInNsightCompute';
export const PROFILE_VIEW_TYPE = 'kernelblaster.profile';
/** The extension's command the server's code lens summary may use instead of its own
 * (`clientCommands` in the initialization options, docs/protocol.md). */
export const LENS_CLIENT_COMMANDS: readonly string[] = [SHOW_PROFILE_COMMAND];

/** What a lens or the command palette names: a kernel of an open file. */
export interface KernelTarget {
  readonly uri: string;
  readonly kernel: string;
}

export class ProfileViews implements vscode.Disposable {
  private readonly panels = new Map<string, vscode.WebviewPanel>();

  show(data: KernelProfileData): void {
    const key = `${data.uri}#${data.kernel}`;
    const panel = this.panels.get(key) ?? this.createPanel(key, { uri: data.uri, kernel: data.kernel });
    panel.webview.html = renderProfile(data, { cspSource: panel.webview.cspSource, nonce: randomBytes(16).toString('base64') });
    panel.reveal(undefined, false);
  }

  dispose(): void {
    for (const panel of this.panels.values()) {
      panel.dispose();
    }
  }

  private createPanel(key: string, target: KernelTarget): vscode.WebviewPanel {
    const panel = vscode.window.createWebviewPanel(PROFILE_VIEW_TYPE, `Profile: ${target.kernel}`, vscode.ViewColumn.Beside, {
      enableScripts: true,
      localResourceRoots: [], // the page is self-contained
    });
    panel.webview.onDidReceiveMessage((message: unknown) => {
      const parsed = parseProfileMessage(message);
      if (parsed === undefined) {
        return;
      }
      switch (parsed.type) {
        case 'refresh':
          void vscode.commands.executeCommand(SHOW_PROFILE_COMMAND, target);
          return;
        case 'openInNsightCompute':
          void vscode.commands.executeCommand(OPEN_IN_NSIGHT_COMPUTE_COMMAND, target);
          return;
        case 'openLine': {
          // Only the kernel's own file, which the extension named, never a path from the page.
          const position = new vscode.Position(parsed.line - 1, 0);
          void vscode.window.showTextDocument(vscode.Uri.parse(target.uri), {
            selection: new vscode.Range(position, position),
            viewColumn: vscode.ViewColumn.One,
          });
          return;
        }
      }
    });
    panel.onDidDispose(() => {
      this.panels.delete(key);
    });
    this.panels.set(key, panel);
    return panel;
  }
}
