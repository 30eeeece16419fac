// A stand-in for the `vscode` module: the parts of the API the extension uses, recording what
// the extension does (messages, commands, status bar) and letting a test script the answers.
// Configuration defaults come from package.json, as in VS Code.

import * as fs from 'node:fs';
import * as path from 'node:path';

type Listener<T> = (value: T) => unknown;

export class EventEmitter<T> {
  private listeners: Listener<T>[] = [];
  readonly event = (listener: Listener<T>): Disposable => {
    this.listeners.push(listener);
    return new Disposable(() => {
      this.listeners = this.listeners.filter((l) => l !== listener);
    });
  };
  fire(value: T): void {
    for (const listener of [...this.listeners]) {
      listener(value);
    }
  }
  dispose(): void {
    this.listeners = [];
  }
}

export class Disposable {
  constructor(private readonly onDispose: () => void) {}
  dispose(): void {
    this.onDispose();
  }
}

export class Uri {
  private constructor(
    readonly scheme: string,
    readonly path: string,
  ) {}
  static parse(value: string): Uri {
    const colon = value.indexOf(':');
    const scheme = value.slice(0, colon);
    const rest = value.slice(colon + 1).replace(/^\/\//, '');
    return new Uri(scheme, decodeURIComponent(rest));
  }
  static file(fsPath: string): Uri {
    return new Uri('file', fsPath);
  }
  get fsPath(): string {
    return this.path;
  }
  toString(): string {
    return `${this.scheme}://${encodeURI(this.path)}`;
  }
}

export enum ViewColumn {
  Active = -1,
  One = 1,
}

export enum LanguageStatusSeverity {
  Information = 0,
  Warning = 1,
  Error = 2,
}

export class Position {
  constructor(
    readonly line: number,
    readonly character: number,
  ) {}
}

export class Range {
  constructor(
    readonly start: Position,
    readonly end: Position,
  ) {}
}

export interface MockWebviewPanel {
  readonly viewType: string;
  readonly title: string;
  readonly options: unknown;
  readonly webview: { html: string; readonly cspSource: string; onDidReceiveMessage(listener: Listener<unknown>): Disposable };
  /** Sends a message as the page's script would. */
  post(message: unknown): void;
  reveals: number;
  disposed: boolean;
  reveal(): void;
  onDidDispose(listener: Listener<undefined>): Disposable;
  dispose(): void;
}

export enum DiagnosticSeverity {
  Error = 0,
  Warning = 1,
  Information = 2,
  Hint = 3,
}

/** A diagnostic as a language client leaves it in VS Code's collection. */
export interface MockDiagnostic {
  readonly message: string;
  readonly severity: DiagnosticSeverity;
  readonly source?: string;
  readonly code?: string | { value: string };
}

export enum StatusBarAlignment {
  Left = 1,
  Right = 2,
}

export interface Message {
  readonly level: 'error' | 'warning' | 'information';
  readonly text: string;
  readonly items: readonly string[];
  /** Present when the extension passed MessageOptions: whether the dialog was modal. */
  readonly modal?: boolean;
}

interface SettingValues {
  global?: unknown;
  workspace?: unknown;
}

export interface MockDocument {
  uri: Uri;
  languageId: string;
  version: number;
  isDirty: boolean;
  saves: number;
  getText(): string;
  save(): Promise<boolean>;
}

const manifest = JSON.parse(
  fs.readFileSync(path.join(__dirname, '..', '..', '..', '..', 'package.json'), 'utf8'),
) as { contributes: { configuration: { properties: Record<string, { default?: unknown } | undefined> } } };

/** Everything a test may set or inspect; `resetMock` restores it. */
export const mock = {
  trusted: true,
  settings: new Map<string, SettingValues>(),
  messages: [] as Message[],
  /** Answers to showXxxMessage, by message-text prefix; unanswered messages resolve undefined. */
  answers: [] as { prefix: string; item: string }[],
  quickPickAnswer: undefined as string | undefined,
  quickPicks: [] as (readonly string[])[],
  executed: [] as { command: string; args: unknown[] }[],
  registered: new Map<string, (...args: unknown[]) => unknown>(),
  panels: [] as MockWebviewPanel[],
  languageStatusItems: [] as { id: string; selector: unknown; text: string; detail?: string; severity: number; busy: boolean; command: unknown }[],
  activeTextEditor: undefined as
    | { document: MockDocument; selection: { active: { line: number; character: number } } }
    | undefined,
  extensions: new Map<string, unknown>(),
  clipboard: '',
  outputLines: [] as string[],
  outputShown: 0,
  statusItems: [] as { text: string; tooltip: unknown; command: unknown; visible: boolean }[],
  workspaceFolders: undefined as { uri: Uri; name: string; index: number }[] | undefined,
  /** Paths that `workspace.fs.stat` finds. */
  files: new Set<string>(),
  trustGranted: new EventEmitter<undefined>(),
  configurationChanged: new EventEmitter<{ affectsConfiguration(section: string): boolean }>(),
  /** Every file's diagnostics, as `languages.getDiagnostics()` returns them. */
  diagnostics: new Map<string, MockDiagnostic[]>(),
  diagnosticsChanged: new EventEmitter<undefined>(),
};

export function resetMock(): void {
  mock.trusted = true;
  mock.settings.clear();
  mock.messages.length = 0;
  mock.answers.length = 0;
  mock.quickPickAnswer = undefined;
  mock.quickPicks.length = 0;
  mock.executed.length = 0;
  mock.registered.clear();
  mock.panels.length = 0;
  mock.languageStatusItems.length = 0;
  mock.activeTextEditor = undefined;
  mock.extensions.clear();
  mock.clipboard = '';
  mock.outputLines.length = 0;
  mock.outputShown = 0;
  mock.statusItems.length = 0;
  mock.workspaceFolders = undefined;
  mock.files.clear();
  mock.trustGranted = new EventEmitter<undefined>();
  mock.configurationChanged = new EventEmitter();
  mock.diagnostics.clear();
  mock.diagnosticsChanged = new EventEmitter<undefined>();
}

/** Publishes a file's diagnostics, as a language client does. */
export function setDiagnostics(fsPath: string, diagnostics: MockDiagnostic[]): void {
  mock.diagnostics.set(fsPath, diagnostics);
  mock.diagnosticsChanged.fire(undefined);
}

/** Sets a user (global) or workspace value of `kernelblaster.<key>`-style full keys. */
export function setSetting(fullKey: string, value: unknown, level: keyof SettingValues = 'global'): void {
  const values = mock.settings.get(fullKey) ?? {};
  values[level] = value;
  mock.settings.set(fullKey, values);
}

/** Grants trust the way VS Code does: the flag flips, then the event fires. */
export function grantTrust(): void {
  mock.trusted = true;
  mock.trustGranted.fire(undefined);
}

export function changeConfiguration(...changedKeys: string[]): void {
  mock.configurationChanged.fire({
    affectsConfiguration: (section) =>
      changedKeys.some((key) => key === section || key.startsWith(`${section}.`)),
  });
}

export function makeDocument(fsPath: string, text: string, languageId = 'cuda-cpp'): MockDocument {
  const document: MockDocument = {
    uri: Uri.file(fsPath),
    languageId,
    version: 7,
    isDirty: false,
    saves: 0,
    getText: () => text,
    save: () => {
      document.saves += 1;
      document.isDirty = false;
      return Promise.resolve(true);
    },
  };
  return document;
}

function showMessage(level: Message['level']) {
  return (text: string, ...rest: (string | { modal?: boolean })[]): Promise<string | undefined> => {
    const options = typeof rest[0] === 'object' ? rest.shift() : undefined;
    const items = rest.filter((item): item is string => typeof item === 'string');
    mock.messages.push(
      typeof options === 'object' ? { level, text, items, modal: options.modal === true } : { level, text, items },
    );
    const answer = mock.answers.find((a) => text.startsWith(a.prefix));
    return Promise.resolve(answer !== undefined && items.includes(answer.item) ? answer.item : undefined);
  };
}

export const window = {
  createOutputChannel: (name: string) => ({
    name,
    appendLine: (line: string) => mock.outputLines.push(line),
    append: (text: string) => mock.outputLines.push(text),
    show: () => {
      mock.outputShown += 1;
    },
    dispose: () => undefined,
  }),
  createStatusBarItem: () => {
    const item = {
      text: '',
      tooltip: undefined as unknown,
      command: undefined as unknown,
      name: '',
      visible: false,
      show: () => {
        item.visible = true;
      },
      dispose: () => {
        item.visible = false;
      },
    };
    mock.statusItems.push(item);
    return item;
  },
  showErrorMessage: showMessage('error'),
  showWarningMessage: showMessage('warning'),
  showInformationMessage: showMessage('information'),
  showQuickPick: (items: readonly string[]) => {
    mock.quickPicks.push(items);
    return Promise.resolve(mock.quickPickAnswer);
  },
  showTextDocument: (document: unknown, options?: unknown) => {
    mock.executed.push({ command: '<showTextDocument>', args: [document, options] });
    return Promise.resolve();
  },
  createWebviewPanel: (viewType: string, title: string, _column: unknown, options: unknown) => {
    const messages = new EventEmitter<unknown>();
    const disposed = new EventEmitter<undefined>();
    const panel: MockWebviewPanel = {
      viewType,
      title,
      options,
      webview: { html: '', cspSource: 'https://webview.test', onDidReceiveMessage: messages.event },
      post: (message) => {
        messages.fire(message);
      },
      reveals: 0,
      disposed: false,
      reveal: () => {
        panel.reveals += 1;
      },
      onDidDispose: disposed.event,
      dispose: () => {
        panel.disposed = true;
        disposed.fire(undefined);
      },
    };
    mock.panels.push(panel);
    return panel;
  },
  get activeTextEditor() {
    return mock.activeTextEditor;
  },
};

function configuration(section: string) {
  const fullKey = (key: string) => `${section}.${key}`;
  const defaults = manifest.contributes.configuration.properties;
  return {
    get: (key: string): unknown => {
      const values = mock.settings.get(fullKey(key));
      return values?.workspace ?? values?.global ?? defaults[fullKey(key)]?.default;
    },
    inspect: (key: string) => {
      const values = mock.settings.get(fullKey(key));
      return {
        key: fullKey(key),
        defaultValue: defaults[fullKey(key)]?.default,
        globalValue: values?.global,
        workspaceValue: values?.workspace,
      };
    },
    has: (key: string) => fullKey(key) in defaults || mock.settings.has(fullKey(key)),
  };
}

export const workspace = {
  get isTrusted() {
    return mock.trusted;
  },
  get workspaceFolders() {
    return mock.workspaceFolders;
  },
  onDidGrantWorkspaceTrust: (listener: Listener<undefined>) => mock.trustGranted.event(listener),
  onDidChangeConfiguration: (listener: Listener<{ affectsConfiguration(section: string): boolean }>) =>
    mock.configurationChanged.event(listener),
  getConfiguration: (section: string) => configuration(section),
  fs: {
    stat: (uri: Uri) =>
      mock.files.has(uri.fsPath)
        ? Promise.resolve({ type: 1, size: 0 })
        : Promise.reject(Object.assign(new Error(`${uri.fsPath} not found`), { code: 'FileNotFound' })),
  },
};

export const commands = {
  registerCommand: (command: string, handler: (...args: unknown[]) => unknown) => {
    mock.registered.set(command, handler);
    return new Disposable(() => mock.registered.delete(command));
  },
  executeCommand: (command: string, ...args: unknown[]): Promise<unknown> => {
    const handler = mock.registered.get(command);
    if (handler !== undefined) {
      return Promise.resolve(handler(...args));
    }
    mock.executed.push({ command, args });
    return Promise.resolve(undefined);
  },
};

export const languages = {
  getDiagnostics: () => [...mock.diagnostics].map(([fsPath, diagnostics]) => [Uri.file(fsPath), diagnostics] as const),
  onDidChangeDiagnostics: (listener: Listener<undefined>) => mock.diagnosticsChanged.event(listener),
  createLanguageStatusItem: (id: string, selector: unknown) => {
    const item = { id, selector, text: '', severity: LanguageStatusSeverity.Information, busy: false, command: undefined, name: '', dispose: () => undefined };
    mock.languageStatusItems.push(item);
    return item;
  },
};

export const extensions = {
  getExtension: (id: string) => mock.extensions.get(id),
};

export const env = {
  clipboard: {
    writeText: (text: string) => {
      mock.clipboard = text;
      return Promise.resolve();
    },
  },
};
