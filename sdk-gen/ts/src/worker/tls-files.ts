// TLS material whose files are re-read at every connection to the broker.

import { X509Certificate } from "node:crypto";
import { readFileSync } from "node:fs";
import { isIP } from "node:net";
import type { Duplex } from "node:stream";
import { type SecureContext, connect, createSecureContext } from "node:tls";

import { WorkerConfigError } from "./errors.js";
import type { Logger } from "./logger.js";
import type { TlsOptions } from "./options.js";

type Item = "ca" | "cert" | "key";
const ITEMS: readonly Item[] = ["ca", "cert", "key"];
const FILE_OF = { ca: "caFile", cert: "certFile", key: "keyFile" } as const;

/** Whether any item of `tls` is given as a file. */
export function hasTlsFiles(tls: TlsOptions | undefined): boolean {
  return tls !== undefined && ITEMS.some((item) => tls[FILE_OF[item]] !== undefined);
}

function errorText(err: unknown): string {
  return err instanceof Error ? err.message : String(err);
}

/**
 * The secure context of a {@link TlsOptions} with files, rebuilt from them
 * whenever a new connection asks and they changed. Changed files that Node
 * refuses (no certificate in the bundle, a key that does not match its
 * certificate, a truncated PEM) or that cannot be read keep the last good
 * context; each such state is logged once, not at every connection.
 */
export class TlsFileMaterial {
  private current: SecureContext;
  /** The contents `current` was built from. */
  private applied: Buffer[];
  /** The contents last read; undefined after a failed read. */
  private seen: Buffer[] | undefined;

  /** Reads and checks the files now: with no earlier material, an unusable one is an error. */
  constructor(
    private readonly tls: TlsOptions,
    private readonly logger: Logger,
  ) {
    for (const item of ITEMS) {
      if (tls[item] !== undefined && tls[FILE_OF[item]] !== undefined) {
        throw new WorkerConfigError(`TLS options give both ${item} and ${FILE_OF[item]}`);
      }
    }
    if ((tls.cert === undefined && tls.certFile === undefined) !== (tls.key === undefined && tls.keyFile === undefined)) {
      throw new WorkerConfigError("a client certificate needs its key and vice versa");
    }
    try {
      this.applied = this.read();
      this.current = this.build(this.applied);
    } catch (err) {
      throw new WorkerConfigError(`unusable TLS files: ${errorText(err)}`);
    }
    this.seen = this.applied;
  }

  /** The context a new connection should use, after re-reading the files. */
  secureContext(): SecureContext {
    let contents: Buffer[];
    try {
      contents = this.read();
    } catch (err) {
      if (this.seen !== undefined) {
        this.logger.warn("TLS files unreadable; keeping the current material", { error: errorText(err) });
        this.seen = undefined;
      }
      return this.current;
    }
    if (same(contents, this.applied) || (this.seen !== undefined && same(contents, this.seen))) {
      return this.current;
    }
    this.seen = contents;
    try {
      this.current = this.build(contents);
    } catch (err) {
      this.logger.warn("changed TLS files refused; keeping the current material", { error: errorText(err) });
      return this.current;
    }
    this.applied = contents;
    this.logger.info("TLS material reloaded");
    return this.current;
  }

  /**
   * Opens a TLS connection for HTTP/2 to `authority` with the current
   * material: the `createConnection` of the worker's HTTP/2 session, called
   * for every new connection.
   */
  connect(authority: URL): Duplex {
    // URLs bracket IPv6 literals; sockets and server names do not.
    const host = authority.hostname.replace(/^\[(.*)\]$/, "$1");
    const serverName = this.tls.serverName ?? (isIP(host) === 0 ? host : undefined);
    return connect({
      host,
      port: authority.port === "" ? 443 : Number(authority.port),
      ALPNProtocols: ["h2"],
      secureContext: this.secureContext(),
      ...(serverName === undefined ? {} : { servername: serverName }),
    });
  }

  /** The items' contents in the order ca, cert, key: a file's bytes, the inline PEM, or empty. */
  private read(): Buffer[] {
    return ITEMS.map((item) => {
      const file = this.tls[FILE_OF[item]];
      const inline = this.tls[item];
      if (file !== undefined) {
        return readFileSync(file);
      }
      return inline === undefined ? Buffer.alloc(0) : Buffer.from(inline);
    });
  }

  private build([ca, cert, key]: Buffer[]): SecureContext {
    const given = (b: Buffer | undefined) => (b === undefined || b.length === 0 ? undefined : b);
    const caPem = given(ca);
    if (caPem !== undefined) {
      checkCaBundle(caPem);
    }
    const certPem = given(cert);
    const keyPem = given(key);
    return createSecureContext({
      ...(caPem === undefined ? {} : { ca: caPem }),
      ...(certPem === undefined ? {} : { cert: certPem }),
      ...(keyPem === undefined ? {} : { key: keyPem }),
    });
  }
}

/**
 * Throws unless `pem` is whole PEM certificates. Node skips what it cannot
 * parse in a CA bundle, so a half-written bundle would otherwise be taken and
 * leave the broker's CA out.
 */
function checkCaBundle(pem: Buffer): void {
  const text = pem.toString("latin1");
  const blocks = text.match(/-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g) ?? [];
  if (blocks.length === 0 || blocks.length !== text.split("-----BEGIN ").length - 1) {
    throw new Error("the CA bundle is not whole PEM certificates");
  }
  for (const block of blocks) {
    new X509Certificate(block);
  }
}

function same(a: readonly Buffer[], b: readonly Buffer[]): boolean {
  return a.length === b.length && a.every((buffer, i) => buffer.equals(b[i] ?? Buffer.alloc(0)));
}
