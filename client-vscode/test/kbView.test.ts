// The knowledge-base page: the server's answer checked, every KB string escaped, the track
// record and its plot, this workspace's attempts and diffs, and a CSP that lets in only the
// page's own style and script.

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';

import { parseKnowledgeBase } from '../src/kbModel';
import { speedupPlot } from '../src/kbPlot';
import { parseViewMessage, renderKnowledgeBase } from '../src/kbViewHtml';
import { KB_ANSWER } from './kbFixture';

const SECURITY = { cspSource: 'https://webview.test', nonce: 'n0nce' };
const render = (data = KB_ANSWER) => renderKnowledgeBase(parseKnowledgeBase(data), SECURITY);

describe('knowledge-base answer', () => {
  it('accepts the documented shape and says where another one is wrong', () => {
    assert.equal(parseKnowledgeBase(KB_ANSWER).kb.entries.length, 3);
    assert.equal(parseKnowledgeBase(KB_ANSWER).kb.proposals.length, 1);
    const badProposal = structuredClone(KB_ANSWER);
    (badProposal.kb.proposals[0] as unknown as Record<string, unknown>).kernel = 7;
    assert.throws(() => parseKnowledgeBase(badProposal), /kb\.proposals\[0\]\.kernel = 7, not a string/);
    assert.throws(() => parseKnowledgeBase({ markdown: '# KB' }), /has no kb in the answer/);
    const badEntry = structuredClone(KB_ANSWER);
    (badEntry.kb.entries[1] as unknown as Record<string, unknown>).predicted_speedup = '1.05';
    assert.throws(() => parseKnowledgeBase(badEntry), /kb\.entries\[1\]\.predicted_speedup = "1\.05", not a number/);
    const badMeasurement = structuredClone(KB_ANSWER);
    (badMeasurement.kb.entries[0].measurements[2] as unknown as Record<string, unknown>).measured_speedup = null;
    assert.throws(() => parseKnowledgeBase(badMeasurement), /measurements\[2\]\.measured_speedup = null/);
  });
});

