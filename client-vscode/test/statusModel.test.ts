import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import {
  initialStatus,
  type JobStatus,
  parseJobStatus,
  reduceStatus,
  renderLanguageStatus,
  renderStatus,
  type StatusEvent,
  type StatusState,
} from '../src/statusModel';

const job = (uri: string, running: boolean, phase: string, message = ''): StatusEvent => ({
  kind: 'job',
  status: { uri, running, phase, message },
});
const run = (state: StatusState, ...events: StatusEvent[]): StatusState => events.reduce(reduceStatus, state);
const ready = (trusted = true): StatusState => run(initialStatus(trusted), { kind: 'server', phase: 'running' });

describe('status bar state machine', () => {
  it('spins while the server starts, then is ready', () => {
    assert.equal(renderStatus(initialStatus(true)).text, '$(loading~spin) KernelBlaster');
    const view = renderStatus(ready());
    assert.equal(view.text, '$(zap) KernelBlaster');
    assert.match(view.tooltip, /save a \.cu file/);
  });

  it('shows a spinner and the phase of a running job, then its result', () => {
    let state = run(ready(), job('file:///w/softmax.cu', true, 'building'));
    assert.equal(renderStatus(state).text, '$(sync~spin) softmax.cu: building');
    state = run(state, job('file:///w/softmax.cu', true, 'profiling'));
    assert.equal(renderStatus(state).text, '$(sync~spin) softmax.cu: profiling');
    assert.equal(state.jobs.length, 1);
    state = run(state, job('file:///w/softmax.cu', false, 'done', 'softmax: memory-bound (DRAM 86%), 1.8× vs eager'));
    const view = renderStatus(state);
    // without a headline (another server's job): the file's name, once, and the message
    assert.equal(view.text, '$(zap) softmax.cu: softmax: memory-bound (DRAM 86%), 1.8× vs eager');
    assert.match(view.tooltip, /^softmax\.cu: softmax: memory-bound/);
  });

  it("leads with a save's headline, its delta, in the text; the whole result in the tooltip, the file named once", () => {
    const status: JobStatus = {
      uri: 'file:///w/softmax.cu',
      running: false,
      phase: 'done',
      message: '1.50 ms per call — 1.33× faster than the previous save; softmax_rowthread: launch-bound (32 blocks), ncu kernel duration 1.44 ms',
      headline: 'softmax.cu 1.33× faster · launch-bound',
    };
    const view = renderStatus(run(ready(), { kind: 'job', status }));
    assert.equal(view.text, '$(zap) softmax.cu 1.33× faster · launch-bound');
    assert.ok(view.tooltip.startsWith(`softmax.cu: ${status.message}\n`), view.tooltip);
    assert.equal(view.tooltip.split('softmax.cu:').length, 2, 'the file is named once');
  });

  it('counts concurrent jobs and shows the latest', () => {
    const state = run(ready(), job('file:///w/a.cu', true, 'building'), job('file:///w/b%20c.cu', true, 'timing'));
    const view = renderStatus(state);
    assert.equal(view.text, '$(sync~spin) b c.cu: timing (+1)');
    assert.match(view.tooltip, /a\.cu: building\nb c\.cu: timing/);
    const after = run(state, job('file:///w/b%20c.cu', false, 'done', 'b: compute-bound'));
    assert.equal(renderStatus(after).text, '$(sync~spin) a.cu: building');
  });

  it('keeps the previous result when a job ends without a message', () => {
    const state = run(
      ready(),
      job('file:///w/a.cu', false, 'done', 'a: latency-bound'),
      job('file:///w/a.cu', true, 'building'),
      job('file:///w/a.cu', false, 'cancelled'),
    );
    assert.equal(renderStatus(state).text, '$(zap) a.cu: a: latency-bound');
  });

  it('truncates long results in the text but not the tooltip', () => {
    const message = `k: ${'x'.repeat(100)}`;
    const view = renderStatus(run(ready(), job('file:///a.cu', false, 'done', message)));
    assert.ok(view.text.endsWith('…'));
    assert.equal(view.text.length, '$(zap) '.length + 60);
    assert.ok(view.text.startsWith('$(zap) a.cu: k: x'));
    assert.ok(view.tooltip.includes(message));
  });

  it('forgets running jobs when the server stops or restarts', () => {
    const state = run(ready(), job('file:///a.cu', true, 'building'), { kind: 'server', phase: 'stopped' });
    assert.deepEqual(state.jobs, []);
    assert.equal(renderStatus(state).text, '$(debug-disconnect) KernelBlaster: stopped');
    assert.equal(renderStatus(run(state, { kind: 'server', phase: 'notInstalled' })).text, '$(error) KernelBlaster: server not found');
  });

  it('marks restricted mode until trust is granted', () => {
    const untrusted = ready(false);
    const view = renderStatus(untrusted);
    assert.equal(view.text, '$(shield) $(zap) KernelBlaster');
    assert.match(view.tooltip, /Restricted mode/);
    const trusted = renderStatus(run(untrusted, { kind: 'trust', trusted: true }));
    assert.equal(trusted.text, '$(zap) KernelBlaster');
    assert.doesNotMatch(trusted.tooltip, /Restricted/);
  });

  it('accepts only well-formed jobStatus notifications', () => {
    const expected: JobStatus = { uri: 'file:///a.cu', running: true, phase: 'building', message: '' };
    assert.deepEqual(parseJobStatus({ uri: 'file:///a.cu', running: true, phase: 'building' }), expected);
    assert.deepEqual(parseJobStatus({ uri: 'file:///a.cu', running: false, phase: 'done', message: 'm', headline: 'a.cu 2.00× faster' }), {
      uri: 'file:///a.cu',
      running: false,
      phase: 'done',
      message: 'm',
      headline: 'a.cu 2.00× faster',
    });
    assert.equal(parseJobStatus({ uri: 'file:///a.cu' }), undefined);
    assert.equal(parseJobStatus({ running: false }), undefined);
    assert.equal(parseJobStatus(null), undefined);
    assert.equal(parseJobStatus('x'), undefined);
  });
});

