// The seam between the extension and vscode-languageclient: the session drives a
// `ServerConnection`, and tests drive the session with a fake one.

import type { ServerLaunch } from './discovery';
import type { ServerSettings } from './settings';
import type { JobStatus } from './statusModel';

/** `initializationOptions` as docs/protocol.md defines them. */
export interface InitializationOptions {
  readonly trusted: boolean;
  readonly settings: ServerSettings;
  /** The extension's commands the server may put in code lenses. */
  readonly clientCommands: readonly string[];
}

export interface ConnectionEvents {
  readonly onJobStatus: (status: JobStatus) => void;
  readonly onServerPhase: (phase: 'starting' | 'running' | 'stopped') => void;
}

export interface ServerConnection {
  start(): Promise<void>;
  /** Stops the server and releases everything the connection registered. */
  dispose(): Promise<void>;
  /** `workspace/executeCommand`; rejects with the server's error. */
  executeCommand(command: string, args: readonly unknown[]): Promise<unknown>;
  /** `kernelblaster/trustGranted`: the running server trusts the workspace from now on. */
  grantTrust(): Promise<void>;
}

export type ConnectionFactory = (
  launch: ServerLaunch,
  initializationOptions: InitializationOptions,
  events: ConnectionEvents,
) => ServerConnection;
