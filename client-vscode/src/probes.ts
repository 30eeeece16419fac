// The real look-ups behind `DiscoveryEnv`: PATH search and asking an interpreter whether it can
// run `kernelblaster serve`. Node only (no VS Code), so the tests run them for real.

import { type ExecFileException, execFile } from 'node:child_process';
import { constants } from 'node:fs';
import { access, stat } from 'node:fs/promises';
import * as path from 'node:path';

import type { PythonCheck } from './discovery';

export interface ProbeEnvironment {
  readonly env: NodeJS.ProcessEnv;
  readonly platform: NodeJS.Platform;
}

const HOST: ProbeEnvironment = { env: process.env, platform: process.platform };

/** The path of an executable file: `name` itself when it contains a directory part, otherwise
 * the first match on PATH (with PATHEXT's extensions on Windows). */
export async function findExecutable(
  name: string,
  host: ProbeEnvironment = HOST,
): Promise<string | undefined> {
  const extensions =
    host.platform === 'win32'
      ? ['', ...(host.env.PATHEXT ?? '.COM;.EXE;.BAT;.CMD').split(';').filter((ext) => ext !== '')]
      : [''];
  const pathModule = host.platform === 'win32' ? path.win32 : path.posix;
  if (name.includes('/') || (host.platform === 'win32' && name.includes('\\'))) {
    return firstExecutable(extensions.map((ext) => pathModule.resolve(name + ext)), host);
  }
  const directories = (host.env.PATH ?? host.env.Path ?? '')
    .split(pathModule.delimiter)
    .filter((directory) => directory !== '');
  return firstExecutable(
    directories.flatMap((directory) => extensions.map((ext) => pathModule.join(directory, name + ext))),
    host,
  );
}

async function firstExecutable(
  candidates: readonly string[],
  host: ProbeEnvironment,
): Promise<string | undefined> {
  for (const candidate of candidates) {
    if (await isExecutableFile(candidate, host)) {
      return candidate;
    }
  }
  return undefined;
}

async function isExecutableFile(candidate: string, host: ProbeEnvironment): Promise<boolean> {
  try {
    if (!(await stat(candidate)).isFile()) {
      return false;
    }
    // Windows has no execute bit; existence with a PATHEXT extension is what counts there.
    await access(candidate, host.platform === 'win32' ? constants.F_OK : constants.X_OK);
    return true;
  } catch {
    // stat/access failing (missing, no permission) is exactly "not a runnable candidate".
    return false;
  }
}

/**
 * Runs `<python> -m kernelblaster serve --help`: the very command the extension will start,
 * so an interpreter without the package, or with one too old to have `serve`, is caught here.
 */
export function checkPython(
  python: string,
  host: ProbeEnvironment = HOST,
  timeoutMs = 20_000,
): Promise<PythonCheck> {
  return new Promise((resolve) => {
    execFile(
      python,
      ['-m', 'kernelblaster', 'serve', '--help'],
      { env: host.env, timeout: timeoutMs, windowsHide: true },
      (error, _stdout, stderr) => {
        if (error === null) {
          resolve({ ok: true });
          return;
        }
        resolve({ ok: false, ...explainFailure(error, stderr, timeoutMs) });
      },
    );
  });
}

function explainFailure(
  error: ExecFileException,
  stderr: string,
  timeoutMs: number,
): { missingPackage: boolean; detail: string } {
  if (error.code === 'ENOENT') {
    return { missingPackage: false, detail: 'no such interpreter' };
  }
  if (error.code === 'EACCES') {
    return { missingPackage: false, detail: 'not executable' };
  }
  if (error.killed === true) {
    return { missingPackage: false, detail: `no answer within ${String(timeoutMs / 1000)} s` };
  }
  if (/No module named '?kernelblaster'?/.test(stderr)) {
    return { missingPackage: true, detail: 'No module named kernelblaster' };
  }
  if (/invalid choice: '?serve'?/.test(stderr)) {
    return {
      missingPackage: false,
      detail: 'the installed kernelblaster has no `serve` command; upgrade it',
    };
  }
  const lastLine = stderr
    .split(/\r?\n/)
    .map((line) => line.trim())
    .filter((line) => line !== '')
    .pop();
  return { missingPackage: false, detail: lastLine?.slice(0, 300) ?? `exit code ${String(error.code)}` };
}