describe('language status item', () => {
  it("follows the server's state, warns in Restricted Mode and is busy while a job runs", () => {
    assert.deepEqual(renderLanguageStatus(initialStatus(true)), {
      text: 'KernelBlaster: starting',
      detail: 'language server',
      severity: 'information',
      busy: true,
    });
    assert.equal(renderLanguageStatus(ready()).text, 'KernelBlaster: ready');
    assert.equal(renderLanguageStatus(run(ready(), job('file:///w/a.cu', true, 'building'))).busy, true);
    const restricted = renderLanguageStatus(ready(false));
    assert.deepEqual([restricted.text, restricted.severity], ['KernelBlaster: Restricted Mode', 'warning']);
    const missing = renderLanguageStatus(run(initialStatus(true), { kind: 'server', phase: 'notInstalled' }));
    assert.deepEqual([missing.text, missing.severity], ['KernelBlaster: server not found', 'error']);
    assert.equal(renderLanguageStatus(run(ready(), { kind: 'server', phase: 'stopped' })).severity, 'error');
  });

  it('says there is a setup problem, not "ready", while Problems shows one', () => {
    const torch = 'PyTorch is not installed in /venv — /venv/bin/python -m pip install torch';
    const view = renderLanguageStatus(run(ready(), { kind: 'setup', problems: [torch] }));
    assert.equal(view.text, 'KernelBlaster: setup problem');
    assert.equal(view.severity, 'warning');
    assert.ok(view.detail.includes('PyTorch is not installed') && view.detail.endsWith('(see Problems)'), view.detail);
    assert.equal(renderLanguageStatus(run(ready(), { kind: 'setup', problems: [torch] }, { kind: 'setup', problems: [] })).text, 'KernelBlaster: ready');
  });
});
