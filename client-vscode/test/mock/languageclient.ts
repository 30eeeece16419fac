// A stand-in for `vscode-languageclient/node` (whose real module needs a running VS Code):
// records how the extension constructs and drives the client.

export enum State {
  Stopped = 1,
  Running = 2,
  Starting = 3,
}

export const ExecuteCommandRequest = { type: { method: 'workspace/executeCommand' } };
export const DidChangeConfigurationNotification = { type: { method: 'workspace/didChangeConfiguration' } };

export class ResponseError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

type Handler = (params: unknown) => void;

export class LanguageClient {
  static instances: LanguageClient[] = [];
  readonly notificationHandlers = new Map<string, Handler>();
  readonly stateHandlers: ((event: { oldState: State; newState: State }) => void)[] = [];
  readonly sent: { method: string; params: unknown }[] = [];
  requestAnswer: unknown = null;
  started = false;
  disposed = false;

  constructor(
    readonly id: string,
    readonly name: string,
    readonly serverOptions: unknown,
    readonly clientOptions: Record<string, unknown>,
  ) {
    LanguageClient.instances.push(this);
  }

  onNotification(method: string, handler: Handler): { dispose(): void } {
    this.notificationHandlers.set(method, handler);
    return { dispose: () => this.notificationHandlers.delete(method) };
  }

  onDidChangeState(handler: (event: { oldState: State; newState: State }) => void): { dispose(): void } {
    this.stateHandlers.push(handler);
    return { dispose: () => undefined };
  }

  start(): Promise<void> {
    this.started = true;
    return Promise.resolve();
  }

  dispose(): Promise<void> {
    this.disposed = true;
    return Promise.resolve();
  }

  sendRequest(type: { method: string }, params: unknown): Promise<unknown> {
    this.sent.push({ method: type.method, params });
    return Promise.resolve(this.requestAnswer);
  }

  sendNotification(type: { method: string }, params: unknown): Promise<void> {
    this.sent.push({ method: type.method, params });
    return Promise.resolve();
  }
}
