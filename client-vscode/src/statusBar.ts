// Applies `statusModel` to a VS Code status bar item.

import * as vscode from 'vscode';

import { initialStatus, reduceStatus, renderStatus, type StatusEvent, type StatusState } from './statusModel';

export const SHOW_OUTPUT_COMMAND = 'kernelblaster.showOutput';

export class StatusBar implements vscode.Disposable {
  private readonly item: vscode.StatusBarItem;
  private current: StatusState;

  constructor(trusted: boolean) {
    this.item = vscode.window.createStatusBarItem('kernelblaster.status', vscode.StatusBarAlignment.Left, 0);
    this.item.name = 'KernelBlaster';
    this.item.command = SHOW_OUTPUT_COMMAND;
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
  }

  private render(): void {
    const view = renderStatus(this.current);
    this.item.text = view.text;
    this.item.tooltip = view.tooltip;
  }
}