describe('knowledge-base page', () => {
  it('allows only its own nonce-tagged style and script', () => {
    const html = render();
    assert.match(
      html,
      /content="default-src 'none'; style-src https:\/\/webview\.test 'nonce-n0nce'; script-src 'nonce-n0nce'; img-src https:\/\/webview\.test"/,
    );
    assert.equal((html.match(/<script/g) ?? []).length, 1);
    assert.match(html, /<script nonce="n0nce">/);
    assert.doesNotMatch(html, /\sstyle="/, 'inline style attributes would be blocked by the CSP');
    assert.doesNotMatch(html, /https?:\/\/(?!webview\.test)/, 'nothing is loaded from outside');
  });

  it('shows each technique of a state with its attempts’ outcomes, prediction and notes, best first', () => {
    const html = render();
    assert.match(html, /<h3><code>memory\.dram<\/code> on sm_90<\/h3>/);
    const rows = html.split('<tr class="record"').slice(1);
    assert.equal(rows.length, 3);
    assert.match(rows[0], /Coalesce global memory accesses/);
    // verified (matched the reference) and faster/slower (its speed) say different things
    assert.match(rows[0], /<td class="outcomes">3 attempts: 2 faster, 1 slower; all 3 verified<\/td>/);
    assert.match(rows[0], /1\.38×<div class="detail">confidence 42%/);
    assert.match(rows[0], /geomean 1\.5×/);
    assert.match(rows[1], /<td class="outcomes">1 attempt: 0 faster, 0 slower, 1 failed; 0 of 1 verified<\/td>/);
    assert.match(rows[1], /prior 1\.2×: policy update/);
    assert.match(rows[2], /One warp per row, online max and sum<\/strong> <span class="badge proposed">proposed · on trial<\/span>/);
    assert.doesNotMatch(rows[0] + rows[1], /badge/);
  });

  it('shows where each proposed technique came from, its status and its record, escaped', () => {
    const html = render();
    const section = html.split('<section id="proposals">')[1].split('</section>')[0];
    const rows = section.split('<tr class="proposal"').slice(1);
    assert.equal(rows.length, 1);
    assert.match(rows[0], /<code>memory\.dram<\/code> on sm_90<div class="detail">kernel <code>softmax_rowthread<\/code>, 2023-11-14, by test-model/);
    assert.match(rows[0], /claimed 3×: proposed by test-model: one read pass/);
    assert.match(rows[0], />1<div class="detail">0 faster, 0 slower, 1 failed/);
    assert.match(rows[0], /on trial/);
    assert.match(rows[0], /Each row to one &lt;i&gt;warp&lt;\/i&gt;/);
    assert.doesNotMatch(rows[0], /<i>warp/);
    const none = structuredClone(KB_ANSWER);
    (none.kb as unknown as Record<string, unknown>).proposals = [];
    assert.doesNotMatch(render(none), /id="proposals"/);
  });

  it('escapes what the knowledge base holds', () => {
    const html = render();
    assert.match(html, /Transpose through &lt;b&gt;shared memory&lt;\/b&gt; first/);
    assert.doesNotMatch(html, /<b>shared/);
    const hostile = structuredClone(KB_ANSWER);
    (hostile.kb.entries[0] as { title: string }).title = '<img src=x onerror=alert(1)>';
    (hostile.workspace.kernels[0] as { uri: string }).uri = '" onclick="alert(1)';
    const page = render(hostile);
    assert.doesNotMatch(page, /<img/);
    assert.doesNotMatch(page, /" onclick=/);
  });

  it('plots measured speedups against the prediction', () => {
    const html = render();
    const rows = html.split('<tr class="record"').slice(1);
    assert.equal((rows[0].match(/<circle class="dot faster"/g) ?? []).length, 2);
    assert.equal((rows[0].match(/<circle class="dot slower"/g) ?? []).length, 1);
    assert.match(rows[0], /aria-label="measured 1\.6×, 2\.1×, 0\.9×; predicted 1\.38×"/);
    assert.match(rows[1], /aria-label="no measured speedups yet; predicted 1\.05×"/);
  });

  it('filters by state and technique from the rows it marks', () => {
    const html = render();
    assert.match(html, /<select id="state-filter"><option value="">all states<\/option><option value="memory\.dram">memory\.dram<\/option><\/select>/);
    assert.match(html, /<option value="vectorized_loads">Vectorized loads \(float4\)<\/option>/);
    assert.match(html, /<tr class="attempt" data-state="memory\.dram" data-technique="vectorized_loads">/);
  });

  it("lists this workspace's attempts with links to the kernels, and each kept candidate's diff", () => {
    const html = render();
    const workspace = html.slice(html.indexOf('<section id="workspace">'));
    assert.match(workspace, /<a href="#" class="kernel" data-uri="file:\/\/\/ws\/softmax\.cu" data-line="4"><code>softmax_rowthread<\/code><\/a>/);
    assert.equal((workspace.match(/<tr class="attempt"/g) ?? []).length, 2);
    assert.match(workspace, /memory\.dram → memory\.l2/);
    assert.match(workspace, /<span class="outcome compile_error">compile error<\/span>/);
    assert.match(workspace, /<span class="removed">- {2}float x = in\[i \* dim\];<\/span>/);
    assert.match(workspace, /<span class="added">\+ {2}float x = in\[i\];<\/span>/);
    assert.match(workspace, /softmax_rowthread<\/strong> · 2\.1× faster · coalesce_global_access · <a href="#" class="open-diff"/);
  });

  it('says what to do when nothing is recorded yet', () => {
    const empty = { kb: { ...KB_ANSWER.kb, entries: [], recent_attempts: [] }, workspace: { kernels: [], attempts: [], candidates: [] } };
    const html = render(empty);
    assert.match(html, /No optimization attempts recorded yet/);
    assert.match(html, /Open a \.cu file to see its kernels here/);
    assert.match(html, /No verified candidate kept yet/);
  });
});

describe('speedup plot', () => {
  it('shares one labelled axis between the rows, with a legend for its marks', () => {
    const html = render();
    const rows = html.split('<tr class="record"').slice(1);
    const ticks = rows.map((row) => [...row.matchAll(/<text class="tick-label" x="([\d.]+)"[^>]*>([^<]+)<\/text>/g)].map((m) => `${m[2]}@${m[1]}`).join(' '));
    assert.ok(ticks[0].length > 0);
    assert.deepEqual(ticks, [ticks[0], ticks[0], ticks[0]], 'every row’s ticks at the same places');
    const unity = rows.map((row) => /<line class="unity" x1="([\d.]+)"/.exec(row)?.[1]);
    assert.deepEqual(unity, [unity[0], unity[0], unity[0]]);
    assert.match(html, /<th>measured speedup vs predicted \(×, log\)<\/th>/);
    const legend = /<p class="plot-legend" id="plot-legend">([\s\S]*?)<\/p>/.exec(html);
    assert.ok(legend !== null);
    assert.match(legend[1], /Speedup over the kernel before, × on a log scale \(the same axis in every row\)/);
    assert.match(legend[1], /<rect class="predicted"[^>]*\/><\/svg> predicted speedup of trying it again/);
    assert.match(legend[1], /dot faster"[^>]*\/><\/svg> measured, faster .*dot slower"[^>]*\/><\/svg> measured, not faster/);
    assert.match(legend[1], /<em>verified<\/em> when its output matched the reference/);
  });

  it('spans powers of two around the values and keeps 1× on the axis', () => {
    const svg = speedupPlot([{ time: 1, kernel: 'k', predicted_speedup: 2, measured_speedup: 9, outcome: 'success' }], 1.5);
    for (const label of ['0.5×', '1×', '2×', '4×', '8×', '16×']) {
      assert.ok(svg.includes(`>${label}</text>`), label);
    }
  });
});

describe('messages from the page', () => {
  it('accepts the three kinds and nothing else', () => {
    assert.deepEqual(parseViewMessage({ type: 'openKernel', uri: 'file:///a.cu', line: 3 }), { type: 'openKernel', uri: 'file:///a.cu', line: 3 });
    assert.deepEqual(parseViewMessage({ type: 'refresh' }), { type: 'refresh' });
    assert.equal(parseViewMessage({ type: 'openKernel', uri: 'file:///a.cu', line: 1.5 }), undefined);
    assert.equal(parseViewMessage({ type: 'runCommand', command: 'x' }), undefined);
    assert.equal(parseViewMessage('refresh'), undefined);
  });
});
