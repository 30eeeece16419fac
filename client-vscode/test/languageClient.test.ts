// How the extension configures vscode-languageclient (replaced by test/mock/languageclient.ts):
// launch, initialization options, settings sync through workspace/configuration, jobStatus.

import assert from 'node:assert/strict';
import { beforeEach, describe, it } from 'node:test';

import type * as vscode from 'vscode';

import type { JobStatus } from '../src/statusModel';
import { languageClientConnection } from '../src/languageClient';
import { LanguageClient, ResponseError, State } from './mock/languageclient';
import { mock, resetMock, setSetting, Uri, window } from './mock/vscode';

interface Middleware {
  provideHover: (document: { languageId: string }, position: unknown, token: unknown, next: (...args: unknown[]) => unknown) => unknown;
  workspace: {
    configuration: (params: unknown, token: unknown, next: (params: unknown, token: unknown) => unknown) => Promise<unknown>;
    didChangeConfiguration: (sections: string[] | undefined, next: (sections: string[] | undefined) => Promise<void>) => Promise<void>;
  };
}

function connect() {
  const jobs: JobStatus[] = [];
  const phases: string[] = [];
  const init = { trusted: false, settings: { rollouts: 8 }, clientCommands: ['kernelblaster.showProfile'] };
  const output = window.createOutputChannel('KernelBlaster') as unknown as vscode.OutputChannel;
  const connection = languageClientConnection(output)(
    { command: '/venv/bin/python', args: ['-m', 'kernelblaster', 'serve'], origin: 'python' },
    init,
    { onJobStatus: (job) => jobs.push(job), onServerPhase: (phase) => phases.push(phase) },
  );
  const client = LanguageClient.instances.at(-1);
  assert.ok(client !== undefined);
  return { connection, client, init, jobs, phases, middleware: client.clientOptions.middleware as Middleware };
}

beforeEach(() => {
  resetMock();
  LanguageClient.instances = [];
});

describe('language client setup', () => {
  it('launches the discovered command in the workspace folder with the initialization options', () => {
    mock.workspaceFolders = [{ uri: Uri.file('/ws'), name: 'ws', index: 0 }];
    const { client, init } = connect();
    assert.equal(client.id, 'kernelblaster', 'the id makes kernelblaster.trace.server the trace setting');
    const executable = { command: '/venv/bin/python', args: ['-m', 'kernelblaster', 'serve'], options: { cwd: '/ws' } };
    assert.deepEqual(client.serverOptions, { run: executable, debug: executable });
    assert.deepEqual(client.clientOptions.documentSelector, [
      { scheme: 'file', language: 'cuda-cpp' },
      { scheme: 'file', language: 'python' },
    ]);
    assert.equal(client.clientOptions.initializationOptions, init);
    assert.deepEqual(client.clientOptions.synchronize, { configurationSection: 'kernelblaster' });
  });

  it('leaves work-done progress (and its cancellation) to vscode-languageclient', () => {
    const { middleware } = connect();
    assert.deepEqual(Object.keys(middleware).sort(), ['provideHover', 'workspace']);
    assert.deepEqual(Object.keys(middleware.workspace).sort(), ['configuration', 'didChangeConfiguration']);
  });

  it('sends Python files for their code action but never asks the server to hover them', () => {
    const { middleware } = connect();
    const asked: string[] = [];
    const next = (document: unknown) => {
      asked.push((document as { languageId: string }).languageId);
      return 'hover';
    };
    assert.equal(middleware.provideHover({ languageId: 'python' }, {}, {}, next), undefined);
    assert.equal(middleware.provideHover({ languageId: 'cuda-cpp' }, {}, {}, next), 'hover');
    assert.deepEqual(asked, ['cuda-cpp']);
  });

  it('answers workspace/configuration with only the settings the user set', async () => {
    setSetting('kernelblaster.topK', 5);
    setSetting('kernelblaster.serverCommand', ['kb', 'serve']);
    const { middleware } = connect();
    const params = { items: [{ section: 'kernelblaster' }, { section: 'files' }] };
    const answer = await middleware.workspace.configuration(params, undefined, () => [
      { topK: 5, rollouts: 4, serverCommand: ['kb', 'serve'], trace: { server: 'off' } },
      { autoSave: 'off' },
    ]);
    assert.deepEqual(answer, [{ topK: 5 }, { autoSave: 'off' }]);
    const failure = new ResponseError(-32603, 'boom');
    assert.equal(await middleware.workspace.configuration(params, undefined, () => failure), failure);
  });

  it('pushes the same filtered settings with didChangeConfiguration', async () => {
    setSetting('kernelblaster.llmModel', 'qwen2.5-coder');
    setSetting('kernelblaster.python', '/venv/bin/python');
    const { client, middleware } = connect();
    await middleware.workspace.didChangeConfiguration(['kernelblaster'], () => Promise.reject(new Error('unfiltered')));
    assert.deepEqual(client.sent, [
      { method: 'workspace/didChangeConfiguration', params: { settings: { kernelblaster: { llmModel: 'qwen2.5-coder' } } } },
    ]);
  });

  it('forwards well-formed jobStatus notifications and logs malformed ones', () => {
    const { client, jobs } = connect();
    const handler = client.notificationHandlers.get('kernelblaster/jobStatus');
    assert.ok(handler !== undefined);
    handler({ uri: 'file:///a.cu', running: true, phase: 'building', message: '' });
    handler({ running: 'yes' });
    assert.deepEqual(jobs, [{ uri: 'file:///a.cu', running: true, phase: 'building', message: '' }]);
    assert.deepEqual(mock.outputLines, ['Ignored a malformed kernelblaster/jobStatus: {"running":"yes"}']);
  });

  it('maps client states, runs commands with workspace/executeCommand, and disposes', async () => {
    const { client, connection, phases } = connect();
    for (const newState of [State.Starting, State.Running, State.Stopped]) {
      for (const handler of client.stateHandlers) {
        handler({ oldState: State.Stopped, newState });
      }
    }
    assert.deepEqual(phases, ['starting', 'running', 'stopped']);
    client.requestAnswer = { markdown: '# KB' };
    assert.deepEqual(await connection.executeCommand('kernelblaster.knowledgeBase', []), { markdown: '# KB' });
    assert.deepEqual(client.sent, [
      { method: 'workspace/executeCommand', params: { command: 'kernelblaster.knowledgeBase', arguments: [] } },
    ]);
    await connection.start();
    assert.ok(client.started);
    await connection.dispose();
    assert.ok(client.disposed);
  });
});
