// How to reach the turnkeeper service: address, TLS, client certificate, token.
//
// The same settings (and environment variables) as the Python client's
// ConnectionOptions, so one deployment's variables configure agents in both
// languages.

import { readFileSync } from "node:fs";

import type { RetryPolicy } from "./retry.js";

export interface ConnectionOptions {
  /** host:port of the service (default $TURNKEEPER_ADDRESS, then 127.0.0.1:50051). */
  address: string;
  /** Connect with TLS. Implied by any of the certificate options. */
  tls?: boolean;
  /** PEM roots to trust instead of the system's (a private CA). */
  rootCertificates?: string | Buffer;
  /** PEM client certificate and key, for a service that asks for mutual TLS. */
  clientCertificate?: string | Buffer;
  clientKey?: string | Buffer;
  /** Sent as `authorization: Bearer <token>` on every call. */
  bearerToken?: string;
  /** The deadline of a unary call; streams have none (a turn can run for long). */
  callTimeoutMs?: number;
  /** The retry of idempotent RPCs on UNAVAILABLE (retry.ts); maxAttempts 1: none. */
  retry?: RetryPolicy;
}

export const DEFAULT_ADDRESS = "127.0.0.1:50051";
/** The service answers from SQLite or PostgreSQL; 10 s means it is in trouble. */
export const DEFAULT_CALL_TIMEOUT_MS = 10_000;

const TRUE_WORDS = new Set(["1", "true", "yes", "on"]);

/**
 * Options from the environment, with the variables the Python client and CLI read:
 * TURNKEEPER_ADDRESS, TURNKEEPER_TLS, TURNKEEPER_TLS_CA, TURNKEEPER_TLS_CLIENT_CERT,
 * TURNKEEPER_TLS_CLIENT_KEY (file paths) and TURNKEEPER_TOKEN.
 */
export function connectionFromEnv(
  env: NodeJS.ProcessEnv = process.env,
  overrides: Partial<ConnectionOptions> = {},
): ConnectionOptions {
  const file = (name: string): Buffer | undefined => {
    const path = env[name];
    return path ? readFileSync(path) : undefined;
  };
  const options: ConnectionOptions = {
    address: env.TURNKEEPER_ADDRESS || DEFAULT_ADDRESS,
    tls: TRUE_WORDS.has((env.TURNKEEPER_TLS ?? "").trim().toLowerCase()),
    rootCertificates: file("TURNKEEPER_TLS_CA"),
    clientCertificate: file("TURNKEEPER_TLS_CLIENT_CERT"),
    clientKey: file("TURNKEEPER_TLS_CLIENT_KEY"),
    bearerToken: env.TURNKEEPER_TOKEN || undefined,
  };
  return { ...options, ...overrides };
}

/** True when the options ask for TLS, by the flag or by giving certificates. */
export function usesTls(options: ConnectionOptions): boolean {
  return Boolean(
    options.tls || options.rootCertificates || options.clientCertificate || options.clientKey,
  );
}

/** Checks that a person can act on, before any connection is tried. */
export function validateConnection(options: ConnectionOptions): void {
  if (!/^[^\s/]+:\d+$/.test(options.address) && !/^\[[0-9a-fA-F:]+\]:\d+$/.test(options.address)) {
    throw new TypeError(`address must be host:port, got ${JSON.stringify(options.address)}`);
  }
  if (Boolean(options.clientCertificate) !== Boolean(options.clientKey)) {
    throw new TypeError("clientCertificate and clientKey go together (mutual TLS needs both)");
  }
  if (options.bearerToken !== undefined && /[\r\n]/.test(options.bearerToken)) {
    throw new TypeError("bearerToken must be one line");
  }
}
