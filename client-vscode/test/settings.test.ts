import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { answerConfigurationItems, type ConfigurationReader, serverSettings } from '../src/settings';

/** A configuration where `user` holds the values the user set; everything else is a default. */
function configuration(user: Record<string, unknown>, defaults: Record<string, unknown> = {}): ConfigurationReader {
  return {
    get: (key) => (key in user ? user[key] : defaults[key]),
    inspect: (key) => ({ globalValue: user[key] }),
  };
}

describe('settings mapping', () => {
  it('sends only the server keys the user set, never the editor defaults', () => {
    const { settings, problems } = serverSettings(
      configuration(
        { llmBaseUrl: 'http://localhost:8000/v1', rollouts: 8, ncuDepth: 'full', arch: 'sm_90' },
        { llmModel: 'gpt-4o', depth: 3, gpuIndex: 0 },
      ),
    );
    assert.deepEqual(settings, {
      llmBaseUrl: 'http://localhost:8000/v1',
      ncuDepth: 'full',
      arch: 'sm_90',
      rollouts: 8,
    });
    assert.deepEqual(problems, []);
  });

  it('counts workspace, folder and language-specific values as set', () => {
    const reader: ConfigurationReader = {
      get: (key) => ({ topK: 5, kbPath: '/kb.sqlite', gpuIndex: 1 })[key],
      inspect: (key) =>
        ({
          topK: { workspaceValue: 5 },
          kbPath: { workspaceFolderValue: '/kb.sqlite' },
          gpuIndex: { globalLanguageValue: 1 },
        })[key],
    };
    assert.deepEqual(serverSettings(reader).settings, { topK: 5, kbPath: '/kb.sqlite', gpuIndex: 1 });
  });

  it('treats null and empty strings as unset', () => {
    const { settings } = serverSettings(configuration({ llmBaseUrl: '', arch: null, nvcc: '/usr/local/cuda/bin/nvcc' }));
    assert.deepEqual(settings, { nvcc: '/usr/local/cuda/bin/nvcc' });
  });

  it('never sends client-only settings', () => {
    const { settings } = serverSettings(
      configuration({ serverCommand: ['kb', 'serve'], python: '/usr/bin/python3', 'trace.server': 'verbose', llmModel: 'qwen' }),
    );
    assert.deepEqual(settings, { llmModel: 'qwen' });
  });

  it('leaves out values of the wrong type and says which and why', () => {
    const { settings, problems } = serverSettings(
      configuration({ rollouts: 2.5, depth: 0, ncuDepth: 'deep', buildTimeoutS: -1, llmModel: 7, runTimeoutS: 30 }),
    );
    assert.deepEqual(settings, { runTimeoutS: 30 });
    assert.deepEqual(problems, [
      'kernelblaster.llmModel must be a string, not 7; it was not sent to the server.',
      'kernelblaster.ncuDepth must be one of quick, full, not "deep"; it was not sent to the server.',
      'kernelblaster.rollouts must be an integer of at least 1, not 2.5; it was not sent to the server.',
      'kernelblaster.depth must be an integer of at least 1, not 0; it was not sent to the server.',
      'kernelblaster.buildTimeoutS must be a number greater than 0, not -1; it was not sent to the server.',
    ]);
  });

  it('refuses an API key pasted where the variable name goes, without repeating it', () => {
    const key = 'sk-proj-abcdefghijklmnop1234567890';
    const { settings, problems } = serverSettings(configuration({ llmApiKeyEnv: key }));
    assert.deepEqual(settings, {});
    assert.equal(problems.length, 1);
    assert.match(problems[0], /llmApiKeyEnv must be the name of an environment variable/);
    assert.ok(!problems[0].includes(key));
    assert.deepEqual(serverSettings(configuration({ llmApiKeyEnv: 'VLLM_KEY' })).settings, { llmApiKeyEnv: 'VLLM_KEY' });
  });

  it('answers workspace/configuration for the kernelblaster section with the mapped settings', () => {
    const scopes: (string | undefined)[] = [];
    const answers = answerConfigurationItems(
      [
        { section: 'kernelblaster', scopeUri: 'file:///ws/a.cu' },
        { section: 'editor' },
        { section: 'kernelblaster.rollouts' },
        { section: 'kernelblaster', scopeUri: null },
      ],
      [{ serverCommand: 'leaked', rollouts: 4 }, { tabSize: 4 }, 4, { python: 'leaked' }],
      (scope) => {
        scopes.push(scope);
        return { rollouts: 8 };
      },
    );
    assert.deepEqual(answers, [{ rollouts: 8 }, { tabSize: 4 }, 4, { rollouts: 8 }]);
    assert.deepEqual(scopes, ['file:///ws/a.cu', undefined]);
  });
});
