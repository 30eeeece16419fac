// End to end: the packaged .vsix in a real VS Code (code-server), driven in headless Chromium
// on a machine without a GPU. One window walks through what a user sees: Restricted Mode, trust,
// diagnostics in the Problems view, hover, code actions, Optimize without an LLM endpoint, the
// status bar, the knowledge-base view; then a workspace whose server has no torch. Screenshots
// go to e2e-artifacts/. Setup: e2e/setup.sh (see the README).

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';

import type { Browser, Frame } from 'puppeteer-core';

import { ARTIFACTS, CLIENT, CodeServer, launchBrowser, REPO, requireTools, TOOLS, Workbench } from './workbench';

const PYTHON = process.env.KB_E2E_PYTHON ?? path.join(REPO, '.venv', 'bin', 'python');
const PYTHON_WITHOUT_TORCH = path.join(TOOLS, 'venv-notorch', 'bin', 'python');
const VSIX = path.join(CLIENT, `kernelblaster-${(JSON.parse(fs.readFileSync(path.join(CLIENT, 'package.json'), 'utf8')) as { version: string }).version}.vsix`);

const root = fs.mkdtempSync(path.join(os.tmpdir(), 'kb-e2e-'));
const workspace = path.join(root, 'softmax-ws');
const workspaceWithoutTorch = path.join(root, 'no-torch-ws');
// Saves answered by the replay worker with a real H100 profile at the times the test sets.
const progressWorkspace = path.join(root, 'progress-ws');
const progressControl = path.join(root, 'progress-control');
const FIXTURE = path.join(CLIENT, 'e2e', 'fixture.py');
const kbFile = path.join(root, 'kb.sqlite3');

let server: CodeServer | undefined;
let browser: Browser | undefined;
let vscode: Workbench;

function writeJson(file: string, value: unknown): void {
  fs.mkdirSync(path.dirname(file), { recursive: true });
  fs.writeFileSync(file, JSON.stringify(value, null, 2));
}

before(async () => {
  requireTools();
  assert.ok(fs.existsSync(VSIX), `${VSIX} exists: run npm run package first`);
  execFileSync(PYTHON, [FIXTURE, workspace, kbFile], { cwd: REPO, stdio: 'inherit' });
  execFileSync(PYTHON, [FIXTURE, 'progress', progressWorkspace, progressControl, PYTHON], { cwd: REPO, stdio: 'inherit' });
  fs.mkdirSync(workspaceWithoutTorch);
  for (const name of ['softmax.cu', 'softmax.py']) {
    fs.copyFileSync(path.join(REPO, 'examples', name), path.join(workspaceWithoutTorch, name));
  }
  fs.writeFileSync(path.join(workspaceWithoutTorch, 'kernelblaster.toml'), 'rollouts = 2\n');
  // The server as `pip install kernelblaster` leaves it: no torch.
  writeJson(path.join(workspaceWithoutTorch, '.vscode', 'settings.json'), { 'kernelblaster.python': PYTHON_WITHOUT_TORCH });
  const home = path.join(root, 'code-server');
  // Tool paths are machine-overridable: in a remote window (code-server is one) they are read
  // from the machine's settings, not the browser user's.
  writeJson(path.join(home, 'user-data', 'Machine', 'settings.json'), { 'kernelblaster.python': PYTHON });
  writeJson(path.join(home, 'user-data', 'User', 'settings.json'), {
    'kernelblaster.kbPath': kbFile,
    'security.workspace.trust.startupPrompt': 'never',
    'workbench.startupEditor': 'none',
    'workbench.tips.enabled': false,
    'workbench.secondarySideBar.defaultVisibility': 'hidden',
    'chat.disableAIFeatures': true,
    'telemetry.telemetryLevel': 'off',
    'extensions.autoCheckUpdates': false,
    'extensions.autoUpdate': false,
    'update.mode': 'none',
  });
  fs.writeFileSync(path.join(home, 'config.yaml'), 'auth: none\n');
  CodeServer.installExtension(home, VSIX);
  server = await CodeServer.start(home, { ...process.env, KERNELBLASTER_KB: '' });
  browser = await launchBrowser(path.join(root, 'chromium'));
  vscode = new Workbench(await browser.newPage());
});

