// Applies `statusModel` to the status bar item and to the language status item of CUDA editors.

import * as vscode from 'vscode';

import {
  initialStatus,
  reduceStatus,
  renderLanguageStatus,
  renderStatus,
  type StatusEvent,
  type StatusState,
} from './statusModel';

export const SHOW_OUTPUT_COMMAND = 'kernelblaster.showOutput';

const SEVERITY = {
  information: vscode.LanguageStatusSeverity.Information,
  warning: vscode.LanguageStatusSeverity.Warning,
  error: vscode.LanguageStatusSeverity.Error,
} as const;

export class StatusBar implements vscode.Disposable {
  private readonly item: vscode.StatusBarItem;
  private readonly languageItem: vscode.LanguageStatusItem;
  private current: StatusState;

  constructor(trusted: boolean) {
    this.item = vscode.window.createStatusBarItem('kernelblaster.status', vscode.StatusBarAlignment.Left, 0);
    this.item.name = 'KernelBlaster';
    this.item.command = SHOW_OUTPUT_COMMAND;
    this.languageItem = vscode.languages.createLanguageStatusItem('kernelblaster.server', { language: 'cuda-cpp' });
    this.languageItem.name = 'KernelBlaster';
    this.languageItem.command = { title: 'Show Output', command: SHOW_OUTPUT_COMMAND };
    this.current = initialStatus(trusted);
    this.render();
    this.item.show();
  }

  get state(): StatusState {
    return this.current;
  }

  apply(event: StatusEvent): void {
    this.current = reduceStatus(this.current, event);
    this.render();
  }

  dispose(): void {
    this.item.dispose();
    this.languageItem.dispose();
  }

  private render(): void {
    const view = renderStatus(this.current);
    this.item.text = view.text;
    this.item.tooltip = view.tooltip;
    const language = renderLanguageStatus(this.current);
    this.languageItem.text = language.text;
    this.languageItem.detail = language.detail;
    this.languageItem.severity = SEVERITY[language.severity];
    this.languageItem.busy = language.busy;
  }
}
