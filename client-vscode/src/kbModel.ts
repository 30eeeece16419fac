// The answer to `kernelblaster.knowledgeBase` (docs/protocol.md): the knowledge base as
// `kernelblaster kb show --json` prints it, plus this workspace's part of it. Checked here, once,
// so the view renders only what has the documented shape.

export interface Measurement {
  readonly time: number;
  readonly kernel: string;
  readonly predicted_speedup: number;
  readonly measured_speedup: number;
  readonly outcome: string;
}

/** One (arch, state, technique) entry with its track record. */
export interface TrackRecord {
  readonly arch: string;
  readonly state: string;
  readonly technique: string;
  readonly title: string;
  readonly category: string;
  readonly attempts: number;
  readonly successes: number;
  readonly regressions: number;
  readonly failures: number;
  readonly mean_log_speedup: number | null;
  readonly predicted_speedup: number;
  readonly confidence: number;
  readonly notes: readonly string[];
  readonly prior_speedup: number | null;
  readonly prior_source: string | null;
  readonly measurements: readonly Measurement[];
  /** "proposed" (by an agent, on trial) or "promoted"; null for a catalog technique. */
  readonly proposal: string | null;
}

/** A technique an agent proposed, with where it came from and its record (kb/proposals.py). */
export interface Proposal {
  readonly technique: string;
  readonly title: string;
  readonly description: string;
  readonly how_to_apply: string;
  readonly addresses_findings: readonly string[];
  readonly prior_speedup: number;
  readonly prior_source: string;
  readonly arch: string;
  readonly state: string;
  readonly kernel: string;
  readonly model: string;
  readonly time: number;
  readonly status: string;
  readonly status_reason: string;
  readonly attempts: number;
  readonly successes: number;
  readonly regressions: number;
  readonly failures: number;
  readonly mean_speedup: number | null;
}

export interface Attempt {
  readonly id: string;
  readonly time: number;
  readonly arch: string;
  readonly kernel: string;
  readonly candidate_hash: string;
  readonly before_state: string;
  readonly after_state: string | null;
  readonly technique: string;
  readonly predicted_speedup: number;
  readonly measured_speedup: number | null;
  readonly outcome: string;
  readonly correctness_detail: string;
}

export interface KernelLink {
  readonly kernel: string;
  readonly uri: string;
  readonly line: number;
}

export interface CandidateDiff {
  readonly kernel: string;
  readonly source_uri: string;
  readonly candidate_uri: string;
  readonly speedup: number | null;
  readonly techniques: readonly string[];
  readonly diff: string;
  readonly truncated: boolean;
}

export interface KnowledgeBaseData {
  readonly kb: {
    readonly summary: { readonly path: string; readonly attempts: number; readonly techniques: number };
    readonly entries: readonly TrackRecord[];
    readonly recent_attempts: readonly Attempt[];
    readonly proposals: readonly Proposal[];
  };
  readonly workspace: {
    readonly kernels: readonly KernelLink[];
    readonly attempts: readonly Attempt[];
    readonly candidates: readonly CandidateDiff[];
  };
}

type Kind = 'string' | 'number' | 'boolean' | 'array' | 'number?' | 'string?';

