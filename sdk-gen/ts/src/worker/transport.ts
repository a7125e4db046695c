// The HTTP/2 gRPC transport a worker opens when it is given an address.

import type { Transport } from "@connectrpc/connect";
import { Http2SessionManager, createGrpcTransport } from "@connectrpc/connect-node";

import { MAX_MESSAGE_BYTES } from "./convert.js";
import { WorkerConfigError } from "./errors.js";
import type { TlsOptions } from "./options.js";
import type { TlsFileMaterial } from "./tls-files.js";

/** PEM material as Node's TLS options take it. */
function pem(value: string | Uint8Array): string | Buffer {
  return typeof value === "string" ? value : Buffer.from(value);
}

/** A transport and the function that tears its connection down. */
export interface OwnedTransport {
  readonly transport: Transport;
  readonly close: () => void;
}

/** The base URL of an address: a bare `host:port` gets http, or https when TLS material is given. */
export function baseUrlOf(address: string, tls: TlsOptions | undefined): string {
  const url = /^[a-z][a-z0-9+.-]*:\/\//i.test(address)
    ? address
    : `${tls === undefined ? "http" : "https"}://${address}`;
  let parsed: URL;
  try {
    parsed = new URL(url);
  } catch {
    throw new WorkerConfigError(`invalid broker address ${JSON.stringify(address)}`);
  }
  if (parsed.protocol !== "http:" && parsed.protocol !== "https:") {
    throw new WorkerConfigError(`invalid broker address ${JSON.stringify(address)}: the scheme must be http or https`);
  }
  if (tls !== undefined && parsed.protocol !== "https:") {
    throw new WorkerConfigError(
      `TLS options were given but the broker address ${JSON.stringify(address)} is plaintext http`,
    );
  }
  return url;
}

/**
 * A gRPC transport over one HTTP/2 connection to the broker. The broker sends
 * no keepalive of its own, so HTTP/2 PINGs (also on an idle connection) are
 * how a silently dead broker is noticed: the connection and its stream fail,
 * and the reconnect loop takes over.
 *
 * With `files` (TLS options that name files), every new connection is opened
 * through it, so each one handshakes with the files as they are then.
 */
export function createWorkerTransport(
  address: string,
  tls: TlsOptions | undefined,
  files?: TlsFileMaterial,
): OwnedTransport {
  const baseUrl = baseUrlOf(address, tls);
  const sessionManager = new Http2SessionManager(
    baseUrl,
    { pingIntervalMs: 10_000, pingTimeoutMs: 10_000, pingIdleConnection: true },
    files !== undefined
      ? { createConnection: (authority: URL) => files.connect(authority) }
      : tls === undefined
        ? {}
        : {
            ...(tls.ca === undefined ? {} : { ca: pem(tls.ca) }),
            ...(tls.cert === undefined ? {} : { cert: pem(tls.cert) }),
            ...(tls.key === undefined ? {} : { key: pem(tls.key) }),
            ...(tls.serverName === undefined ? {} : { servername: tls.serverName }),
          },
  );
  const transport = createGrpcTransport({
    baseUrl,
    sessionManager,
    readMaxBytes: MAX_MESSAGE_BYTES,
    writeMaxBytes: MAX_MESSAGE_BYTES,
  });
  return { transport, close: () => sessionManager.abort() };
}
