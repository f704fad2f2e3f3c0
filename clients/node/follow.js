#!/usr/bin/env node
// Follow a turn and print its frames as JSON lines: a status line first, then each
// event and reset frame as WatchTurn delivers it. Exits 0 after the terminal event.
//
//   node follow.js [--address HOST:PORT] [--after-seq N] TURN_ID
//
// Exit codes: 0 the turn ended (terminal event seen, or TurnStatus says it is over),
// 1 an error a retry cannot fix, 2 bad usage, 3 the service never saw the turn,
// 4 the deadline passed, 130/143 stopped by SIGINT/SIGTERM.

import { parseArgs } from 'node:util';

import { TurnkeeperClient } from './src/client.js';
import { EXIT_CODES, followTurn } from './src/follow.js';

const USAGE = `usage: follow.js [options] TURN_ID

  --address HOST:PORT     the turnkeeper service (env TURNKEEPER_ADDRESS; default 127.0.0.1:50051)
  --tls                   connect with TLS (default: plaintext)
  --after-seq N           print only events after seq N (default 0)
  --idle-seconds S        ask TurnStatus after S seconds without a frame (default 30)
  --deadline-seconds S    give up after S seconds (default 900)
  -h, --help              this text`;

/**
 * @param {string} name
 * @param {string | undefined} text
 * @param {number} fallback
 * @returns {number}
 */
function number(name, text, fallback) {
  if (text === undefined) {
    return fallback;
  }
  const value = Number(text);
  if (!Number.isFinite(value) || value < 0) {
    throw new TypeError(`${name} must be a number >= 0, got ${JSON.stringify(text)}`);
  }
  return value;
}

/**
 * @param {string[]} argv
 * @returns {Promise<number>} the exit code
 */
async function main(argv) {
  let options;
  try {
    const { values, positionals } = parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        address: { type: 'string' },
        tls: { type: 'boolean', default: false },
        'after-seq': { type: 'string' },
        'idle-seconds': { type: 'string' },
        'deadline-seconds': { type: 'string' },
        help: { type: 'boolean', short: 'h', default: false },
      },
    });
    if (values.help) {
      process.stdout.write(`${USAGE}\n`);
      return 0;
    }
    if (positionals.length !== 1 || positionals[0] === '') {
      throw new TypeError('expected exactly one TURN_ID');
    }
    options = {
      turnId: positionals[0],
      address: values.address ?? process.env.TURNKEEPER_ADDRESS ?? '127.0.0.1:50051',
      tls: values.tls,
      afterSeq: number('--after-seq', values['after-seq'], 0),
      idleMs: number('--idle-seconds', values['idle-seconds'], 30) * 1000,
      deadlineMs: number('--deadline-seconds', values['deadline-seconds'], 900) * 1000,
    };
  } catch (error) {
    process.stderr.write(`follow.js: ${/** @type {Error} */ (error).message}\n${USAGE}\n`);
    return 2;
  }

  const client = new TurnkeeperClient(options.address, { tls: options.tls });
  const controller = new AbortController();
  /** @type {number} */
  let stoppedBy = 0;
  /** @param {NodeJS.Signals} name @param {number} code */
  const stop = (name, code) => {
    process.on(name, () => {
      stoppedBy = code;
      controller.abort();
    });
  };
  stop('SIGINT', 130);
  stop('SIGTERM', 143);

  try {
    const result = await followTurn(client, options.turnId, {
      afterSeq: options.afterSeq,
      idleMs: options.idleMs,
      deadlineMs: options.deadlineMs,
      signal: controller.signal,
      onFrame: (frame) => process.stdout.write(`${JSON.stringify(frame)}\n`),
    });
    if (result.outcome === 'unknown') {
      process.stderr.write(`follow.js: the service never saw turn ${options.turnId}\n`);
    } else if (result.outcome === 'deadline') {
      process.stderr.write(`follow.js: deadline passed; the turn was last ${result.state ?? 'unreachable'}\n`);
    }
    return result.outcome === 'aborted' ? stoppedBy || EXIT_CODES.aborted : EXIT_CODES[result.outcome];
  } catch (error) {
    const { code, details, message } = /** @type {{ code?: number, details?: string, message: string }} */ (error);
    process.stderr.write(`follow.js: ${details || message}${code === undefined ? '' : ` (gRPC status ${code})`}\n`);
    return 1;
  } finally {
    client.close();
  }
}

// Set the exit code and let stdout drain, rather than process.exit() cutting it off.
process.exitCode = await main(process.argv.slice(2));
