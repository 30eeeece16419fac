// Finding the command that starts `kernelblaster serve`. Pure: every look-up the search needs
// (PATH, the Python extension, running an interpreter) comes in through `DiscoveryEnv`, so the
// order and the messages are unit-tested without VS Code or a real Python.

import { parseArgsStringToArgv } from 'string-argv';

/** Where a launch command came from, in the order they are tried. */
export type LaunchOrigin = 'serverCommand' | 'python' | 'pythonExtension' | 'path';

export interface ServerLaunch {
  readonly command: string;
  readonly args: readonly string[];
  readonly origin: LaunchOrigin;
}

/** One candidate that was looked at and not used, with the reason (for the output channel). */
export interface Attempt {
  readonly origin: LaunchOrigin;
  readonly detail: string;
}

/** The result of running `<python> -m kernelblaster serve --help`. */
export type PythonCheck =
  | { readonly ok: true }
  | { readonly ok: false; readonly missingPackage: boolean; readonly detail: string };

export interface DiscoveryEnv {
  /** `kernelblaster.serverCommand`: argv array, or one command line as a string. */
  readonly serverCommand: unknown;
  /** `kernelblaster.python`: an interpreter path or command. */
  readonly python: unknown;
  /** The Python extension's active interpreter; undefined when the extension or an interpreter
   * is missing. May reject (the extension failed to activate). */
  readonly pythonExtensionInterpreter: () => Promise<string | undefined>;
  /** An absolute path for `name` (a bare name is looked up on PATH), undefined if not runnable. */
  readonly findExecutable: (name: string) => Promise<string | undefined>;
  readonly checkPython: (python: string) => Promise<PythonCheck>;
  /** The interpreter named in the install hint when no other is known (`python3`, `python`). */
  readonly defaultPython: string;
  /** Substituted for `${workspaceFolder}` in the two settings. */
  readonly workspaceFolder: string | undefined;
  /** Substituted for a leading `~`. */
  readonly home: string;
}

export type Discovery =
  | { readonly ok: true; readonly launch: ServerLaunch; readonly tried: readonly Attempt[] }
  | {
      readonly ok: false;
      readonly tried: readonly Attempt[];
      /** The one-line notification: what is wrong and how to fix it. */
      readonly message: string;
      /** A shell command that fixes it, when there is one (offered for copying). */
      readonly fixCommand: string | undefined;
    };

/** A launch setting with an unusable value; the message says which and what is expected. */
export class SettingError extends Error {}

export const SERVE_ARGS: readonly string[] = ['-m', 'kernelblaster', 'serve'];

/**
 * The settings win when set: a broken explicit setting is reported, never silently skipped in
 * favour of some other installation. The automatic candidates (the Python extension's
 * interpreter, then `kernelblaster` on PATH) fall through to the next.
 */
