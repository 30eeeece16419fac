// "Show Knowledge Base": one webview panel, rendered by kbViewHtml.ts from the server's answer,
// reused (and revealed) on every show. Its links open kernels and candidate diffs in the editor.

import { randomBytes } from 'node:crypto';

import * as vscode from 'vscode';

import type { KnowledgeBaseData } from './kbModel';
import { parseViewMessage, renderKnowledgeBase, type ViewMessage } from './kbViewHtml';

export const SHOW_KNOWLEDGE_BASE_COMMAND = 'kernelblaster.showKnowledgeBase';
export const KNOWLEDGE_BASE_VIEW_TYPE = 'kernelblaster.knowledgeBase';
const TITLE = 'KernelBlaster Knowledge Base';

export class KnowledgeBaseView implements vscode.Disposable {
  private panel: vscode.WebviewPanel | undefined;

  show(data: KnowledgeBaseData): void {
    const panel = this.panel ?? this.createPanel();
    panel.webview.html = renderKnowledgeBase(data, {
      cspSource: panel.webview.cspSource,
      nonce: randomBytes(16).toString('base64'),
    });
    panel.reveal(undefined, false);
  }

  dispose(): void {
    this.panel?.dispose();
  }

  private createPanel(): vscode.WebviewPanel {
    const panel = vscode.window.createWebviewPanel(KNOWLEDGE_BASE_VIEW_TYPE, TITLE, vscode.ViewColumn.Active, {
      enableScripts: true,
      localResourceRoots: [], // the page is self-contained
    });
    panel.webview.onDidReceiveMessage((message: unknown) => {
      const parsed = parseViewMessage(message);
      if (parsed !== undefined) {
        void this.handle(parsed);
      }
    });
    panel.onDidDispose(() => {
      this.panel = undefined;
    });
    this.panel = panel;
    return panel;
  }

  private async handle(message: ViewMessage): Promise<void> {
    switch (message.type) {
      case 'refresh':
        // The command asks the server again, shows the answer here and reports failures.
        await vscode.commands.executeCommand(SHOW_KNOWLEDGE_BASE_COMMAND);
        return;
      case 'openKernel': {
        const uri = fileUri(message.uri);
        if (uri !== undefined) {
          const position = new vscode.Position(message.line, 0);
          await vscode.window.showTextDocument(uri, {
            selection: new vscode.Range(position, position),
            viewColumn: vscode.ViewColumn.One,
          });
        }
        return;
      }
      case 'openDiff': {
        const source = fileUri(message.source);
        const candidate = fileUri(message.candidate);
        if (source !== undefined && candidate !== undefined) {
          await vscode.commands.executeCommand(
            'vscode.diff',
            source,
            candidate,
            `${message.kernel}: source ↔ best verified candidate`,
          );
        }
        return;
      }
    }
  }
}

/** Only files are opened from the page: it shows KB text, which must not pick what is opened. */
function fileUri(value: string): vscode.Uri | undefined {
  const uri = vscode.Uri.parse(value);
  return uri.scheme === 'file' ? uri : undefined;
}
