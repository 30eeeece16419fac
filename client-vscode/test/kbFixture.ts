// A `kernelblaster.knowledgeBase` answer with the shape the server sends
// (server/views/knowledge.py, kb/view.py): two entries of one state (one of them a technique an agent proposed), attempts of
// this workspace and a kept candidate. The note and the proposal carry markup, as text an LLM
// wrote might.

import type { KnowledgeBaseData } from '../src/kbModel';

const attempt = {
  id: 'a1',
  time: 1_700_000_000,
  arch: 'sm_90',
  kernel: 'softmax_rowthread',
  source_hash: 'src',
  candidate_hash: 'cand',
  before_state: 'memory.dram',
  after_state: 'memory.l2',
  technique: 'coalesce_global_access',
  predicted_speedup: 1.45,
  measured_speedup: 1.6,
  outcome: 'success',
  correctness_detail: 'max abs err 3e-7 over 3 seeds',
  prompt_tokens: 900,
  completion_tokens: 300,
  error_kind: null,
};

const entry = {
  arch: 'sm_90',
  state: 'memory.dram',
  attempts: 3,
  successes: 2,
  regressions: 1,
  failures: 0,
  var_log_speedup: 0.1,
  notes: [],
  updated: 1_700_000_100,
  prior_speedup: null,
  prior_source: null,
  proposal: null,
};

export const KB_ANSWER: KnowledgeBaseData & Record<string, unknown> = {
  kb: {
    summary: { path: '/home/u/.local/share/kernelblaster/kb.sqlite3', attempts: 4, techniques: 32 },
    entries: [
      {
        ...entry,
        technique: 'coalesce_global_access',
        title: 'Coalesce global memory accesses',
        category: 'memory',
        mean_log_speedup: Math.log(1.5),
        predicted_speedup: 1.38,
        confidence: 0.42,
        notes: ['Transpose through <b>shared memory</b> first'],
        measurements: [
          { time: 1, kernel: 'softmax_rowthread', predicted_speedup: 1.45, measured_speedup: 1.6, outcome: 'success' },
          { time: 2, kernel: 'softmax_rowthread', predicted_speedup: 1.4, measured_speedup: 2.1, outcome: 'success' },
          { time: 3, kernel: 'transpose', predicted_speedup: 1.4, measured_speedup: 0.9, outcome: 'regression' },
        ],
      },
      {
        ...entry,
        technique: 'vectorized_loads',
        title: 'Vectorized loads (float4)',
        category: 'memory',
        attempts: 1,
        successes: 0,
        regressions: 0,
        failures: 1,
        mean_log_speedup: null,
        predicted_speedup: 1.05,
        confidence: 0.15,
        prior_speedup: 1.2,
        prior_source: 'policy update',
        measurements: [],
      },
      {
        ...entry,
        technique: 'warp_per_row_online_softmax',
        title: 'One warp per row, online max and sum',
        category: 'learned',
        attempts: 1,
        successes: 0,
        regressions: 0,
        failures: 1,
        mean_log_speedup: null,
        predicted_speedup: 1.02,
        confidence: 0.12,
        measurements: [],
        proposal: 'proposed',
      },
    ],
    recent_attempts: [attempt],
    proposals: [
      {
        technique: 'warp_per_row_online_softmax',
        title: 'One warp per row, online max and sum',
        description: 'Each row to one <i>warp</i>: a running max and a rescaled sum in one pass.',
        how_to_apply: 'Launch a warp per row; combine the lanes with shuffles.',
        addresses_findings: ['uncoalesced_global_access'],
        prior_speedup: 3,
        prior_source: 'proposed by test-model: one read pass',
        arch: 'sm_90',
        state: 'memory.dram',
        kernel: 'softmax_rowthread',
        model: 'test-model',
        time: 1_700_000_000,
        status: 'proposed',
        status_reason: '0 success(es), 0 regression(s), 1 failure(s): on trial',
        attempts: 1,
        successes: 0,
        regressions: 0,
        failures: 1,
        mean_speedup: null,
      },
    ],
  },
  workspace: {
    kernels: [{ kernel: 'softmax_rowthread', uri: 'file:///ws/softmax.cu', line: 4 }],
    attempts: [attempt, { ...attempt, id: 'a2', technique: 'vectorized_loads', outcome: 'compile_error', measured_speedup: null, after_state: null }],
    candidates: [
      {
        kernel: 'softmax_rowthread',
        source_uri: 'file:///ws/softmax.cu',
        candidate_uri: 'file:///ws/.kernelblaster/candidates/softmax.softmax_rowthread.best.cu',
        speedup: 2.1,
        techniques: ['coalesce_global_access'],
        diff: '--- softmax.cu\n+++ softmax.softmax_rowthread.best.cu\n@@ -1,2 +1,2 @@\n-  float x = in[i * dim];\n+  float x = in[i];\n',
        truncated: false,
      },
    ],
  },
};