const MEASUREMENT: Record<string, Kind> = {
  time: 'number',
  kernel: 'string',
  predicted_speedup: 'number',
  measured_speedup: 'number',
  outcome: 'string',
};
const TRACK_RECORD: Record<string, Kind> = {
  arch: 'string',
  state: 'string',
  technique: 'string',
  title: 'string',
  category: 'string',
  attempts: 'number',
  successes: 'number',
  regressions: 'number',
  failures: 'number',
  mean_log_speedup: 'number?',
  predicted_speedup: 'number',
  confidence: 'number',
  notes: 'array',
  prior_speedup: 'number?',
  prior_source: 'string?',
  measurements: 'array',
  proposal: 'string?',
};
const PROPOSAL: Record<string, Kind> = {
  technique: 'string',
  title: 'string',
  description: 'string',
  how_to_apply: 'string',
  addresses_findings: 'array',
  prior_speedup: 'number',
  prior_source: 'string',
  arch: 'string',
  state: 'string',
  kernel: 'string',
  model: 'string',
  time: 'number',
  status: 'string',
  status_reason: 'string',
  attempts: 'number',
  successes: 'number',
  regressions: 'number',
  failures: 'number',
  mean_speedup: 'number?',
};
const ATTEMPT: Record<string, Kind> = {
  id: 'string',
  time: 'number',
  arch: 'string',
  kernel: 'string',
  candidate_hash: 'string',
  before_state: 'string',
  after_state: 'string?',
  technique: 'string',
  predicted_speedup: 'number',
  measured_speedup: 'number?',
  outcome: 'string',
  correctness_detail: 'string',
};
const KERNEL_LINK: Record<string, Kind> = { kernel: 'string', uri: 'string', line: 'number' };
const CANDIDATE: Record<string, Kind> = {
  kernel: 'string',
  source_uri: 'string',
  candidate_uri: 'string',
  speedup: 'number?',
  techniques: 'array',
  diff: 'string',
  truncated: 'boolean',
};

/** The answer, typed; throws, saying what is wrong, when it doesn't have the documented shape. */
export function parseKnowledgeBase(answer: unknown): KnowledgeBaseData {
  const kb = field(answer, 'kb', 'the answer');
  const workspace = field(answer, 'workspace', 'the answer');
  check(field(kb, 'summary', 'kb'), { path: 'string', attempts: 'number', techniques: 'number' }, 'kb.summary');
  for (const [index, entry] of list(kb, 'entries', 'kb').entries()) {
    const where = `kb.entries[${String(index)}]`;
    check(entry, TRACK_RECORD, where);
    list(entry, 'measurements', where).forEach((m, i) => {
      check(m, MEASUREMENT, `${where}.measurements[${String(i)}]`);
    });
  }
  list(kb, 'recent_attempts', 'kb').forEach((a, i) => {
    check(a, ATTEMPT, `kb.recent_attempts[${String(i)}]`);
  });
  list(kb, 'proposals', 'kb').forEach((p, i) => {
    check(p, PROPOSAL, `kb.proposals[${String(i)}]`);
  });
  list(workspace, 'kernels', 'workspace').forEach((k, i) => {
    check(k, KERNEL_LINK, `workspace.kernels[${String(i)}]`);
  });
  list(workspace, 'attempts', 'workspace').forEach((a, i) => {
    check(a, ATTEMPT, `workspace.attempts[${String(i)}]`);
  });
  list(workspace, 'candidates', 'workspace').forEach((c, i) => {
    check(c, CANDIDATE, `workspace.candidates[${String(i)}]`);
  });
  return answer as KnowledgeBaseData;
}

function field(value: unknown, key: string, where: string): unknown {
  if (typeof value !== 'object' || value === null || !(key in value)) {
    throw new Error(`the server's knowledge base has no ${key} in ${where}`);
  }
  return (value as Record<string, unknown>)[key];
}

function list(value: unknown, key: string, where: string): unknown[] {
  const found = field(value, key, where);
  if (!Array.isArray(found)) {
    throw new Error(`the server's knowledge base has ${where}.${key} that is not a list`);
  }
  return found;
}

function check(value: unknown, shape: Record<string, Kind>, where: string): void {
  for (const [key, kind] of Object.entries(shape)) {
    const found = field(value, key, where);
    const ok =
      kind === 'array'
        ? Array.isArray(found)
        : kind.endsWith('?')
          ? found === null || typeof found === kind.slice(0, -1)
          : typeof found === kind;
    if (!ok) {
      throw new Error(`the server's knowledge base has ${where}.${key} = ${JSON.stringify(found)}, not a ${kind}`);
    }
  }
}
