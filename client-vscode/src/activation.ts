// Everything `activate` sets up, with the process-touching parts (launching the server, probing
// interpreters) passed in so the tests can run it against the mocked `vscode` module.

import * as os from 'node:os';

import * as vscode from 'vscode';

import { registerCommands } from './commands';
import type { ConnectionFactory } from './connection';
import { discoverServer, type Discovery, type DiscoveryEnv } from './discovery';
import { KnowledgeBaseView } from './knowledgeBaseView';
import { type NsightComputeDeps, REAL_DEPS as NSIGHT_COMPUTE } from './nsightCompute';
import { ProfileViews } from './profileView';
import { activePythonInterpreter } from './pythonExtension';
import { ServerSession } from './session';
import { SECTION } from './settings';
import { StatusBar } from './statusBar';

export interface ActivationDeps {
  readonly connect: (output: vscode.OutputChannel) => ConnectionFactory;
  readonly findExecutable: DiscoveryEnv['findExecutable'];
  readonly checkPython: DiscoveryEnv['checkPython'];
  /** Finding and starting Nsight Compute's UI (tests pass fakes). */
  readonly nsightCompute?: NsightComputeDeps;
}

export interface Activated {
  readonly session: ServerSession;
  readonly status: StatusBar;
  readonly output: vscode.OutputChannel;
  /** Settles when the first start attempt has finished. */
  readonly started: Promise<void>;
}

/** Settings that decide which server runs: a change restarts it. */
const LAUNCH_SETTINGS = [`${SECTION}.serverCommand`, `${SECTION}.python`];

export function activateWith(context: vscode.ExtensionContext, deps: ActivationDeps): Activated {
  const output = vscode.window.createOutputChannel('KernelBlaster');
  const status = new StatusBar(vscode.workspace.isTrusted);
  const session = new ServerSession({
    discover: () => discoverFromSettings(deps),
    connect: deps.connect(output),
    output,
    status,
  });
  // A launch setting's event also fires when its value did not change (e.g. when trust is
  // granted, for every setting Restricted Mode holds back): only a new value restarts.
  let launchedWith = launchSettings();
  const knowledgeBase = new KnowledgeBaseView();
  const profiles = new ProfileViews();
  context.subscriptions.push(
    output,
    status,
    session,
    knowledgeBase,
    profiles,
    ...registerCommands(session, { knowledgeBase, profiles, nsightCompute: deps.nsightCompute ?? NSIGHT_COMPUTE }, output),
    vscode.workspace.onDidGrantWorkspaceTrust(() => {
      status.apply({ kind: 'trust', trusted: true });
      void session.grantTrust();
    }),
    // What the language status says agrees with the Problems view's setup messages.
    vscode.languages.onDidChangeDiagnostics(() => {
      status.apply({ kind: 'setup', problems: setupProblems() });
    }),
    vscode.workspace.onDidChangeConfiguration((event) => {
      if (LAUNCH_SETTINGS.some((key) => event.affectsConfiguration(key))) {
        if (launchSettings() !== launchedWith) {
          launchedWith = launchSettings();
          void session.restart();
        }
      } else if (event.affectsConfiguration(SECTION)) {
        // vscode-languageclient forwards the change; this only reports unusable values.
        session.readSettings();
      }
    }),
  );
  return { session, status, output, started: session.start() };
}

/** The values of the launch settings, to compare. */
function launchSettings(): string {
  const config = vscode.workspace.getConfiguration(SECTION);
  return JSON.stringify(LAUNCH_SETTINGS.map((key) => config.get(key.slice(SECTION.length + 1)) ?? null));
}

/** The messages of the server's setup diagnostics (no PyTorch, no GPU, …) in any file. */
function setupProblems(): string[] {
  const problems = new Set<string>();
  for (const [, diagnostics] of vscode.languages.getDiagnostics()) {
    for (const diagnostic of diagnostics) {
      const code = typeof diagnostic.code === 'object' ? diagnostic.code.value : diagnostic.code;
      if (diagnostic.source === 'kernelblaster' && code === 'setup' && diagnostic.severity <= vscode.DiagnosticSeverity.Warning) {
        problems.add(diagnostic.message);
      }
    }
  }
  return [...problems];
}

function discoverFromSettings(deps: ActivationDeps): Promise<Discovery> {
  const config = vscode.workspace.getConfiguration(SECTION);
  const folder = vscode.workspace.workspaceFolders?.[0];
  return discoverServer({
    serverCommand: config.get('serverCommand'),
    python: config.get('python'),
    pythonExtensionInterpreter: () => activePythonInterpreter(folder?.uri),
    findExecutable: deps.findExecutable,
    checkPython: deps.checkPython,
    defaultPython: process.platform === 'win32' ? 'python' : 'python3',
    workspaceFolder: folder?.uri.fsPath,
    home: os.homedir(),
  });
}
