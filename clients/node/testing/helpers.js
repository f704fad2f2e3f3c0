// Small helpers the tests share: polling, and follow.js as a child process.

import { spawn } from 'node:child_process';
import readline from 'node:readline';
import { fileURLToPath } from 'node:url';

export const FOLLOW = fileURLToPath(new URL('../follow.js', import.meta.url));

/**
 * Wait until check() is true, polling; fail after timeoutMs.
 *
 * @param {() => boolean} check
 * @param {number} [timeoutMs]
 */
export async function until(check, timeoutMs = 5_000) {
  const giveUpAt = Date.now() + timeoutMs;
  while (!check()) {
    if (Date.now() > giveUpAt) {
      throw new Error(`condition not met in ${timeoutMs} ms: ${check}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 10));
  }
}

/**
 * Start follow.js. `lines` fills with stdout lines as they come; `exited` resolves
 * with the exit code once the process closed its output; it is killed after
 * timeoutMs so a hang fails the test instead of stalling it.
 *
 * @param {string[]} args
 * @param {{ env?: NodeJS.ProcessEnv, timeoutMs?: number }} [options]
 */
export function spawnFollow(args, { env = {}, timeoutMs = 20_000 } = {}) {
  const child = spawn(process.execPath, [FOLLOW, ...args], {
    env: { ...process.env, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  /** @type {string[]} */
  const lines = [];
  const output = { lines, stderr: '' };
  readline.createInterface({ input: child.stdout }).on('line', (line) => lines.push(line));
  child.stderr.on('data', (chunk) => (output.stderr += chunk));
  const timer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
  /** @type {Promise<number | null>} */
  const exited = new Promise((resolve, reject) => {
    child.on('error', reject);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve(code);
    });
  });
  return {
    child,
    exited,
    /** stdout so far, each line parsed as JSON */
    frames: () => lines.map((line) => JSON.parse(line)),
    stdout: () => lines.join('\n'),
    stderr: () => output.stderr,
  };
}

/**
 * Run follow.js to its end.
 *
 * @param {string[]} args
 * @param {{ env?: NodeJS.ProcessEnv, timeoutMs?: number }} [options]
 */
export async function runFollow(args, options) {
  const run = spawnFollow(args, options);
  const code = await run.exited;
  return { code, stdout: run.stdout(), stderr: run.stderr(), frames: run.frames };
}
