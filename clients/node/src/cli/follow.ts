#!/usr/bin/env node
// turnkeeper-follow: a turn's frames as JSON lines; a status line first, then each
// event and reset frame as WatchTurn delivers it. Exits 0 after the terminal event.
//
// Exit codes: 0 the turn ended, 1 an error a retry cannot fix, 2 bad usage, 3 the
// service never saw the turn, 4 the deadline passed, 130/143 SIGINT/SIGTERM.

import { parseArgs } from "node:util";

import { TurnkeeperClient } from "../client.js";
import { connectionFromEnv } from "../connection.js";
import { codeName, codeOf, messageOf } from "../errors.js";
import { EXIT_CODES, followTurn } from "../follow.js";

const USAGE = `usage: turnkeeper-follow [options] TURN_ID

  --address HOST:PORT     the turnkeeper service (env TURNKEEPER_ADDRESS; default 127.0.0.1:50051)
  --tls                   connect with TLS (env TURNKEEPER_TLS, TURNKEEPER_TLS_CA ...)
  --after-seq N           print only events after seq N (default 0)
  --idle-seconds S        ask TurnStatus after S seconds without a frame (default 30)
  --deadline-seconds S    give up after S seconds (default 900)
  -h, --help              this text

A token comes from TURNKEEPER_TOKEN, never from the command line.`;

function number(name: string, text: string | undefined, fallback: number): number {
  if (text === undefined) {
    return fallback;
  }
  const value = Number(text);
  if (!Number.isFinite(value) || value < 0) {
    throw new TypeError(`${name} must be a number >= 0, got ${JSON.stringify(text)}`);
  }
  return value;
}

async function main(argv: string[]): Promise<number> {
  let turnId: string;
  let client: TurnkeeperClient;
  let settings: { afterSeq: number; idleMs: number; deadlineMs: number };
  try {
    const { values, positionals } = parseArgs({
      args: argv,
      allowPositionals: true,
      options: {
        address: { type: "string" },
        tls: { type: "boolean", default: false },
        "after-seq": { type: "string" },
        "idle-seconds": { type: "string" },
        "deadline-seconds": { type: "string" },
        help: { type: "boolean", short: "h", default: false },
      },
    });
    if (values.help) {
      process.stdout.write(`${USAGE}\n`);
      return 0;
    }
    if (positionals.length !== 1 || positionals[0] === "") {
      throw new TypeError("expected exactly one TURN_ID");
    }
    turnId = positionals[0];
    settings = {
      afterSeq: number("--after-seq", values["after-seq"], 0),
      idleMs: number("--idle-seconds", values["idle-seconds"], 30) * 1000,
      deadlineMs: number("--deadline-seconds", values["deadline-seconds"], 900) * 1000,
    };
    const overrides = {
      ...(values.address ? { address: values.address } : {}),
      ...(values.tls ? { tls: true } : {}),
    };
    client = new TurnkeeperClient(connectionFromEnv(process.env, overrides));
  } catch (error) {
    process.stderr.write(`turnkeeper-follow: ${(error as Error).message}\n${USAGE}\n`);
    return 2;
  }
  const controller = new AbortController();
  let stoppedBy = 0;
  let closedOutput = false;
  // A reader that left (`turnkeeper-follow ID | head`): stop following and end with 0,
  // without a stack trace, as the Python CLI does on a broken pipe.
  process.stdout.on("error", (error: NodeJS.ErrnoException) => {
    if (error.code !== "EPIPE") {
      throw error;
    }
    closedOutput = true;
    controller.abort();
  });
  for (const [name, code] of [
    ["SIGINT", 130],
    ["SIGTERM", 143],
  ] as const) {
    process.on(name, () => {
      stoppedBy = code;
      controller.abort();
    });
  }
  try {
    const result = await followTurn(client, turnId, {
      ...settings,
      signal: controller.signal,
      onFrame: (frame) => {
        if (!closedOutput) {
          process.stdout.write(`${JSON.stringify(frame)}\n`);
        }
      },
    });
    if (result.outcome === "unknown") {
      process.stderr.write(`turnkeeper-follow: the service never saw turn ${turnId}\n`);
    } else if (result.outcome === "deadline") {
      process.stderr.write(`turnkeeper-follow: deadline passed; the turn was last ${result.state ?? "unreachable"}\n`);
    }
    if (closedOutput) {
      return 0;
    }
    return result.outcome === "aborted" ? stoppedBy || EXIT_CODES.aborted : EXIT_CODES[result.outcome];
  } catch (error) {
    if (closedOutput) {
      return 0;
    }
    const code = codeOf(error);
    process.stderr.write(`turnkeeper-follow: ${messageOf(error)}${code === undefined ? "" : ` (${codeName(code)})`}\n`);
    return 1;
  } finally {
    client.close();
  }
}

// Set the exit code and let stdout drain, rather than process.exit() cutting it off.
process.exitCode = await main(process.argv.slice(2));
