import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { describe, it } from 'node:test';

import {
  type DiscoveryEnv,
  discoverServer,
  installCommand,
  parseServerCommand,
  type PythonCheck,
} from '../src/discovery';
import { checkPython, findExecutable } from '../src/probes';

const MISSING: PythonCheck = { ok: false, missingPackage: true, detail: 'No module named kernelblaster' };

/** A discovery environment where nothing is installed unless a test says so. */
function environment(overrides: Partial<DiscoveryEnv> = {}): DiscoveryEnv & { checked: string[] } {
  const checked: string[] = [];
  return {
    serverCommand: [],
    python: '',
    pythonExtensionInterpreter: () => Promise.resolve(undefined),
    findExecutable: () => Promise.resolve(undefined),
    checkPython: (python) => {
      checked.push(python);
      return Promise.resolve(MISSING);
    },
    defaultPython: 'python3',
    workspaceFolder: '/ws',
    home: '/home/me',
    checked,
    ...overrides,
  };
}

const installed = (...paths: string[]) => (name: string) =>
  Promise.resolve(paths.find((p) => p === name || p.endsWith(`/${name}`)));

describe('server discovery', () => {
  it('uses kernelblaster.serverCommand first, resolving the program and expanding variables', async () => {
    const result = await discoverServer(
      environment({
        serverCommand: ['${workspaceFolder}/venv/bin/python', '-m', 'kernelblaster', 'serve'],
        python: '/usr/bin/python3',
        findExecutable: installed('/ws/venv/bin/python'),
      }),
    );
    assert.ok(result.ok);
    assert.deepEqual(result.launch, {
      command: '/ws/venv/bin/python',
      args: ['-m', 'kernelblaster', 'serve'],
      origin: 'serverCommand',
    });
  });

  it('splits a string serverCommand like a shell, keeping quoted spaces', () => {
    assert.deepEqual(parseServerCommand('"/opt/my tools/kb" serve --log "a b"'), [
      '/opt/my tools/kb',
      'serve',
      '--log',
      'a b',
    ]);
    assert.equal(parseServerCommand('   '), undefined);
    assert.equal(parseServerCommand([]), undefined);
    assert.throws(() => parseServerCommand([1, 2]), /array of strings/);
    assert.throws(() => parseServerCommand({ command: 'x' }), /string or an array of strings/);
  });

  it('reports a serverCommand whose program is missing instead of trying anything else', async () => {
    const env = environment({
      serverCommand: 'kb-server serve',
      findExecutable: installed('/usr/bin/kernelblaster'),
    });
    const result = await discoverServer(env);
    assert.equal(result.ok, false);
    assert.ok(!result.ok);
    assert.match(result.message, /kernelblaster\.serverCommand: "kb-server" was not found/);
    assert.deepEqual(env.checked, []);
  });

  it('reports malformed launch settings', async () => {
    const command = await discoverServer(environment({ serverCommand: 42 }));
    assert.ok(!command.ok);
    assert.match(command.message, /serverCommand must be a string or an array of strings; got 42/);
    const python = await discoverServer(environment({ python: ['python3'] }));
    assert.ok(!python.ok);
    assert.match(python.message, /kernelblaster\.python must be the path of a Python interpreter; got \["python3"\]/);
  });

  it('runs `<python> -m kernelblaster serve` for kernelblaster.python when it has the package', async () => {
    const env = environment({
      python: '~/venv/bin/python',
      checkPython: (python) => Promise.resolve(python === '/home/me/venv/bin/python' ? { ok: true } : MISSING),
    });
    const result = await discoverServer(env);
    assert.ok(result.ok);
    assert.deepEqual(result.launch, {
      command: '/home/me/venv/bin/python',
      args: ['-m', 'kernelblaster', 'serve'],
      origin: 'python',
    });
  });

  it('names the configured interpreter in the fix when it lacks the package', async () => {
    const env = environment({
      python: '/opt/py/bin/python',
      pythonExtensionInterpreter: () => Promise.resolve('/ext/python'),
      findExecutable: installed('/usr/bin/kernelblaster'),
    });
    const result = await discoverServer(env);
    assert.ok(!result.ok);
    assert.equal(
      result.message,
      'KernelBlaster is not installed in /opt/py/bin/python (kernelblaster.python). ' +
        'Run: /opt/py/bin/python -m pip install kernelblaster',
    );
    assert.equal(result.fixCommand, '/opt/py/bin/python -m pip install kernelblaster');
    assert.deepEqual(env.checked, ['/opt/py/bin/python'], 'an explicit setting is not bypassed');
  });

  it('says when the configured interpreter cannot run at all', async () => {
    const result = await discoverServer(
      environment({
        python: '/nope/python',
        checkPython: () => Promise.resolve({ ok: false, missingPackage: false, detail: 'no such interpreter' }),
      }),
    );
    assert.ok(!result.ok);
    assert.match(result.message, /kernelblaster\.python: "\/nope\/python" can't run the server \(no such interpreter\)/);
  });

  it("uses the Python extension's interpreter when no setting is given", async () => {
    const env = environment({
      pythonExtensionInterpreter: () => Promise.resolve('/proj/.venv/bin/python'),
      checkPython: (python) => Promise.resolve(python === '/proj/.venv/bin/python' ? { ok: true } : MISSING),
      findExecutable: installed('/usr/local/bin/kernelblaster'),
    });
    const result = await discoverServer(env);
    assert.ok(result.ok);
    assert.deepEqual(result.launch, {
      command: '/proj/.venv/bin/python',
      args: ['-m', 'kernelblaster', 'serve'],
      origin: 'pythonExtension',
    });
  });

  it('falls back to kernelblaster on PATH when the extension interpreter lacks the package', async () => {
    const env = environment({
      pythonExtensionInterpreter: () => Promise.resolve('/proj/.venv/bin/python'),
      findExecutable: installed('/usr/local/bin/kernelblaster'),
    });
    const result = await discoverServer(env);
    assert.ok(result.ok);
    assert.deepEqual(result.launch, { command: '/usr/local/bin/kernelblaster', args: ['serve'], origin: 'path' });
    assert.deepEqual(result.tried, [
      { origin: 'pythonExtension', detail: '/proj/.venv/bin/python: No module named kernelblaster' },
    ]);
  });

  it('records a failing Python extension and goes on to PATH', async () => {
    const result = await discoverServer(
      environment({
        pythonExtensionInterpreter: () => Promise.reject(new Error('activation failed')),
        findExecutable: installed('/usr/bin/kernelblaster'),
      }),
    );
    assert.ok(result.ok);
    assert.equal(result.launch.origin, 'path');
    assert.deepEqual(result.tried, [{ origin: 'pythonExtension', detail: 'Python extension failed: activation failed' }]);
  });

  it('with nothing installed, tells which interpreter to pip install into', async () => {
    const withExtension = await discoverServer(
      environment({ pythonExtensionInterpreter: () => Promise.resolve('/proj/.venv/bin/python') }),
    );
    assert.ok(!withExtension.ok);
    assert.equal(
      withExtension.message,
      "KernelBlaster's language server is not installed. Run: /proj/.venv/bin/python -m pip install " +
        'kernelblaster (or set kernelblaster.python / kernelblaster.serverCommand)',
    );
    assert.deepEqual(
      withExtension.tried.map((t) => t.origin),
      ['pythonExtension', 'path'],
    );

    const bare = await discoverServer(environment());
    assert.ok(!bare.ok);
    assert.equal(bare.fixCommand, 'python3 -m pip install kernelblaster');
  });

  it('quotes an interpreter path with spaces in the fix', () => {
    assert.equal(
      installCommand('C:\\Program Files\\Python312\\python.exe'),
      '"C:\\\\Program Files\\\\Python312\\\\python.exe" -m pip install kernelblaster',
    );
    assert.equal(installCommand('/usr/bin/python3'), '/usr/bin/python3 -m pip install kernelblaster');
  });
});

describe('process probes', { skip: process.platform === 'win32' && 'POSIX shell scripts' }, () => {
  const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-probes-'));
  const bin = path.join(scratch, 'bin');
  fs.mkdirSync(bin);
  fs.writeFileSync(path.join(bin, 'kernelblaster'), '#!/bin/sh\n', { mode: 0o755 });
  fs.writeFileSync(path.join(bin, 'not-executable'), 'data', { mode: 0o644 });
  const host = (env: NodeJS.ProcessEnv) => ({ env, platform: process.platform });

  it('finds an executable on PATH and skips non-executable files', async () => {
    const env = { PATH: ['/nonexistent', bin].join(path.delimiter) };
    assert.equal(await findExecutable('kernelblaster', host(env)), path.join(bin, 'kernelblaster'));
    assert.equal(await findExecutable('not-executable', host(env)), undefined);
    assert.equal(await findExecutable('kernelblaster', host({ PATH: '/nonexistent' })), undefined);
    assert.equal(await findExecutable(path.join(bin, 'kernelblaster'), host({})), path.join(bin, 'kernelblaster'));
  });

  // A real interpreter, with and without a `kernelblaster` package on its path. `-S` keeps out
  // site-packages, where a kernelblaster may really be installed (CI's virtual environment).
  const python = path.join(bin, 'isolated-python');
  fs.writeFileSync(python, '#!/bin/sh\nexec python3 -S "$@"\n', { mode: 0o755 });
  const site = path.join(scratch, 'site');
  fs.mkdirSync(path.join(site, 'kernelblaster'), { recursive: true });
  fs.writeFileSync(path.join(site, 'kernelblaster', '__init__.py'), '');
  fs.writeFileSync(
    path.join(site, 'kernelblaster', '__main__.py'),
    'import sys\nif sys.argv[1:] != ["serve", "--help"]:\n    sys.exit("usage: kernelblaster: invalid choice: \'serve\'")\n',
  );
  const oldSite = path.join(scratch, 'old-site');
  fs.mkdirSync(path.join(oldSite, 'kernelblaster'), { recursive: true });
  fs.writeFileSync(path.join(oldSite, 'kernelblaster', '__init__.py'), '');
  fs.writeFileSync(
    path.join(oldSite, 'kernelblaster', '__main__.py'),
    'import sys\nsys.exit("kernelblaster: error: argument COMMAND: invalid choice: \'serve\'")\n',
  );
  const withPath = (pythonPath: string) => host({ ...process.env, PYTHONPATH: pythonPath, PYTHONNOUSERSITE: '1' });

  it('accepts an interpreter that can run `-m kernelblaster serve`', async () => {
    assert.deepEqual(await checkPython(python, withPath(site)), { ok: true });
  });

  it('recognises a missing package, an outdated one and a missing interpreter', async () => {
    assert.deepEqual(await checkPython(python, withPath(path.join(scratch, 'empty'))), MISSING);
    const outdated = await checkPython(python, withPath(oldSite));
    assert.deepEqual(outdated, {
      ok: false,
      missingPackage: false,
      detail: 'the installed kernelblaster has no `serve` command; upgrade it',
    });
    assert.deepEqual(await checkPython(path.join(scratch, 'no-python'), withPath(site)), {
      ok: false,
      missingPackage: false,
      detail: 'no such interpreter',
    });
  });
});
