// "Show knowledge base": the server's markdown in a read-only virtual document, previewed.
// A content provider (not an untitled document) so closing it never asks to save.

import * as vscode from 'vscode';

export const KNOWLEDGE_BASE_SCHEME = 'kernelblaster-kb';

export class KnowledgeBaseView implements vscode.TextDocumentContentProvider, vscode.Disposable {
  readonly uri = vscode.Uri.parse(`${KNOWLEDGE_BASE_SCHEME}:/KernelBlaster%20knowledge%20base.md`);
  private markdown = '';
  private readonly changed = new vscode.EventEmitter<vscode.Uri>();
  readonly onDidChange = this.changed.event;
  private readonly registration: vscode.Disposable;

  constructor() {
    this.registration = vscode.workspace.registerTextDocumentContentProvider(KNOWLEDGE_BASE_SCHEME, this);
  }

  provideTextDocumentContent(): string {
    return this.markdown;
  }

  /** Shows `markdown` rendered; as plain markdown text where the markdown preview is disabled. */
  async show(markdown: string): Promise<void> {
    this.markdown = markdown;
    this.changed.fire(this.uri);
    if ((await vscode.commands.getCommands(true)).includes('markdown.showPreview')) {
      await vscode.commands.executeCommand('markdown.showPreview', this.uri);
    } else {
      await vscode.window.showTextDocument(await vscode.workspace.openTextDocument(this.uri));
    }
  }

  dispose(): void {
    this.registration.dispose();
    this.changed.dispose();
  }
}
