// One language-server session at a time: discover the server, start it with the current trust
// and settings, report what happened, and restart it when trust or the launch settings change.

import * as vscode from 'vscode';

import type { ConnectionFactory, ServerConnection } from './connection';
import type { Discovery } from './discovery';
import { LENS_CLIENT_COMMANDS } from './profileView';
import { SECTION, serverSettings, type ServerSettings } from './settings';
import type { StatusBar } from './statusBar';

export interface SessionDeps {
  readonly discover: () => Promise<Discovery>;
  readonly connect: ConnectionFactory;
  readonly output: vscode.OutputChannel;
  readonly status: StatusBar;
}

export class ServerSession implements vscode.Disposable {
  private connection: ServerConnection | undefined;
  private failure: string | undefined;
  /** Start, stop and restart run one after another, never interleaved. */
  private queue: Promise<void> = Promise.resolve();
  private readonly reportedProblems = new Set<string>();

  constructor(private readonly deps: SessionDeps) {}

  start(): Promise<void> {
    return this.enqueue(() => this.startNow());
  }

  restart(): Promise<void> {
    return this.enqueue(async () => {
      await this.stopNow();
      await this.startNow();
    });
  }

  stop(): Promise<void> {
    return this.enqueue(() => this.stopNow());
  }

  /** Workspace Trust was granted: the running server is told, so that the open files' lenses
   * and diagnostics stay on screen (a restart would take them away until the new server has
   * loaded them); a server that isn't running starts trusted. */
  grantTrust(): Promise<void> {
    return this.enqueue(async () => {
      const connection = this.connection;
      if (connection !== undefined && this.deps.status.state.server === 'running') {
        try {
          await connection.grantTrust();
          return;
        } catch (error) {
          this.deps.output.appendLine(`Telling the server about trust failed (${describe(error)}): restarting it`);
        }
      }
      await this.stopNow();
      await this.startNow();
    });
  }

  dispose(): void {
    void this.stop();
  }

  /** The running server, after any start in progress; otherwise undefined, having told the user
   * why and offered a restart. */
  async runningConnection(): Promise<ServerConnection | undefined> {
    await this.settled();
    if (this.connection !== undefined && this.deps.status.state.server === 'running') {
      return this.connection;
    }
    const reason = this.failure === undefined ? '' : `: ${this.failure}`;
    const choice = await vscode.window.showErrorMessage(
      `KernelBlaster's language server isn't running${reason}`,
      'Restart Server',
      'Show Output',
    );
    if (choice === 'Restart Server') {
      await this.restart();
    } else if (choice === 'Show Output') {
      this.deps.output.show();
    }
    return undefined;
  }

  /** Settles when every start, stop and restart asked for so far has finished. */
  settled(): Promise<void> {
    return this.queue;
  }

  /** The settings to send the server; problems with them are reported once each. */
  readSettings(): ServerSettings {
    const { settings, problems } = serverSettings(vscode.workspace.getConfiguration(SECTION));
    for (const problem of problems) {
      this.deps.output.appendLine(problem);
      if (!this.reportedProblems.has(problem)) {
        this.reportedProblems.add(problem);
        void vscode.window.showWarningMessage(problem);
      }
    }
    return settings;
  }

  private enqueue(step: () => Promise<void>): Promise<void> {
    this.queue = this.queue.then(step, step);
    return this.queue;
  }

  private async startNow(): Promise<void> {
    const { output, status } = this.deps;
    status.apply({ kind: 'server', phase: 'starting' });
    this.failure = undefined;
    let discovery: Discovery;
    try {
      discovery = await this.deps.discover();
    } catch (error) {
      this.failure = `looking for the server failed (${describe(error)})`;
      output.appendLine(`The language server couldn't be started: ${this.failure}`);
      status.apply({ kind: 'server', phase: 'stopped' });
      return;
    }
    for (const attempt of discovery.tried) {
      output.appendLine(`Server discovery: ${attempt.origin}: ${attempt.detail}`);
    }
    if (!discovery.ok) {
      this.failure = discovery.message;
      output.appendLine(discovery.message);
      status.apply({ kind: 'server', phase: 'notInstalled' });
      void this.offerFix(discovery);
      return;
    }
    const { launch } = discovery;
    const trusted = vscode.workspace.isTrusted;
    output.appendLine(
      `Starting ${[launch.command, ...launch.args].join(' ')} (from ${launch.origin}); ` +
        `workspace ${trusted ? 'trusted' : 'not trusted: nothing will be built or run'}`,
    );
    const connection = this.deps.connect(
      launch,
      { trusted, settings: this.readSettings(), clientCommands: LENS_CLIENT_COMMANDS },
      {
        onJobStatus: (job) => {
          if (this.connection === connection) {
            status.apply({ kind: 'job', status: job });
          }
        },
        onServerPhase: (phase) => {
          if (this.connection === connection) {
            status.apply({ kind: 'server', phase });
          }
        },
      },
    );
    this.connection = connection;
    try {
      await connection.start();
      status.apply({ kind: 'server', phase: 'running' });
    } catch (error) {
      this.failure = `it failed to start (${describe(error)})`;
      output.appendLine(`The language server ${this.failure}`);
      status.apply({ kind: 'server', phase: 'stopped' });
    }
  }

  private async stopNow(): Promise<void> {
    const connection = this.connection;
    this.connection = undefined;
    if (connection === undefined) {
      return;
    }
    try {
      await connection.dispose();
    } catch (error) {
      // The old server is being replaced or the window is closing; say so and carry on.
      this.deps.output.appendLine(`Stopping the language server: ${describe(error)}`);
    }
    this.deps.status.apply({ kind: 'server', phase: 'stopped' });
  }

  /** The one notification for a server that can't be found, with its fix. */
  private async offerFix(discovery: Extract<Discovery, { ok: false }>): Promise<void> {
    const actions = [
      ...(discovery.fixCommand === undefined ? [] : ['Copy Command']),
      'Open Settings',
      'Show Output',
    ];
    const choice = await vscode.window.showErrorMessage(discovery.message, ...actions);
    if (choice === 'Copy Command' && discovery.fixCommand !== undefined) {
      await vscode.env.clipboard.writeText(discovery.fixCommand);
    } else if (choice === 'Open Settings') {
      await vscode.commands.executeCommand('workbench.action.openSettings', SECTION);
    } else if (choice === 'Show Output') {
      this.deps.output.show();
    }
  }
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