export async function discoverServer(env: DiscoveryEnv): Promise<Discovery> {
  const tried: Attempt[] = [];
  let argv: string[] | undefined;
  let configuredPython: string | undefined;
  try {
    argv = parseServerCommand(env.serverCommand);
    configuredPython = parsePythonSetting(env.python);
  } catch (error) {
    if (error instanceof SettingError) {
      return failure(tried, error.message, undefined);
    }
    throw error;
  }
  if (argv !== undefined) {
    const [program, ...args] = argv.map((part) => expandVariables(part, env));
    const resolved = await env.findExecutable(program);
    if (resolved === undefined) {
      return failure(
        [...tried, { origin: 'serverCommand', detail: `${program}: not found` }],
        `kernelblaster.serverCommand: "${program}" was not found or is not executable. ` +
          'Set it to an absolute path or a command on PATH.',
        undefined,
      );
    }
    return { ok: true, launch: { command: resolved, args, origin: 'serverCommand' }, tried };
  }

  if (configuredPython !== undefined) {
    const python = expandVariables(configuredPython, env);
    const check = await env.checkPython(python);
    if (check.ok) {
      return { ok: true, launch: { command: python, args: SERVE_ARGS, origin: 'python' }, tried };
    }
    tried.push({ origin: 'python', detail: `${python}: ${check.detail}` });
    const fixCommand = installCommand(python);
    const message = check.missingPackage
      ? `KernelBlaster is not installed in ${python} (kernelblaster.python). Run: ${fixCommand}`
      : `kernelblaster.python: "${python}" can't run the server (${check.detail}). ` +
        `Point it at a Python 3.11+ interpreter and run: ${fixCommand}`;
    return failure(tried, message, fixCommand);
  }

  let extensionPython: string | undefined;
  try {
    extensionPython = await env.pythonExtensionInterpreter();
    if (extensionPython === undefined) {
      tried.push({ origin: 'pythonExtension', detail: 'no Python extension interpreter selected' });
    }
  } catch (error) {
    tried.push({ origin: 'pythonExtension', detail: `Python extension failed: ${describe(error)}` });
  }
  if (extensionPython !== undefined) {
    const check = await env.checkPython(extensionPython);
    if (check.ok) {
      return {
        ok: true,
        launch: { command: extensionPython, args: SERVE_ARGS, origin: 'pythonExtension' },
        tried,
      };
    }
    tried.push({ origin: 'pythonExtension', detail: `${extensionPython}: ${check.detail}` });
  }

  const onPath = await env.findExecutable('kernelblaster');
  if (onPath !== undefined) {
    return { ok: true, launch: { command: onPath, args: ['serve'], origin: 'path' }, tried };
  }
  tried.push({ origin: 'path', detail: 'kernelblaster: not found on PATH' });

  const fixCommand = installCommand(extensionPython ?? env.defaultPython);
  return failure(
    tried,
    "KernelBlaster's language server is not installed. Run: " +
      `${fixCommand} (or set kernelblaster.python / kernelblaster.serverCommand)`,
    fixCommand,
  );
}

/**
 * `kernelblaster.serverCommand` as argv: an array of strings, or one command line split the way
 * a shell would (quotes group). Undefined when the setting is unset or empty.
 */
export function parseServerCommand(value: unknown): string[] | undefined {
  if (value === undefined || value === null) {
    return undefined;
  }
  if (typeof value === 'string') {
    const argv = parseArgsStringToArgv(value);
    return argv.length === 0 ? undefined : argv;
  }
  if (Array.isArray(value)) {
    if (value.length === 0) {
      return undefined;
    }
    if (!value.every((part): part is string => typeof part === 'string') || value[0] === '') {
      throw new SettingError(
        'kernelblaster.serverCommand must be a command line or an array of strings whose first ' +
          `element is the program, e.g. ["/path/to/python", "-m", "kernelblaster", "serve"]; got ${JSON.stringify(value)}`,
      );
    }
    return [...value];
  }
  throw new SettingError(
    `kernelblaster.serverCommand must be a string or an array of strings; got ${JSON.stringify(value)}`,
  );
}

/** `<python> -m pip install kernelblaster`, with the interpreter quoted when it needs it. */
export function installCommand(python: string): string {
  return `${shellQuote(python)} -m pip install kernelblaster`;
}

function shellQuote(word: string): string {
  return /^[\w@%+=:,./\\-]+$/.test(word) ? word : `"${word.replace(/(["\\$`])/g, '\\$1')}"`;
}

function expandVariables(value: string, env: DiscoveryEnv): string {
  let expanded = value;
  if (env.workspaceFolder !== undefined) {
    expanded = expanded.split('${workspaceFolder}').join(env.workspaceFolder);
  }
  if (expanded === '~' || expanded.startsWith('~/')) {
    expanded = env.home + expanded.slice(1);
  }
  return expanded;
}

/** `kernelblaster.python`: undefined when unset or empty. */
export function parsePythonSetting(value: unknown): string | undefined {
  if (value === undefined || value === null || value === '') {
    return undefined;
  }
  if (typeof value !== 'string') {
    throw new SettingError(
      `kernelblaster.python must be the path of a Python interpreter; got ${JSON.stringify(value)}`,
    );
  }
  return value;
}

function failure(tried: Attempt[], message: string, fixCommand: string | undefined): Discovery {
  return { ok: false, tried, message, fixCommand };
}

function describe(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
