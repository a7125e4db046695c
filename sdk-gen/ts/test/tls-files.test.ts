import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { type TLSSocket, createServer } from "node:tls";

import { WorkerConfigError } from "../src/worker/index.js";
import { TlsFileMaterial } from "../src/worker/tls-files.js";
import { memoryLogger } from "./helpers.js";

// Certificates made with the openssl command line (Node has no API that makes
// certificates): a CA, a server certificate for 127.0.0.1 and two clients.
const dir = mkdtempSync(join(tmpdir(), "converge-tls-"));
const pki = (name: string) => readFileSync(join(dir, name));
function openssl(...args: string[]): void {
  execFileSync("openssl", args, { cwd: dir, stdio: "ignore" });
}

before(() => {
  const ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"];
  openssl("req", "-x509", ...ec, "-keyout", "ca.key", "-out", "ca.pem", "-subj", "/CN=test CA", "-days", "1");
  writeFileSync(join(dir, "server.ext"), "subjectAltName=IP:127.0.0.1\n");
  for (const name of ["server", "worker-a", "worker-b"]) {
    openssl("req", ...ec, "-keyout", `${name}.key`, "-out", `${name}.csr`, "-subj", `/CN=${name}`);
    openssl(
      "x509", "-req", "-in", `${name}.csr`, "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
      "-out", `${name}.crt`, "-days", "1", ...(name === "server" ? ["-extfile", "server.ext"] : []),
    );
  }
});
after(() => rmSync(dir, { recursive: true, force: true }));

/** A TLS server that requires a client certificate; resolves each connection's client CN. */
function server(): Promise<{ url: URL; next: () => Promise<string>; close: () => void }> {
  const names: string[] = [];
  const waiters: ((name: string) => void)[] = [];
  const srv = createServer(
    { cert: pki("server.crt"), key: pki("server.key"), ca: pki("ca.pem"), requestCert: true, ALPNProtocols: ["h2"] },
    (socket: TLSSocket) => {
      const name = String(socket.getPeerCertificate().subject?.CN ?? "");
      const waiter = waiters.shift();
      if (waiter === undefined) {
        names.push(name);
      } else {
        waiter(name);
      }
      socket.end();
    },
  );
  return new Promise((resolve) => {
    srv.listen(0, "127.0.0.1", () => {
      const address = srv.address();
      const port = typeof address === "object" && address !== null ? address.port : 0;
      resolve({
        url: new URL(`https://127.0.0.1:${port}`),
        next: () => {
          const name = names.shift();
          return name !== undefined ? Promise.resolve(name) : new Promise((r) => waiters.push(r));
        },
        close: () => srv.close(),
      });
    });
  });
}

/**
 * Connects once through `material`; resolves with the socket once the client
 * side of the handshake is done. (In TLS 1.3 the server checks the client
 * certificate after that: close the socket only once the server has.)
 */
function handshake(material: TlsFileMaterial, url: URL): Promise<TLSSocket> {
  return new Promise((resolve, reject) => {
    const socket = material.connect(url) as TLSSocket;
    socket.once("secureConnect", () => resolve(socket));
    socket.once("error", reject);
  });
}

describe("TLS files", () => {
  it("are re-read at every connection and keep the last good material mid-rotation", async () => {
    const work = mkdtempSync(join(tmpdir(), "converge-tls-work-"));
    const files = { caFile: join(work, "ca.pem"), certFile: join(work, "tls.crt"), keyFile: join(work, "tls.key") };
    const install = (name: string) => {
      writeFileSync(files.keyFile, pki(`${name}.key`));
      writeFileSync(files.certFile, pki(`${name}.crt`));
    };
    writeFileSync(files.caFile, pki("ca.pem"));
    install("worker-a");
    const logger = memoryLogger();
    const material = new TlsFileMaterial(files, logger);
    const srv = await server();
    try {
      const presented = async () => {
        const socket = await handshake(material, srv.url);
        const name = await srv.next();
        socket.destroy();
        return name;
      };
      assert.equal(await presented(), "worker-a");
      writeFileSync(files.keyFile, pki("worker-b.key"));
      assert.equal(await presented(), "worker-a", "a new key beside the old certificate");
      writeFileSync(files.certFile, pki("worker-b.crt").subarray(0, 100));
      assert.equal(await presented(), "worker-a", "a half-written certificate");
      rmSync(files.certFile);
      assert.equal(await presented(), "worker-a", "an absent certificate");
      writeFileSync(files.certFile, pki("worker-b.crt"));
      assert.equal(await presented(), "worker-b", "the rotated keypair");
      assert.equal(logger.lines.filter((l) => l.startsWith("warn")).length, 3, logger.lines.join("\n"));

      // A bundle that no longer holds the server's CA refuses the server.
      writeFileSync(files.caFile, pki("worker-a.crt"));
      await assert.rejects(handshake(material, srv.url), /certificate/);
    } finally {
      srv.close();
      rmSync(work, { recursive: true, force: true });
    }
  });

  it("that are unusable when the worker is built are a configuration error", () => {
    const work = mkdtempSync(join(tmpdir(), "converge-tls-bad-"));
    try {
      writeFileSync(join(work, "ca.pem"), pki("ca.pem").subarray(0, 200));
      assert.throws(() => new TlsFileMaterial({ caFile: join(work, "ca.pem") }, memoryLogger()), WorkerConfigError);
      assert.throws(() => new TlsFileMaterial({ caFile: join(work, "absent.pem") }, memoryLogger()), WorkerConfigError);
      assert.throws(
        () => new TlsFileMaterial({ caFile: join(dir, "ca.pem"), certFile: join(dir, "worker-a.crt") }, memoryLogger()),
        WorkerConfigError,
      );
      assert.throws(
        () => new TlsFileMaterial({ ca: pki("ca.pem"), caFile: join(dir, "ca.pem") }, memoryLogger()),
        WorkerConfigError,
      );
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  });
});
