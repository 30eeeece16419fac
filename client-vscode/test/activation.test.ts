// The extension as VS Code would run it, against the mocked `vscode` module and a fake server
// connection: discovery → notification, trust → initialization options and restart, commands →
// the requests of docs/protocol.md, jobStatus → status bar.

import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';

import type * as vscode from 'vscode';

import { type Activated, type ActivationDeps, activateWith } from '../src/activation';
import type { ConnectionEvents, InitializationOptions, ServerConnection } from '../src/connection';
import type { PythonCheck, ServerLaunch } from '../src/discovery';
import { KB_ANSWER } from './kbFixture';
import {
  changeConfiguration,
  DiagnosticSeverity,
  grantTrust,
  makeDocument,
  mock,
  resetMock,
  setDiagnostics,
  setSetting,
  Uri,
} from './mock/vscode';

class FakeConnection implements ServerConnection {
  started = false;
  disposed = false;
  trustGrants = 0;
  trustFails = false;
  readonly requests: { command: string; args: readonly unknown[] }[] = [];
  constructor(
    readonly launch: ServerLaunch,
    readonly init: InitializationOptions,
    readonly events: ConnectionEvents,
    private readonly answers: Map<string, unknown>,
  ) {}
  start(): Promise<void> {
    this.started = true;
    return Promise.resolve();
  }
  dispose(): Promise<void> {
    this.disposed = true;
    return Promise.resolve();
  }
  grantTrust(): Promise<void> {
    this.trustGrants++;
    return this.trustFails ? Promise.reject(new Error('the connection is closed')) : Promise.resolve();
  }
  executeCommand(command: string, args: readonly unknown[]): Promise<unknown> {
    this.requests.push({ command, args });
    const answer = this.answers.get(command);
    return answer instanceof Error ? Promise.reject(answer) : Promise.resolve(answer ?? null);
  }
}

interface Harness {
  readonly connections: FakeConnection[];
  readonly answers: Map<string, unknown>;
  readonly activated: Activated;
  readonly context: { subscriptions: { dispose(): unknown }[] };
}

let harness: Harness | undefined;

/** Activates with `python3 -m kernelblaster` missing everywhere and `kernelblaster` on PATH at
 * /usr/local/bin unless `installed` says otherwise. */
function activate(
  installed: { onPath?: boolean; pythons?: Record<string, PythonCheck> } = {},
): Harness {
  const connections: FakeConnection[] = [];
  const answers = new Map<string, unknown>();
  const deps: ActivationDeps = {
    connect: () => (launch, init, events) => {
      const connection = new FakeConnection(launch, init, events, answers);
      connections.push(connection);
      return connection;
    },
    findExecutable: (name) =>
      Promise.resolve(name === 'kernelblaster' && installed.onPath !== false ? '/usr/local/bin/kernelblaster' : undefined),
    checkPython: (python) =>
      Promise.resolve(installed.pythons?.[python] ?? { ok: false, missingPackage: true, detail: 'No module named kernelblaster' }),
  };
  const context = { subscriptions: [] as { dispose(): unknown }[] };
  const activated = activateWith(context as unknown as vscode.ExtensionContext, deps);
  harness = { connections, answers, activated, context };
  return harness;
}

const statusText = () => mock.statusItems[0].text;
const command = (id: string) => {
  const handler = mock.registered.get(id);
  assert.ok(handler !== undefined, `${id} is registered`);
  return handler() as Promise<void>;
};
const messages = (level: string) => mock.messages.filter((m) => m.level === level).map((m) => m.text);

const KERNELS = `__global__ void first(float* x) {
  x[0] = 1;
}

__global__ void second(float* x) {
  x[0] = 2;
}
`;

/** `kernelblaster.kernelAt`'s answer for KERNELS: the server's parser chose `kernel`. */
const kernelAt = (kernel: string | null) => ({
  kernel,
  range: kernel === null ? null : { start: { line: 0, character: 16 }, end: { line: 0, character: 16 + kernel.length } },
  kernels: ['first', 'second'],
});

function openEditor(line: number, dirty = false) {
  const document = makeDocument('/ws/softmax.cu', KERNELS);
  document.isDirty = dirty;
  mock.activeTextEditor = { document, selection: { active: { line, character: 2 } } };
  return document;
}

beforeEach(() => {
  resetMock();
});

