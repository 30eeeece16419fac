// The status bar item as a state machine: events in (server lifecycle, Workspace Trust,
// `kernelblaster/jobStatus` notifications), text and tooltip out. Pure, so it is unit-tested.

export interface JobStatus {
  readonly uri: string;
  readonly running: boolean;
  readonly phase: string;
  /** Without the file's name, which the status bar shows beside it. */
  readonly message: string;
  /** A save's end: the status bar's text, led by the file's name and the save's delta
   * ("softmax.cu 1.33× faster · memory-bound"). */
  readonly headline?: string;
}

export type ServerPhase = 'starting' | 'running' | 'stopped' | 'notInstalled';

export interface StatusState {
  readonly server: ServerPhase;
  readonly trusted: boolean;
  /** Jobs in progress, least recently updated first. */
  readonly jobs: readonly JobStatus[];
  readonly lastResult: { readonly uri: string; readonly message: string; readonly headline?: string } | undefined;
  /** The server's setup diagnostics (e.g. PyTorch missing), as the Problems view shows them. */
  readonly setupProblems: readonly string[];
}

export type StatusEvent =
  | { readonly kind: 'server'; readonly phase: ServerPhase }
  | { readonly kind: 'trust'; readonly trusted: boolean }
  | { readonly kind: 'job'; readonly status: JobStatus }
  | { readonly kind: 'setup'; readonly problems: readonly string[] };

export interface StatusView {
  readonly text: string;
  readonly tooltip: string;
}

export function initialStatus(trusted: boolean): StatusState {
  return { server: 'starting', trusted, jobs: [], lastResult: undefined, setupProblems: [] };
}

export function reduceStatus(state: StatusState, event: StatusEvent): StatusState {
  switch (event.kind) {
    case 'server':
      // A server that is (re)starting or gone will never report the end of its old jobs.
      return event.phase === 'running'
        ? { ...state, server: 'running' }
        : { ...state, server: event.phase, jobs: [] };
    case 'trust':
      return { ...state, trusted: event.trusted };
    case 'setup':
      return { ...state, setupProblems: event.problems };
    case 'job': {
      const status = event.status;
      const others = state.jobs.filter((job) => job.uri !== status.uri);
      if (status.running) {
        return { ...state, jobs: [...others, status] };
      }
      const lastResult =
        status.message.trim() === '' ? state.lastResult : { uri: status.uri, message: status.message, headline: status.headline };
      return { ...state, jobs: others, lastResult };
    }
  }
}

const MAX_TEXT = 60;
const CLICK = 'Click to show the KernelBlaster output.';

export function renderStatus(state: StatusState): StatusView {
  const restricted = state.trusted
    ? []
    : ["Restricted mode: this workspace isn't trusted, so nothing in it is built or run."];
  const shield = state.trusted ? '' : '$(shield) ';
  const current = state.jobs.at(-1);
  if (current !== undefined) {
    const more = state.jobs.length > 1 ? ` (+${String(state.jobs.length - 1)})` : '';
    return {
      text: `$(sync~spin) ${truncate(`${fileName(current.uri)}: ${current.phase}`)}${more}`,
      tooltip: [
        ...state.jobs.map((job) => jobLine(job)),
        'Cancel from the progress notification.',
        CLICK,
      ].join('\n'),
    };
  }
  switch (state.server) {
    case 'starting':
      return { text: '$(loading~spin) KernelBlaster', tooltip: ['Starting the language server…', CLICK].join('\n') };
    case 'notInstalled':
      return {
        text: '$(error) KernelBlaster: server not found',
        tooltip: ["The language server couldn't be started; the output says what was tried.", CLICK].join('\n'),
      };
    case 'stopped':
      return {
        text: '$(debug-disconnect) KernelBlaster: stopped',
        tooltip: ["The language server isn't running. Run 'KernelBlaster: Restart Server'.", CLICK].join('\n'),
      };
    case 'running':
      break;
  }
  if (state.lastResult !== undefined) {
    const { uri, message, headline } = state.lastResult;
    return {
      text: `${shield}$(zap) ${truncate(headline ?? `${fileName(uri)}: ${message}`)}`,
      tooltip: [`${fileName(uri)}: ${message}`, ...restricted, CLICK].join('\n'),
    };
  }
  return {
    text: `${shield}$(zap) KernelBlaster`,
    tooltip: ['Ready: save a .cu file to build, verify and profile it.', ...restricted, CLICK].join('\n'),
  };
}

/** The language status item (the `{}` beside the language mode of a CUDA editor). */
export interface LanguageStatusView {
  readonly text: string;
  readonly detail: string;
  readonly severity: 'information' | 'warning' | 'error';
  readonly busy: boolean;
}

export function renderLanguageStatus(state: StatusState): LanguageStatusView {
  const busy = state.jobs.length > 0;
  switch (state.server) {
    case 'starting':
      return { text: 'KernelBlaster: starting', detail: 'language server', severity: 'information', busy: true };
    case 'notInstalled':
      return { text: 'KernelBlaster: server not found', detail: 'see the output', severity: 'error', busy: false };
    case 'stopped':
      return { text: 'KernelBlaster: stopped', detail: 'restart the server', severity: 'error', busy: false };
    case 'running':
      if (!state.trusted) {
        return { text: 'KernelBlaster: Restricted Mode', detail: 'nothing is built or run', severity: 'warning', busy };
      }
      if (state.setupProblems.length > 0) {
        // What Problems says, not "ready": a save builds but can't verify or profile.
        const more = state.setupProblems.length > 1 ? ` (+${String(state.setupProblems.length - 1)} more in Problems)` : ' (see Problems)';
        return { text: 'KernelBlaster: setup problem', detail: `${truncate(state.setupProblems[0])}${more}`, severity: 'warning', busy };
      }
      return { text: 'KernelBlaster: ready', detail: busy ? 'working' : 'builds, verifies and profiles on save', severity: 'information', busy };
  }
}

/** A `kernelblaster/jobStatus` payload, checked; undefined when it doesn't have that shape. */
export function parseJobStatus(params: unknown): JobStatus | undefined {
  if (typeof params !== 'object' || params === null) {
    return undefined;
  }
  const { uri, running, phase, message, headline } = params as Record<string, unknown>;
  if (typeof uri !== 'string' || typeof running !== 'boolean') {
    return undefined;
  }
  return {
    uri,
    running,
    phase: typeof phase === 'string' ? phase : '',
    message: typeof message === 'string' ? message : '',
    ...(typeof headline === 'string' && headline.trim() !== '' ? { headline } : {}),
  };
}

function jobLine(job: JobStatus): string {
  const detail = job.message.trim() === '' ? '' : ` — ${job.message}`;
  return `${fileName(job.uri)}: ${job.phase}${detail}`;
}

function fileName(uri: string): string {
  const path = uri.split(/[?#]/)[0];
  const name = path.slice(path.lastIndexOf('/') + 1);
  try {
    return decodeURIComponent(name);
  } catch {
    // A stray `%` that isn't an escape: the name is shown as it came.
    return name;
  }
}

function truncate(text: string): string {
  return text.length <= MAX_TEXT ? text : `${text.slice(0, MAX_TEXT - 1)}…`;
}