after(async () => {
  await browser?.close();
  server?.stop();
  if (server !== undefined) {
    fs.writeFileSync(path.join(CLIENT, 'e2e-artifacts', 'code-server.log'), server.log());
  }
});

let hoverText = ''; // the kernel hover, whose ranking the code actions follow
let optimizeTitles: string[] = []; // the Optimize actions' titles, in the order shown

/** A screenshot of one element of a webview (e.g. the roofline), for the docs. */
async function elementShot(frame: Frame, selector: string, name: string): Promise<string> {
  const element = await frame.$(selector);
  assert.ok(element !== null, `${selector} in the webview`);
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  const file = path.join(ARTIFACTS, `${name}.png`);
  await element.scrollIntoView();
  await element.screenshot({ path: file });
  return file;
}

const problemsContaining = (text: string) => vscode.problems().then((rows) => rows.filter((row) => row.includes(text)));
/** The Problems rows containing `text`, or undefined while there are none (for waits). */
const someProblemsContaining = (text: string) => problemsContaining(text).then((rows) => (rows.length > 0 ? rows : undefined));

describe('KernelBlaster in VS Code', () => {
  it('activates on a .cu in Restricted Mode, builds nothing and says how to trust', async () => {
    await vscode.open(`${server?.url ?? ''}/?folder=${encodeURIComponent(workspace)}`);
    await vscode.openFile('softmax.cu');
    await vscode.wait('the KernelBlaster status bar item', async () => (await vscode.statusBar('kernelblaster')).length > 0);
    await vscode.command('Problems: Focus on Problems View');
    await vscode.wait('the untrusted-workspace diagnostic', async () => (await problemsContaining('the workspace is not trusted')).length > 0);
    await vscode.command('KernelBlaster: Optimize Kernel at Cursor');
    await vscode.wait('the Restricted Mode refusal', async () =>
      (await vscode.toasts()).some((t) => t.includes("KernelBlaster can't optimize in Restricted Mode")),
    );
    await vscode.shot('01-restricted-mode');
  });

  it('restarts the server once the workspace is trusted, and shows the saved profile', async () => {
    await vscode.trustWorkspace();
    await vscode.wait('the KernelBlaster status bar item', async () => (await vscode.statusBar('kernelblaster')).length > 0);
    await vscode.openFile('softmax.cu');
    await vscode.command('Problems: Focus on Problems View');
    // The H100 profile saved beside the file: its performance state and the lines ncu blames.
    const state = await vscode.wait('the performance-state diagnostic', () => someProblemsContaining('softmax_rowthread'));
    assert.ok(state.some((row) => /small grid|launch/i.test(row)), state.join('\n'));
    assert.deepEqual(await problemsContaining('not trusted'), []);
    await vscode.shot('02-problems');
  });

  it('hovers a kernel with its state and the knowledge base’s ranked optimizations', async () => {
    await vscode.openFile('softmax.cu');
    await vscode.goToLine(6, 22); // the name in `__global__ void softmax_rowthread(`
    await vscode.command('Show or Focus Hover');
    const hover = await vscode.wait('the kernel hover', async () => {
      const text = await vscode.hover();
      return text?.includes('Optimizations ranked by the knowledge base') ? text : undefined;
    });
    assert.match(hover, /softmax_rowthread/);
    assert.match(hover, /Coalesce global memory accesses/);
    hoverText = hover;
    await vscode.shot('03-hover');
    await vscode.page.keyboard.press('Escape');
  });

  it('offers Optimize actions, disabled without an LLM endpoint', async () => {
    await vscode.goToLine(8, 5);
    await vscode.command('Refactor...');
    // VS Code lists disabled actions only after "Show Disabled".
    const actions = await vscode.wait('the code actions', async () => {
      const rows = await vscode.actionWidget();
      if (!rows.some((row) => row.title.startsWith('Optimize kernel'))) {
        await vscode.showDisabledActions();
        return undefined;
      }
      return rows;
    });
    await vscode.shot('04-code-actions');
    await vscode.page.keyboard.press('Escape');
    const optimize = actions.filter((row) => row.title.startsWith('Optimize kernel'));
    assert.ok(optimize.every((row) => row.disabled), JSON.stringify(optimize));
    assert.ok(optimize.some((row) => row.title === 'Optimize kernel'), JSON.stringify(optimize));
    // One action per top-ranked technique, best first, led by the hover's first technique.
    const techniqueRows = optimize.filter((row) => row.title !== 'Optimize kernel');
    const ranked = techniqueRows.flatMap((row) => {
      const match = /^Optimize kernel: (.+) \(predicted ([\d.]+)×; [^)]+\)$/.exec(row.title);
      return match === null ? [] : [{ technique: match[1], predicted: Number(match[2]) }];
    });
    assert.ok(ranked.length > 0 && ranked.length === techniqueRows.length, JSON.stringify(optimize));
    optimizeTitles = techniqueRows.map((row) => row.title);
    const predicted = ranked.map((row) => row.predicted);
    assert.deepEqual(predicted, [...predicted].sort((a, b) => b - a), JSON.stringify(optimize));
    assert.ok(hoverText.toLowerCase().includes(ranked[0].technique.toLowerCase()), `${JSON.stringify(optimize)}\n${hoverText}`);
  });

  it('labels untried techniques ranked above a measured record as exploring, and keeps the measured one', () => {
    // The fixture's KB: coalescing has 5 attempts at this state, 4 faster; the ranking puts
    // techniques with no attempts (their priors raised by ncu's estimates) above it.
    assert.ok(optimizeTitles.length >= 2, JSON.stringify(optimizeTitles));
    assert.match(optimizeTitles[0], /\(predicted [\d.]+×; untried — exploring, from ncu's estimate\)$/, JSON.stringify(optimizeTitles));
    const coalescing = optimizeTitles.findIndex((title) => title.includes('coalesce global memory accesses'));
    assert.ok(coalescing > 0, `the measured technique is offered, below the untried: ${JSON.stringify(optimizeTitles)}`);
    assert.match(optimizeTitles[coalescing], /\(predicted [\d.]+×; 4 of 5 attempts faster\)$/);
    for (const title of optimizeTitles.slice(0, coalescing)) {
      assert.match(title, /; untried — exploring, from /, 'every technique above it says why it is there');
    }
  });

  it('Optimize without an LLM endpoint says what to configure, once', async () => {
    await vscode.command('KernelBlaster: Optimize Kernel at Cursor');
    await vscode.wait('the no-endpoint warning', async () => (await vscode.toasts()).some((t) => t.includes('Optimizing needs an LLM endpoint')));
    await vscode.shot('05-optimize-without-endpoint');
    // Counted after the knowledge-base test below, once every message of this command is in.
  });

  it('shows the knowledge base as a webview with track records, plots and this workspace’s attempts', async () => {
    await vscode.command('KernelBlaster: Show Knowledge Base');
    await vscode.wait('the knowledge-base tab', () => vscode.isActiveTab('KernelBlaster Knowledge Base'));
    const view = await vscode.webviewFrame('#track-records');
    const records = await view.$$eval('tr.record', (rows) => rows.map((row) => row.textContent));
    assert.ok(records.some((r) => r.includes('Coalesce global memory accesses')), records.join('\n'));
    assert.equal(await view.$$eval('tr.record svg.plot circle.dot', (dots) => dots.length), 5);
    const notes = await view.$$eval('td.notes li', (items) => items.map((i) => i.textContent));
    assert.ok(notes.some((n) => n.includes('give each row to a warp')), JSON.stringify(notes));
    const attempts = await view.$$eval('#workspace tr.attempt', (rows) => rows.map((row) => row.textContent));
    assert.equal(attempts.length, 2, attempts.join('\n'));
    assert.ok(await view.$('#workspace pre.diff .added'), 'the kept candidate’s diff');
    // One speedup axis for every row: the same ticks at the same places, labelled with its unit.
    const axes = await view.$$eval('tr.record svg.plot', (plots) =>
      plots.map((plot) => [...plot.querySelectorAll('text.tick-label')].map((tick) => `${tick.textContent}@${tick.getAttribute('x') ?? ''}`).join(' ')),
    );
    assert.ok(axes.length >= 2 && axes[0].includes('1×@'), JSON.stringify(axes));
    assert.deepEqual(axes, axes.map(() => axes[0]), 'every row on the same axis');
    const header = await view.$$eval('#track-records thead th', (cells) => cells.map((cell) => cell.textContent));
    assert.ok(header.includes('measured speedup vs predicted (×, log)'), JSON.stringify(header));
    // The legend says what the bar, the dots and the 1× line are, on screen.
    const legend = await view.$eval('#plot-legend', (element) => ({ text: element.textContent, shown: element.getBoundingClientRect().height > 0, bar: element.querySelector('rect.predicted') !== null }));
    assert.ok(legend.shown && legend.bar, JSON.stringify(legend));
    assert.match(legend.text, /× on a log scale \(the same axis in every row\)/);
    assert.match(legend.text, /predicted speedup of trying it again/);
    assert.match(legend.text, /measured, faster .*measured, not faster .*1× \(no change\)/);
    // "verified" (matched the reference) and "slower" (its speed) read as different things.
    const coalescing = records.find((r) => r.includes('Coalesce global memory accesses')) ?? '';
    assert.match(coalescing, /5 attempts: 4 faster, 1 slower; all 5 verified/);
    assert.doesNotMatch(coalescing, /100%/);
    await vscode.shot('06-knowledge-base');
    await elementShot(view, '#track-records', 'kb-view');
    // Filtering by technique hides the other rows.
    await view.select('#technique-filter', 'vectorized_loads');
    const visible = await view.$$eval('tr.record:not([hidden])', (rows) => rows.map((row) => row.getAttribute('data-technique')));
    assert.deepEqual(visible, ['vectorized_loads']);
    await view.select('#technique-filter', '');
    // A kernel link opens the kernel in the editor.
    await view.click('#workspace a.kernel');
    await vscode.wait('softmax.cu to be opened from the view', () => vscode.isActiveTab('softmax.cu'));
  });

  it('showed the no-endpoint warning exactly once', async () => {
    const warnings = (await vscode.allNotifications()).filter((m) => m.includes('needs an LLM endpoint'));
    assert.equal(warnings.length, 1, warnings.join('\n'));
  });

  it('on save builds the kernel: resource usage, the setup message, the status bar result', async () => {
    await vscode.openFile('softmax.cu');
    await vscode.appendLineAndSave('// saved');
    await vscode.command('Problems: Focus on Problems View');
    // No GPU here, and the CI's torch is a CPU build: a setup message, not a crash.
    await vscode.wait('the CPU-only torch message', async () => (await problemsContaining('CPU-only build')).length > 0);
    // Without a profile, the kernel's hover shows the build's resource usage (ptxas).
    await vscode.goToLine(6, 22);
    await vscode.command('Show or Focus Hover');
    await vscode.wait('the resource usage in the hover', async () => /softmax_rowthread[\s\S]*\d+ registers\/thread/.exec((await vscode.hover()) ?? ''));
    await vscode.page.keyboard.press('Escape');
    const status = await vscode.wait('the job result in the status bar', async () => {
      const items = await vscode.statusBar('kernelblaster');
      return items.find((item) => item.includes('softmax'));
    });
    assert.doesNotMatch(status, /stopped|not found/);
    await vscode.shot('07-after-save');
  });

  it('in a kernelblaster.toml workspace whose server has no torch, saving says how to install it', async () => {
    await vscode.open(`${server?.url ?? ''}/?folder=${encodeURIComponent(workspaceWithoutTorch)}`);
    // activated by workspaceContains:**/kernelblaster.toml, before any .cu is opened
    await vscode.wait('the KernelBlaster status bar item', async () => (await vscode.statusBar('kernelblaster')).length > 0);
    await vscode.trustWorkspace();
    await vscode.openFile('softmax.cu');
    await vscode.appendLineAndSave('// saved');
    await vscode.command('Problems: Focus on Problems View');
    const missing = await vscode.wait('the missing-torch message', () => someProblemsContaining('PyTorch is not installed in'));
    assert.ok(missing.some((row) => row.includes(path.join(TOOLS, 'venv-notorch'))), missing.join('\n'));
    assert.ok(missing.some((row) => row.includes('-m pip install torch')), missing.join('\n'));
    const all = (await vscode.allNotifications()).join('\n');
    assert.doesNotMatch(all, /worker exited/);
    await vscode.shot('08-no-torch');
  });

  it('reports the server in the language status item', async () => {
    await vscode.openFile('softmax.cu');
    await vscode.page.click('#status\\.languageStatus');
    const text = await vscode.wait('the language status hover', () =>
      vscode.page.evaluate(() =>
        [...document.querySelectorAll('.hover-language-status, .workbench-hover')].map((hover) => hover.textContent).find((text) => text.includes('KernelBlaster')),
      ),
    );
    assert.match(text, /KernelBlaster: ready/);
    await vscode.shot('09-language-status');
  });

  it('shows how much faster a save made the kernel: Problems, status bar and hover', async () => {
    await vscode.open(`${server?.url ?? ''}/?folder=${encodeURIComponent(progressWorkspace)}`);
    await vscode.wait('the KernelBlaster status bar item', async () => (await vscode.statusBar('kernelblaster')).length > 0);
    await vscode.trustWorkspace();
    await vscode.openFile('softmax.cu');
    await vscode.command('Problems: Focus on Problems View');
    // The run on open (2 ms per call) is the first point of this session's history.
    await vscode.wait('the first timing', () => someProblemsContaining('2.00 ms per call'));
    // The next save is answered at 1.5 ms: 1.33× faster, since the previous save and since opened.
    execFileSync(PYTHON, [FIXTURE, 'timed', progressWorkspace, progressControl, '1.5'], { cwd: REPO });
    await vscode.openFile('softmax.cu'); // the editor takes the keyboard back from the Problems view
    await vscode.appendLineAndSave('// faster');
    const delta = await vscode.wait('the delta in the timing diagnostic', () => someProblemsContaining('1.33× faster than the previous save'));
    assert.ok(delta.some((row) => row.includes('1.50 ms — 1.33× faster than the previous save, 1.33× faster since opened')), delta.join('\n'));
    const status = await vscode.wait('the delta in the status bar', async () =>
      (await vscode.statusBar('kernelblaster')).find((item) => item.includes('faster than the previous save')),
    );
    assert.match(status, /softmax/);
    await vscode.goToLine(6, 22);
    await vscode.command('Show or Focus Hover');
    const hover = await vscode.wait('the delta in the hover', async () => {
      const text = await vscode.hover();
      return text?.includes('faster since opened') ? text : undefined;
    });
    assert.match(hover, /Last 2 saves \(median per call, oldest first\)/);
    await vscode.shot('10-save-delta');
    await vscode.page.keyboard.press('Escape');
  });

  it('puts a code lens above the kernel: its summary and actions', async () => {
    const lenses = await vscode.wait('the kernel’s code lenses', async () => {
      const lines = await vscode.codeLenses();
      const line = lines.find((titles) => titles.includes('Show profile'));
      return line?.some((title) => title.includes(' ms · ')) ? line : undefined;
    });
    const [summary, ...actions] = lenses;
    // ncu's time of the kernel, its state, the headroom to its nearest roof
    assert.equal(summary, '1.44 ms · launch-bound · 5% of the DRAM bandwidth roof');
    assert.deepEqual(actions, ['Optimize', 'Show profile', 'Open in Nsight Compute']);
    await vscode.shot('11-code-lens');
    // Optimize from the lens runs the server's optimize, which says what it needs first.
    await vscode.clickCodeLens('Optimize');
    await vscode.wait('the no-endpoint warning from the lens', async () => (await vscode.toasts()).some((t) => t.includes('Optimizing needs an LLM endpoint')));
  });

  it('Show profile opens the profile view with the hierarchical roofline', async () => {
    await vscode.clickCodeLens('Show profile');
    // beside the source, in a second editor group
    const view = await vscode.webviewFrame('#roofline svg.roofline');
    // L1, L2 and DRAM: a bandwidth roof each, labelled with its measured value (the H100's)
    for (const [level, name] of [['l1', 'L1'], ['l2', 'L2'], ['dram', 'DRAM']]) {
      assert.equal(await view.$$eval(`svg.roofline polyline.roof.memory.${level}`, (roofs) => roofs.length), 1, `the ${name} roof`);
      const label = await view.$eval(`svg.roofline text.roof-label.${level}`, (text) => text.textContent);
      assert.match(label, new RegExp(`^${name} [\\d.]+ TB/s$`));
      // this version's point at that level, and the earlier save's
      assert.equal(await view.$$eval(`svg.roofline circle.point.current.${level}`, (points) => points.length), 1, `this version at ${name}`);
      assert.ok((await view.$$eval(`svg.roofline polygon.point.earlier.${level}`, (points) => points.length)) >= 1, `the earlier save at ${name}`);
    }
    // softmax_rowthread reads a row per thread (uncoalesced): far more L1 than DRAM traffic,
    // so its L1 point sits left of its DRAM point (fewer FLOPs per byte).
    const x = (level: string) => view.$eval(`svg.roofline circle.point.current.${level}`, (point) => Number(point.getAttribute('cx')));
    assert.ok((await x('l1')) < (await x('dram')), 'the L1 point left of the DRAM point');
    // Both saves replay the same profile: the earlier one is a hollow diamond drawn over this
    // version's circle, larger, so it is not hidden under it.
    const drawn = await view.$eval('svg.roofline', (svg) => {
      const current = svg.querySelector('circle.point.current.dram');
      const earlier = svg.querySelector('polygon.point.earlier.dram');
      if (current === null || earlier === null) return null;
      const [c, e] = [current.getBoundingClientRect(), earlier.getBoundingClientRect()];
      return {
        after: (current.compareDocumentPosition(earlier) & Node.DOCUMENT_POSITION_FOLLOWING) !== 0,
        hollow: getComputedStyle(earlier).fill === 'none',
        around: e.left < c.left && e.right > c.right && e.top < c.top && e.bottom > c.bottom,
      };
    });
    assert.deepEqual(drawn, { after: true, hollow: true, around: true });
    const legend = await view.$eval('#roofline-legend', (element) => element.textContent);
    assert.match(legend, /L1 .*L2 .*DRAM/);
    assert.match(legend, /version:\s+this one .*earlier saves/);
    const source = await view.$eval('.roofs-source', (element) => element.textContent);
    assert.match(source, /^Roofs: measured by Nsight Compute on the NVIDIA H100 80GB HBM3/);
    assert.doesNotMatch(source, /measured: measured/);
    const nearest = await view.$eval('#roofline', (element) => element.querySelector('#nearest-roof')?.textContent ?? '');
    assert.doesNotMatch(nearest, /dram bandwidth|_/);
    const change = await view.$eval('#timing .change', (element) => element.textContent);
    assert.match(change, /1\.33× faster than the previous save/);
    assert.equal(await view.$$eval('#history tr.version', (rows) => rows.length), 2);
    await vscode.shot('12-profile-view');
    // For the docs: the profile view alone, large enough to read.
    await vscode.command('View: Hide Panel');
    await vscode.command('View: Focus Last Editor Group');
    await vscode.command('View: Maximize Editor Group and Hide Side Bars');
    await new Promise((resolve) => setTimeout(resolve, 500)); // the webview's new layout
    await elementShot(view, '#roofline', 'hierarchical-roofline');
  });

  it('Open in Nsight Compute says where the kept report is without ncu-ui', async () => {
    await vscode.command('View: Close All Editor Groups');
    await vscode.command('Notifications: Clear All Notifications');
    await vscode.openFile('softmax.cu');
    await vscode.clickCodeLens('Open in Nsight Compute');
    const toast = await vscode.wait('the Nsight Compute explanation', async () =>
      (await vscode.toasts()).find((t) => t.includes('is not on PATH')),
    );
    assert.match(toast, /The report is .*softmax\.cu\.reports\/\d+-[0-9a-f]+\.ncu-rep/);
    assert.match(toast, /developer\.nvidia\.com\/nsight-compute/);
    await new Promise((resolve) => setTimeout(resolve, 500)); // the toast's slide-in
    await vscode.shot('13-nsight-compute');
  });
});