afterEach(async () => {
  if (harness !== undefined) {
    await harness.activated.session.settled();
    for (const disposable of harness.context.subscriptions) {
      disposable.dispose();
    }
    await harness.activated.session.settled();
    harness = undefined;
  }
});

describe('activation and server discovery', () => {
  it('starts the server found on PATH with the trust flag and the settings the user set', async () => {
    setSetting('kernelblaster.rollouts', 8);
    setSetting('kernelblaster.llmBaseUrl', 'http://localhost:8000/v1', 'workspace');
    const { connections, activated } = activate();
    await activated.started;
    assert.equal(connections.length, 1);
    const [connection] = connections;
    assert.deepEqual(connection.launch, { command: '/usr/local/bin/kernelblaster', args: ['serve'], origin: 'path' });
    assert.deepEqual(connection.init, {
      trusted: true,
      settings: { llmBaseUrl: 'http://localhost:8000/v1', rollouts: 8 },
      // the lenses may use the extension's profile view and its Nsight Compute launcher
      clientCommands: ['kernelblaster.showProfile'],
    });
    assert.ok(connection.started);
    assert.equal(statusText(), '$(zap) KernelBlaster');
    assert.deepEqual(mock.messages, []);
  });

  it("prefers the Python extension's interpreter when it has kernelblaster", async () => {
    mock.workspaceFolders = [{ uri: Uri.file('/ws'), name: 'ws', index: 0 }];
    const asked: unknown[] = [];
    mock.extensions.set('ms-python.python', {
      isActive: false,
      activate: () =>
        Promise.resolve({
          environments: {
            getActiveEnvironmentPath: (resource: unknown) => {
              asked.push(resource);
              return { id: '/ws/.venv', path: '/ws/.venv' };
            },
            resolveEnvironment: () => Promise.resolve({ executable: { uri: Uri.file('/ws/.venv/bin/python') } }),
          },
        }),
    });
    const { connections, activated } = activate({ pythons: { '/ws/.venv/bin/python': { ok: true } } });
    await activated.started;
    assert.deepEqual(connections[0].launch, {
      command: '/ws/.venv/bin/python',
      args: ['-m', 'kernelblaster', 'serve'],
      origin: 'pythonExtension',
    });
    assert.equal((asked[0] as Uri).fsPath, '/ws');
  });

  it('uses kernelblaster.python before anything else', async () => {
    setSetting('kernelblaster.python', '/opt/kb/bin/python');
    const { connections, activated } = activate({ pythons: { '/opt/kb/bin/python': { ok: true } } });
    await activated.started;
    assert.equal(connections[0].launch.command, '/opt/kb/bin/python');
    assert.equal(connections[0].launch.origin, 'python');
  });

  it('with no server anywhere, shows one notification with the fix and starts nothing', async () => {
    mock.answers.push({ prefix: "KernelBlaster's language server is not installed", item: 'Copy Command' });
    const { connections, activated } = activate({ onPath: false });
    await activated.started;
    assert.equal(connections.length, 0);
    assert.deepEqual(messages('error'), [
      "KernelBlaster's language server is not installed. Run: python3 -m pip install kernelblaster " +
        '(or set kernelblaster.python / kernelblaster.serverCommand)',
    ]);
    assert.deepEqual(mock.messages[0].items, ['Copy Command', 'Open Settings', 'Show Output']);
    assert.equal(statusText(), '$(error) KernelBlaster: server not found');
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(mock.clipboard, 'python3 -m pip install kernelblaster');
    assert.ok(mock.outputLines.some((line) => line.includes('path: kernelblaster: not found on PATH')));
  });

  it('restarts with the new server when kernelblaster.python changes', async () => {
    const { connections, activated } = activate({ pythons: { '/opt/kb/bin/python': { ok: true } } });
    await activated.started;
    assert.equal(connections[0].launch.origin, 'path');
    setSetting('kernelblaster.python', '/opt/kb/bin/python');
    changeConfiguration('kernelblaster.python');
    await activated.session.settled();
    assert.equal(connections.length, 2);
    assert.ok(connections[0].disposed);
    assert.deepEqual(connections[1].launch, {
      command: '/opt/kb/bin/python',
      args: ['-m', 'kernelblaster', 'serve'],
      origin: 'python',
    });
    // the same value again (VS Code fires the event when trust is granted): no restart
    changeConfiguration('kernelblaster.python');
    await activated.session.settled();
    assert.equal(connections.length, 2);
  });

  it('warns once about an unusable setting and does not send it', async () => {
    setSetting('kernelblaster.llmApiKeyEnv', 'sk-secret-value');
    const { connections, activated } = activate();
    await activated.started;
    assert.deepEqual(connections[0].init.settings, {});
    changeConfiguration('kernelblaster.llmApiKeyEnv');
    const warnings = messages('warning');
    assert.equal(warnings.length, 1);
    assert.match(warnings[0], /llmApiKeyEnv must be the name of an environment variable/);
    assert.ok(!mock.outputLines.join('\n').includes('sk-secret-value'));
    assert.equal(connections.length, 1, 'a server setting does not restart the server');
  });
});

