// Loaded with `node --require` before the tests: makes `require('vscode')` load the mock.

import Module from 'node:module';

type Resolve = (request: string, ...rest: unknown[]) => string;

const loader = Module as unknown as { _resolveFilename: Resolve };
const resolveFilename = loader._resolveFilename;
const mockPath = require.resolve('./vscode');

loader._resolveFilename = function (this: unknown, request: string, ...rest: unknown[]): string {
  return request === 'vscode' ? mockPath : resolveFilename.call(this, request, ...rest);
};
