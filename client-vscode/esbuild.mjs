// Bundles the extension and its runtime dependencies into one file; `vscode` is provided by
// the editor at run time.
import process from 'node:process';

import { build } from 'esbuild';

await build({
  entryPoints: ['src/extension.ts'],
  outfile: 'out/extension.js',
  bundle: true,
  platform: 'node',
  format: 'cjs',
  target: 'node18',
  external: ['vscode'],
  // --minify: the packaged build (no source map: it isn't shipped).
  sourcemap: !process.argv.includes('--minify'),
  minify: process.argv.includes('--minify'),
  logLevel: 'info',
});
