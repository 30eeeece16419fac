// Which `kernelblaster.*` settings the server reads (docs/protocol.md, "Settings") and how the
// editor's configuration becomes the object the server receives. Pure: the configuration comes
// in as a `ConfigurationReader`, which `vscode.WorkspaceConfiguration` satisfies.

export const SECTION = 'kernelblaster';

type SettingKind = 'string' | 'nullableString' | 'envVarName' | 'positiveNumber' | 'enum' | 'integer' | 'boolean';

export interface ServerSettingSpec {
  readonly key: string;
  readonly kind: SettingKind;
  /** Allowed values of an `enum`. */
  readonly values?: readonly string[];
  /** Smallest allowed value of an `integer`. */
  readonly minimum?: number;
}

/** Every key the server accepts, in the order of docs/protocol.md. */
export const SERVER_SETTINGS: readonly ServerSettingSpec[] = [
  { key: 'llmBaseUrl', kind: 'nullableString' },
  { key: 'llmModel', kind: 'string' },
  { key: 'llmApiKeyEnv', kind: 'envVarName' },
  { key: 'llmTimeoutS', kind: 'positiveNumber' },
  { key: 'ncuPath', kind: 'string' },
  { key: 'ncuDepth', kind: 'enum', values: ['quick', 'full'] },
  { key: 'nvcc', kind: 'string' },
  { key: 'arch', kind: 'nullableString' },
  { key: 'buildOnChange', kind: 'boolean' },
  { key: 'codeLens', kind: 'boolean' },
  { key: 'rollouts', kind: 'integer', minimum: 1 },
  { key: 'depth', kind: 'integer', minimum: 1 },
  { key: 'topK', kind: 'integer', minimum: 1 },
  { key: 'kbPath', kind: 'nullableString' },
  { key: 'gpuIndex', kind: 'integer', minimum: 0 },
  { key: 'buildTimeoutS', kind: 'positiveNumber' },
  { key: 'runTimeoutS', kind: 'positiveNumber' },
  { key: 'profileTimeoutS', kind: 'positiveNumber' },
  { key: 'parallelGpuJobs', kind: 'integer', minimum: 1 },
  { key: 'cacheDir', kind: 'nullableString' },
];

/** Settings only the extension reads; never sent to the server. */
export const CLIENT_SETTINGS: readonly string[] = ['serverCommand', 'python', 'trace.server'];

/** What `vscode.WorkspaceConfiguration` offers that the mapping needs. */
export interface ConfigurationReader {
  get(key: string): unknown;
  inspect(key: string):
    | {
        globalValue?: unknown;
        workspaceValue?: unknown;
        workspaceFolderValue?: unknown;
        globalLanguageValue?: unknown;
        workspaceLanguageValue?: unknown;
        workspaceFolderLanguageValue?: unknown;
      }
    | undefined;
}

export type ServerSettings = Record<string, string | number | boolean>;

export interface SettingsMapping {
  readonly settings: ServerSettings;
  /** One message per value that was left out because it can't be used. */
  readonly problems: readonly string[];
}

/**
 * The settings object for the server: only keys the user set somewhere (user, workspace,
 * folder, language-specific), so that values from kernelblaster.toml or KERNELBLASTER_*
 * variables are not overridden by the editor's defaults. Empty strings count as unset. Values of
 * the wrong type are left out and reported. Client-only settings are never included.
 */
export function serverSettings(config: ConfigurationReader): SettingsMapping {
  const settings: ServerSettings = {};
  const problems: string[] = [];
  for (const spec of SERVER_SETTINGS) {
    if (!isExplicitlySet(config.inspect(spec.key))) {
      continue;
    }
    const value = config.get(spec.key);
    if (value === undefined || value === null || value === '') {
      continue;
    }
    const problem = validate(spec, value);
    if (problem === undefined) {
      settings[spec.key] = value as string | number | boolean;
    } else {
      problems.push(`${SECTION}.${spec.key} ${problem}; it was not sent to the server.`);
    }
  }
  return { settings, problems };
}

function isExplicitlySet(inspection: ReturnType<ConfigurationReader['inspect']>): boolean {
  if (inspection === undefined) {
    return false;
  }
  return [
    inspection.globalValue,
    inspection.workspaceValue,
    inspection.workspaceFolderValue,
    inspection.globalLanguageValue,
    inspection.workspaceLanguageValue,
    inspection.workspaceFolderLanguageValue,
  ].some((value) => value !== undefined);
}

function validate(spec: ServerSettingSpec, value: unknown): string | undefined {
  switch (spec.kind) {
    case 'string':
    case 'nullableString':
      return typeof value === 'string' ? undefined : `must be a string, not ${JSON.stringify(value)}`;
    case 'envVarName':
      // Never echo this value: a user may have pasted the key itself here.
      return typeof value === 'string' && /^[A-Za-z_][A-Za-z0-9_]*$/.test(value)
        ? undefined
        : 'must be the name of an environment variable (e.g. OPENAI_API_KEY), not the API key itself';
    case 'positiveNumber':
      return typeof value === 'number' && Number.isFinite(value) && value > 0
        ? undefined
        : `must be a number greater than 0, not ${JSON.stringify(value)}`;
    case 'integer':
      return typeof value === 'number' && Number.isInteger(value) && value >= (spec.minimum ?? 0)
        ? undefined
        : `must be an integer of at least ${String(spec.minimum ?? 0)}, not ${JSON.stringify(value)}`;
    case 'enum':
      return typeof value === 'string' && (spec.values ?? []).includes(value)
        ? undefined
        : `must be one of ${(spec.values ?? []).join(', ')}, not ${JSON.stringify(value)}`;
    case 'boolean':
      return typeof value === 'boolean' ? undefined : `must be true or false, not ${JSON.stringify(value)}`;
  }
}

export interface ConfigurationItem {
  readonly section?: string | null;
  readonly scopeUri?: string | null;
}

/**
 * Answers to a `workspace/configuration` request with every item for the `kernelblaster`
 * section replaced by `read(scopeUri)`: vscode-languageclient's own answer would be the whole
 * section, client-only settings and editor defaults included. Other items keep their answer.
 */
export function answerConfigurationItems(
  items: readonly ConfigurationItem[],
  defaultAnswers: readonly unknown[],
  read: (scopeUri: string | undefined) => ServerSettings,
): unknown[] {
  return items.map((item, index) =>
    item.section === SECTION ? read(item.scopeUri ?? undefined) : defaultAnswers[index],
  );
}