describe('workspace trust', () => {
  it('starts untrusted with trusted: false, and tells the running server once trust is granted', async () => {
    mock.trusted = false;
    const { connections, activated } = activate();
    await activated.started;
    assert.equal(connections[0].init.trusted, false);
    assert.equal(statusText(), '$(shield) $(zap) KernelBlaster');

    grantTrust();
    await activated.session.settled();
    // no restart: its lenses and diagnostics stay on screen
    assert.equal(connections.length, 1);
    assert.equal(connections[0].trustGrants, 1);
    assert.ok(!connections[0].disposed);
    assert.equal(statusText(), '$(zap) KernelBlaster');
    // a later start (e.g. a restart) starts trusted
    await activated.session.restart();
    assert.equal(connections[1].init.trusted, true);
  });

  it('restarts trusted when the server cannot be told', async () => {
    mock.trusted = false;
    const { connections, activated } = activate();
    await activated.started;
    connections[0].trustFails = true;
    grantTrust();
    await activated.session.settled();
    assert.equal(connections.length, 2);
    assert.ok(connections[0].disposed, 'the untrusted server is stopped');
    assert.equal(connections[1].init.trusted, true);
    assert.ok(connections[1].started);
  });

  it("reflects the server's setup diagnostics in the language status", async () => {
    const { activated } = activate();
    await activated.started;
    const language = () => mock.languageStatusItems[0];
    assert.equal(language().text, 'KernelBlaster: ready');
    setDiagnostics('/ws/softmax.cu', [
      { message: 'a hint', severity: DiagnosticSeverity.Hint, source: 'kernelblaster', code: 'setup' },
      { message: 'PyTorch is not installed in /venv', severity: DiagnosticSeverity.Warning, source: 'kernelblaster', code: 'setup' },
      { message: 'unrelated', severity: DiagnosticSeverity.Error, source: 'nvcc', code: 'setup' },
    ]);
    assert.equal(language().text, 'KernelBlaster: setup problem');
    assert.ok(language().detail?.startsWith('PyTorch is not installed in /venv'), language().detail);
    setDiagnostics('/ws/softmax.cu', []);
    assert.equal(language().text, 'KernelBlaster: ready');
  });

  it('refuses to optimize or profile in Restricted Mode and points to trust management', async () => {
    mock.trusted = false;
    mock.answers.push({ prefix: "KernelBlaster can't optimize", item: 'Manage Workspace Trust' });
    const { connections, activated } = activate();
    await activated.started;
    openEditor(1);
    await command('kernelblaster.optimizeAtCursor');
    await command('kernelblaster.profileFile');
    assert.deepEqual(connections[0].requests, []);
    assert.equal(messages('warning').length, 2);
    assert.deepEqual(mock.executed.map((e) => e.command), ['workbench.trust.manage']);
  });
});

