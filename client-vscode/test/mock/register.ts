// Loaded with `node --require` before the tests: `require('vscode')` and
// `require('vscode-languageclient/node')` load the mocks beside this file.

import Module from 'node:module';

type Resolve = (request: string, ...rest: unknown[]) => string;

const loader = Module as unknown as { _resolveFilename: Resolve };
const resolveFilename = loader._resolveFilename;
const mocks: Record<string, string> = {
  vscode: require.resolve('./vscode'),
  'vscode-languageclient/node': require.resolve('./languageclient'),
};

loader._resolveFilename = function (this: unknown, request: string, ...rest: unknown[]): string {
  return mocks[request] ?? resolveFilename.call(this, request, ...rest);
};
