// package.json against the code and against docs/protocol.md: every setting the server reads is
// contributed with the documented default, every command is declared (and so activates the
// extension), and Workspace Trust is declared.

import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';

import { COMMANDS } from '../src/commands';
import { CLIENT_SETTINGS, SECTION, SERVER_SETTINGS } from '../src/settings';

const root = path.join(__dirname, '..', '..', '..');
interface Property {
  type: string | string[];
  scope?: string;
  default: unknown;
  description?: string;
  markdownDescription?: string;
  enum?: string[];
}
const manifest = JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')) as {
  name: string;
  version: string;
  main: string;
  engines: { vscode: string };
  activationEvents: string[];
  icon: string;
  repository: { url: string };
  bugs: { url: string };
  homepage: string;
  scripts: Record<string, string>;
  capabilities: { virtualWorkspaces: { supported: boolean }; untrustedWorkspaces: { supported: unknown; description: string; restrictedConfigurations: string[] } };
  contributes: {
    commands: { command: string; title: string }[];
    configuration: { properties: Record<string, Property | undefined> };
  };
};
const properties = manifest.contributes.configuration.properties;
function property(key: string): Property {
  const found = properties[`${SECTION}.${key}`];
  assert.ok(found !== undefined, `${SECTION}.${key} is contributed`);
  return found;
}

/** The settings table of docs/protocol.md: key → documented default. */
function documentedDefaults(): Map<string, unknown> {
  const doc = fs.readFileSync(path.join(root, '..', 'docs', 'protocol.md'), 'utf8');
  const table = doc.slice(doc.indexOf('## Settings'), doc.indexOf('## Commands'));
  const defaults = new Map<string, unknown>();
  for (const row of table.split('\n').filter((line) => line.startsWith('| `'))) {
    // `\|` inside a cell (`quick`\|`full`) is not a column separator.
    const [keys, , values] = row
      .replace(/\\\|/g, '/')
      .split('|')
      .slice(1)
      .map((cell) => cell.trim());
    const names = keys.split(',').map((key) => key.trim().replace(/`/g, ''));
    const parsed = values.split(',').map((value) => {
      const text = value.trim().replace(/`/g, '');
      if (text === 'null' || text === 'true' || text === 'false') {
        return JSON.parse(text) as null | boolean;
      }
      return Number.isNaN(Number(text)) ? text : Number(text);
    });
    names.forEach((name, index) => defaults.set(name, parsed[index]));
  }
  return defaults;
}

describe('package.json', () => {
  it('contributes every server setting of docs/protocol.md with its documented default', () => {
    const documented = documentedDefaults();
    assert.ok(documented.size >= 16, `parsed ${String(documented.size)} settings from docs/protocol.md`);
    assert.deepEqual(
      SERVER_SETTINGS.map((spec) => spec.key).sort(),
      [...documented.keys()].sort(),
      'settings.ts and docs/protocol.md list the same keys',
    );
    for (const [key, value] of documented) {
      const contributed = property(key);
      assert.deepEqual(contributed.default, value, `default of kernelblaster.${key}`);
      assert.ok((contributed.description ?? contributed.markdownDescription ?? '').length > 20, `${key} is described`);
      if (value === null) {
        assert.deepEqual(contributed.type, ['string', 'null'], `${key} is nullable`);
      }
    }
  });

  it('declares the settings kinds that settings.ts validates', () => {
    for (const spec of SERVER_SETTINGS) {
      const contributed = property(spec.key);
      const expected = {
        string: 'string',
        nullableString: ['string', 'null'],
        envVarName: 'string',
        positiveNumber: 'number',
        integer: 'integer',
        enum: 'string',
        boolean: 'boolean',
      }[spec.kind];
      assert.deepEqual(contributed.type, expected, spec.key);
      if (spec.kind === 'enum') {
        assert.deepEqual(contributed.enum, spec.values, spec.key);
      }
    }
  });

  it('contributes the client-only settings and nothing unknown', () => {
    const known = new Set([...SERVER_SETTINGS.map((spec) => spec.key), ...CLIENT_SETTINGS].map((key) => `${SECTION}.${key}`));
    assert.deepEqual(Object.keys(properties).filter((key) => !known.has(key)), []);
    assert.deepEqual(property('serverCommand').type, ['array', 'string']);
    assert.deepEqual(property('trace.server').enum, ['off', 'messages', 'verbose']);
  });

  it('declares every command, which also makes each one activate the extension', () => {
    assert.deepEqual(
      manifest.contributes.commands.map((c) => c.command).sort(),
      Object.values(COMMANDS).sort(),
    );
    assert.deepEqual(manifest.activationEvents, ['onLanguage:cuda-cpp', 'workspaceContains:**/kernelblaster.toml']);
  });

  it('declares limited support for untrusted workspaces and restricts the launch and tool paths', () => {
    const trust = manifest.capabilities.untrustedWorkspaces;
    assert.equal(trust.supported, 'limited');
    assert.match(trust.description, /builds and runs nothing/);
    for (const key of ['serverCommand', 'python', 'nvcc', 'ncuPath', 'llmBaseUrl', 'llmApiKeyEnv']) {
      assert.ok(trust.restrictedConfigurations.includes(`${SECTION}.${key}`), key);
    }
  });

  it('lets the tool paths be set per machine (remote use) and runs on local files only', () => {
    for (const key of ['serverCommand', 'python', 'nvcc', 'ncuPath']) {
      assert.equal(property(key).scope, 'machine-overridable', key);
    }
    assert.equal(manifest.capabilities.virtualWorkspaces.supported, false);
  });

  it('has what the Marketplace shows: icon, repository, issues, home page, changelog', () => {
    assert.ok(fs.existsSync(path.join(root, manifest.icon)), manifest.icon);
    assert.match(manifest.repository.url, /^https:\/\//);
    assert.match(manifest.bugs.url, /\/issues$/);
    assert.match(manifest.homepage, /^https:\/\//);
    assert.match(fs.readFileSync(path.join(root, 'CHANGELOG.md'), 'utf8'), new RegExp(`## ${manifest.version.replace(/\./g, '\\.')}`));
    assert.doesNotMatch(manifest.scripts.package, /allow-missing-repository/);
  });

  it('has what vsce needs to package kernelblaster-<version>.vsix', () => {
    assert.equal(manifest.name, 'kernelblaster');
    assert.equal(manifest.version, '0.1.0');
    assert.equal(manifest.main, './out/extension.js');
    assert.match(manifest.engines.vscode, /^\^1\.\d+\.\d+$/);
    assert.ok(fs.existsSync(path.join(root, 'LICENSE')));
    assert.ok(fs.existsSync(path.join(root, 'README.md')));
  });
});