describe('commands', () => {
  it('optimizes the kernel at the cursor, saving first, and offers the diff', async () => {
    const { connections, answers, activated } = activate();
    answers.set('kernelblaster.kernelAt', kernelAt('second'));
    answers.set('kernelblaster.optimize', { applied: true, message: 'second: 1.9× faster (coalesced loads)' });
    mock.answers.push({ prefix: 'KernelBlaster: second', item: 'Show Diff' });
    await activated.started;
    const document = openEditor(5, true);
    await command('kernelblaster.optimizeAtCursor');
    assert.equal(document.saves, 1);
    const uri = 'file:///ws/softmax.cu';
    assert.deepEqual(connections[0].requests, [
      { command: 'kernelblaster.kernelAt', args: [{ uri, position: { line: 5, character: 2 } }] },
      { command: 'kernelblaster.optimize', args: [{ uri, kernel: 'second', technique: null, version: 7 }] },
      { command: 'kernelblaster.showDiff', args: [{ uri, kernel: 'second' }] },
    ]);
    assert.deepEqual(messages('information'), ['KernelBlaster: second: 1.9× faster (coalesced loads)']);
  });

  it('offers an edit that was not checked for memory errors as a warning', async () => {
    const { answers, activated } = activate();
    answers.set('kernelblaster.kernelAt', kernelAt('second'));
    const message = 'second 30.27× faster (coalesced loads); not checked for memory errors: compute-sanitizer could not be started.';
    answers.set('kernelblaster.optimize', { applied: true, message, warning: 'not checked for memory errors' });
    await activated.started;
    openEditor(5, true);
    await command('kernelblaster.optimizeAtCursor');
    assert.deepEqual(messages('warning'), [`KernelBlaster: ${message}`]);
    assert.deepEqual(messages('information'), []);
  });

  it('takes the kernel the server names and leaves an unapplied result to the server', async () => {
    const { connections, answers, activated } = activate();
    answers.set('kernelblaster.kernelAt', { kernel: 'relu_k', range: null, kernels: ['relu_k'] });
    answers.set('kernelblaster.optimize', { applied: false, message: 'no verified faster candidate' });
    await activated.started;
    const document = makeDocument('/ws/gen.cu', '__global__ void relu_k(float* x) { x[0] = 0; }\n\nint x;\n');
    mock.activeTextEditor = { document, selection: { active: { line: 2, character: 0 } } };
    await command('kernelblaster.optimizeAtCursor');
    assert.deepEqual(connections[0].requests[1].args, [
      { uri: 'file:///ws/gen.cu', kernel: 'relu_k', technique: null, version: 7 },
    ]);
    // The server already said why with window/showMessage: the client only logs it.
    assert.deepEqual(mock.messages, []);
    assert.ok(mock.outputLines.includes('Optimize relu_k: no verified faster candidate'));
  });

  it('asks which kernel when the cursor is above several, and stops if none is picked', async () => {
    const { connections, answers, activated } = activate();
    answers.set('kernelblaster.kernelAt', kernelAt(null));
    await activated.started;
    const document = makeDocument('/ws/two.cu', `// header\n${KERNELS}`);
    mock.activeTextEditor = { document, selection: { active: { line: 0, character: 0 } } };
    await command('kernelblaster.optimizeAtCursor');
    assert.deepEqual(mock.quickPicks, [['first', 'second']]);
    assert.deepEqual(
      connections[0].requests.map((r) => r.command),
      ['kernelblaster.kernelAt'],
      'nothing is optimized',
    );
  });

  it('says so when the file has no kernel, and reports an answer it cannot read', async () => {
    const { connections, answers, activated } = activate();
    answers.set('kernelblaster.kernelAt', { kernel: null, range: null, kernels: [] });
    await activated.started;
    const document = makeDocument('/ws/main.cu', 'int main() { return 0; }\n');
    mock.activeTextEditor = { document, selection: { active: { line: 0, character: 0 } } };
    await command('kernelblaster.optimizeAtCursor');
    assert.deepEqual(messages('warning'), ['No __global__ kernel definition found in main.cu.']);
    answers.set('kernelblaster.kernelAt', { kernel: 3 });
    await command('kernelblaster.optimizeAtCursor');
    assert.deepEqual(messages('error'), [
      'KernelBlaster: Optimize failed: the server answered {"kernel":3} instead of {"kernel", "range", "kernels"}',
    ]);
    assert.deepEqual(
      connections[0].requests.map((r) => r.command),
      ['kernelblaster.kernelAt', 'kernelblaster.kernelAt'],
    );
    assert.equal(mock.quickPicks.length, 0);
  });

  it('profiles the file with full depth', async () => {
    const { connections, activated } = activate();
    await activated.started;
    openEditor(0);
    await command('kernelblaster.profileFile');
    assert.deepEqual(connections[0].requests, [
      { command: 'kernelblaster.profile', args: [{ uri: 'file:///ws/softmax.cu', depth: 'full' }] },
    ]);
  });

  it('writes a kernel for the Python module in the editor, saving it first', async () => {
    const { connections, answers, activated } = activate();
    answers.set('kernelblaster.init', { written: true, message: 'Wrote relu.cu: verified', path: '/ws/relu.cu' });
    await activated.started;
    const document = makeDocument('/ws/relu.py', 'class Model: ...\n', 'python');
    document.isDirty = true;
    mock.activeTextEditor = { document, selection: { active: { line: 0, character: 0 } } };
    await command('kernelblaster.writeKernel');
    assert.equal(document.saves, 1);
    assert.deepEqual(connections[0].requests, [
      { command: 'kernelblaster.init', args: [{ uri: 'file:///ws/relu.py', replace: false }] },
    ]);
    // The server shows the outcome and opens the kernel: the client only logs it.
    assert.deepEqual(mock.messages, []);
    assert.ok(mock.outputLines.includes('Write kernel for relu.py: Wrote relu.cu: verified'));
  });

  it('replaces an existing kernel only after a modal confirmation', async () => {
    const { connections, answers, activated } = activate();
    answers.set('kernelblaster.init', { written: false, message: 'No relu.cu written: no GPU', path: null });
    await activated.started;
    mock.files.add('/ws/relu.cu');
    const document = makeDocument('/ws/relu.py', 'class Model: ...\n', 'python');
    mock.activeTextEditor = { document, selection: { active: { line: 0, character: 0 } } };
    await command('kernelblaster.writeKernel');
    assert.deepEqual(connections[0].requests, [], 'dismissed: nothing is asked of the server');
    assert.deepEqual(mock.messages, [
      {
        level: 'warning',
        text: 'relu.cu exists. Replace it with a new CUDA kernel written for relu.py? It is replaced only once the new kernel is verified.',
        items: ['Replace'],
        modal: true,
      },
    ]);
    mock.answers.push({ prefix: 'relu.cu exists', item: 'Replace' });
    await command('kernelblaster.writeKernel');
    assert.deepEqual(connections[0].requests, [
      { command: 'kernelblaster.init', args: [{ uri: 'file:///ws/relu.py', replace: true }] },
    ]);
    assert.ok(mock.outputLines.includes('Write kernel for relu.py: No relu.cu written: no GPU'));
  });

  it('writes kernels from Python files only, in a trusted workspace, and reports a bad answer', async () => {
    const { connections, answers, activated } = activate();
    answers.set('kernelblaster.init', { written: 'yes' });
    await activated.started;
    openEditor(0);
    await command('kernelblaster.writeKernel');
    assert.deepEqual(messages('warning'), [
      'Open a PyTorch reference (a .py with class Model, get_inputs() and get_init_inputs()) to write a CUDA kernel for it.',
    ]);
    mock.activeTextEditor = { document: makeDocument('/ws/relu.py', '', 'python'), selection: { active: { line: 0, character: 0 } } };
    mock.trusted = false;
    await command('kernelblaster.writeKernel');
    assert.ok(messages('warning')[1].startsWith("KernelBlaster can't write a kernel in Restricted Mode"));
    assert.deepEqual(connections[0].requests, []);
    mock.trusted = true;
    await command('kernelblaster.writeKernel');
    assert.deepEqual(messages('error'), [
      'KernelBlaster: Write kernel failed: the server answered {"written":"yes"} instead of {"written", "message", "path"}',
    ]);
  });

  it('needs a CUDA editor for the file commands', async () => {
    const { connections, activated } = activate();
    await activated.started;
    mock.activeTextEditor = { document: makeDocument('/ws/a.py', 'x = 1', 'python'), selection: { active: { line: 0, character: 0 } } };
    await command('kernelblaster.profileFile');
    assert.deepEqual(connections[0].requests, []);
    assert.deepEqual(messages('warning'), ['Open a CUDA file (.cu) to profile it with KernelBlaster.']);
  });

  it('shows the knowledge base in one webview, reused, whose links open kernels and diffs', async () => {
    const { answers, connections, activated } = activate();
    answers.set('kernelblaster.knowledgeBase', KB_ANSWER);
    await activated.started;
    await command('kernelblaster.showKnowledgeBase');
    assert.equal(mock.panels.length, 1);
    const [panel] = mock.panels;
    assert.equal(panel.title, 'KernelBlaster Knowledge Base');
    assert.match(panel.webview.html, /Coalesce global memory accesses/);
    assert.deepEqual(panel.options, { enableScripts: true, localResourceRoots: [] });

    panel.post({ type: 'openKernel', uri: 'file:///ws/softmax.cu', line: 4 });
    panel.post({ type: 'openDiff', source: 'file:///ws/softmax.cu', candidate: 'file:///ws/b.cu', kernel: 'k' });
    panel.post({ type: 'openKernel', uri: 'https://example.com/x', line: 1 }); // not a file: ignored
    panel.post({ type: 'refresh' });
    await new Promise((resolve) => setImmediate(resolve));
    const opened = mock.executed.filter((e) => e.command === '<showTextDocument>');
    assert.deepEqual(
      opened.map((e) => [String(e.args[0]), (e.args[1] as { selection: { start: { line: number } } }).selection.start.line]),
      [['file:///ws/softmax.cu', 4]],
    );
    const diff = mock.executed.find((e) => e.command === 'vscode.diff');
    assert.deepEqual(diff?.args.map(String), ['file:///ws/softmax.cu', 'file:///ws/b.cu', 'k: source ↔ best verified candidate']);
    // refresh asked the server again and re-rendered the same panel
    assert.equal(connections[0].requests.filter((r) => r.command === 'kernelblaster.knowledgeBase').length, 2);
    assert.equal(mock.panels.length, 1);
    assert.equal(panel.reveals, 2);

    panel.dispose();
    await command('kernelblaster.showKnowledgeBase');
    assert.equal(mock.panels.length, 2, 'a closed view is opened anew');
  });

  it('reports a malformed server answer and a server error, but not a cancellation', async () => {
    const { answers, activated } = activate();
    await activated.started;
    answers.set('kernelblaster.knowledgeBase', { text: 'wrong' });
    await command('kernelblaster.showKnowledgeBase');
    openEditor(1);
    answers.set('kernelblaster.kernelAt', kernelAt('first'));
    answers.set('kernelblaster.optimize', Object.assign(new Error('LLM endpoint unreachable'), { code: -32603 }));
    await command('kernelblaster.optimizeAtCursor');
    answers.set('kernelblaster.profile', Object.assign(new Error('cancelled'), { code: -32800 }));
    await command('kernelblaster.profileFile');
    assert.deepEqual(messages('error'), [
      "KernelBlaster: Knowledge base failed: the server's knowledge base has no kb in the answer",
      'KernelBlaster: Optimize failed: LLM endpoint unreachable',
    ]);
    assert.ok(mock.outputLines.includes('Profile: cancelled'));
  });

  it("says the server isn't running, and why, when a command needs it", async () => {
    const { activated } = activate({ onPath: false });
    await activated.started;
    mock.messages.length = 0;
    await command('kernelblaster.showKnowledgeBase');
    assert.deepEqual(messages('error'), [
      "KernelBlaster's language server isn't running: KernelBlaster's language server is not installed. " +
        'Run: python3 -m pip install kernelblaster (or set kernelblaster.python / kernelblaster.serverCommand)',
    ]);
  });

  it('restarts the server and shows the output on request', async () => {
    const { connections, activated } = activate();
    await activated.started;
    await command('kernelblaster.restartServer');
    assert.equal(connections.length, 2);
    assert.ok(connections[0].disposed);
    await command('kernelblaster.showOutput');
    assert.equal(mock.outputShown, 1);
    assert.equal(mock.statusItems[0].command, 'kernelblaster.showOutput');
  });
});

describe('status bar', () => {
  it('follows jobStatus notifications of the current server only', async () => {
    const { connections, activated } = activate();
    await activated.started;
    const events = connections[0].events;
    events.onJobStatus({ uri: 'file:///ws/softmax.cu', running: true, phase: 'profiling', message: '' });
    assert.equal(statusText(), '$(sync~spin) softmax.cu: profiling');
    events.onJobStatus({ uri: 'file:///ws/softmax.cu', running: false, phase: 'done', message: 'softmax: memory-bound, 0.41 ms' });
    assert.equal(statusText(), '$(zap) softmax.cu: softmax: memory-bound, 0.41 ms');
    events.onServerPhase('stopped');
    assert.equal(statusText(), '$(debug-disconnect) KernelBlaster: stopped');
    events.onServerPhase('running');

    await command('kernelblaster.restartServer');
    events.onJobStatus({ uri: 'file:///ws/old.cu', running: true, phase: 'stale', message: '' });
    assert.equal(statusText(), '$(zap) softmax.cu: softmax: memory-bound, 0.41 ms', 'the old server is ignored');
  });
});
