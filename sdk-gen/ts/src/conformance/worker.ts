// The TypeScript conformance worker (conformance/README.md): serves conf-leaf
// v1 and conf-composite v1 on the SDK's runtime until SIGTERM or SIGINT, then
// drains. Exit status: 0 after a clean drain, 1 when the drain timed out, 2
// for bad configuration.
//
//   CONVERGE_BROKER_ADDR=http://127.0.0.1:50051 node dist/conformance/worker.js   (after npm run build, in sdk-gen/ts)
//
// TLS: CONVERGE_TLS_CA_FILE (the broker's CA bundle; enables TLS, with an
// https:// broker address) and CONVERGE_TLS_CERT_FILE + CONVERGE_TLS_KEY_FILE
// (the client certificate for mutual TLS), re-read at every connection.
//
// Tracing: OTEL_EXPORTER_OTLP_ENDPOINT set = export the handler spans over
// OTLP/gRPC with the OpenTelemetry SDK, a development dependency of the
// package (imported only then, so the worker runs without it otherwise).

import { closeSync, openSync, writeSync } from "node:fs";

import {
  DrainIncompleteError,
  SDK_VERSION,
  type TlsOptions,
  Worker,
  type WorkerOptions,
  stderrLogger,
} from "../worker/index.js";
import { type ConformanceLog, conformanceProviders } from "./providers.js";

class ConfigError extends Error {}

/** A non-negative integer environment variable, or undefined when unset. */
function intEnv(name: string, { min }: { min: number }): number | undefined {
  const text = process.env[name];
  if (text === undefined || text === "") {
    return undefined;
  }
  const value = Number(text);
  if (!/^\d+$/.test(text.trim()) || !Number.isSafeInteger(value) || value < min) {
    throw new ConfigError(`${name} must be an integer >= ${min}, got ${JSON.stringify(text)}`);
  }
  return value;
}

/** The TLS options the environment asks for; undefined = plaintext. */
function tlsEnv(): TlsOptions | undefined {
  const file = (name: string): string | undefined => {
    const path = process.env[name];
    return path === undefined || path === "" ? undefined : path;
  };
  const [ca, cert, key] = [file("CONVERGE_TLS_CA_FILE"), file("CONVERGE_TLS_CERT_FILE"), file("CONVERGE_TLS_KEY_FILE")];
  if ((cert === undefined) !== (key === undefined)) {
    throw new ConfigError("CONVERGE_TLS_CERT_FILE and CONVERGE_TLS_KEY_FILE go together");
  }
  if (ca === undefined) {
    if (cert !== undefined) {
      throw new ConfigError("CONVERGE_TLS_CERT_FILE needs CONVERGE_TLS_CA_FILE");
    }
    return undefined;
  }
  return {
    caFile: ca,
    ...(cert === undefined || key === undefined ? {} : { certFile: cert, keyFile: key }),
  };
}

/**
 * Registers the OpenTelemetry SDK (tracer provider, AsyncLocalStorage context
 * manager, W3C propagator) with an OTLP/gRPC exporter when
 * OTEL_EXPORTER_OTLP_ENDPOINT is set, as an application does to see its
 * handlers inside the broker's traces; returns what flushes and stops it.
 * The exporter reads the endpoint (an http:// one is plaintext) and the batch
 * processor its delay (OTEL_BSP_SCHEDULE_DELAY) from the environment.
 */
async function setupTracing(): Promise<() => Promise<void>> {
  const endpoint = process.env["OTEL_EXPORTER_OTLP_ENDPOINT"];
  if (endpoint === undefined || endpoint === "") {
    return async () => {};
  }
  const [{ NodeTracerProvider }, { BatchSpanProcessor }, { OTLPTraceExporter }, { resourceFromAttributes }] =
    await Promise.all([
      import("@opentelemetry/sdk-trace-node"),
      import("@opentelemetry/sdk-trace-base"),
      import("@opentelemetry/exporter-trace-otlp-grpc"),
      import("@opentelemetry/resources"),
    ]);
  const provider = new NodeTracerProvider({
    resource: resourceFromAttributes({ "service.name": "converge-conformance-typescript" }),
    spanProcessors: [new BatchSpanProcessor(new OTLPTraceExporter())],
  });
  provider.register();
  return () => provider.shutdown();
}

/**
 * Appends one line per record with a single write(2) on an O_APPEND file, so
 * lines of concurrent handlers (and processes) never interleave.
 */
function fileLog(path: string): { log: ConformanceLog; close: () => void } {
  const fd = openSync(path, "a");
  return {
    log: (line) => {
      writeSync(fd, `${JSON.stringify(line)}\n`);
    },
    close: () => closeSync(fd),
  };
}

function options(log: ConformanceLog): WorkerOptions {
  const address = process.env["CONVERGE_BROKER_ADDR"];
  if (address === undefined || address === "") {
    throw new ConfigError("CONVERGE_BROKER_ADDR is required (e.g. http://127.0.0.1:50051)");
  }
  const maxParallel = intEnv("CONFORMANCE_MAX_PARALLEL", { min: 1 }) ?? 4;
  const drainTimeoutMs = intEnv("CONFORMANCE_DRAIN_TIMEOUT_MS", { min: 0 }) ?? 10_000;
  const heartbeatIntervalMs = intEnv("CONFORMANCE_HEARTBEAT_MS", { min: 1 });
  const tls = tlsEnv();
  return {
    address,
    ...(tls === undefined ? {} : { tls }),
    providers: conformanceProviders(log),
    maxParallel,
    drainTimeoutMs,
    ...(heartbeatIntervalMs === undefined ? {} : { heartbeatIntervalMs }),
    agent: `converge-sdk-ts-conformance/${SDK_VERSION}`,
    logger: stderrLogger("info"),
  };
}

async function main(): Promise<number> {
  let worker: Worker;
  let sink: { log: ConformanceLog; close: () => void } = { log: () => {}, close: () => {} };
  try {
    const path = process.env["CONFORMANCE_LOG"];
    if (path !== undefined && path !== "") {
      sink = fileLog(path);
    }
    worker = new Worker(options(sink.log));
  } catch (err) {
    process.stderr.write(
      `conformance worker: bad configuration: ${err instanceof Error ? err.message : String(err)}\n`,
    );
    return 2;
  }
  let stopTracing: () => Promise<void>;
  try {
    stopTracing = await setupTracing();
  } catch (err) {
    process.stderr.write(`conformance worker: cannot set up tracing: ${err instanceof Error ? err.message : String(err)}\n`);
    sink.close();
    return 2;
  }
  const stop = () => void worker.shutdown().catch(() => {});
  process.once("SIGTERM", stop);
  process.once("SIGINT", stop);
  try {
    await worker.run();
    process.stderr.write("conformance worker: drained cleanly\n");
    return 0;
  } catch (err) {
    if (err instanceof DrainIncompleteError) {
      process.stderr.write(`conformance worker: ${err.message}\n`);
      return 1;
    }
    throw err;
  } finally {
    await stopTracing().catch(() => {});
    sink.close();
  }
}

process.exitCode = await main();
