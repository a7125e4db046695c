// converge's API errors, decoded: the gRPC code plus the google.rpc details
// the server attaches (ErrorInfo, BadRequest, RetryInfo).

import { durationMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";

import { BadRequestSchema, ErrorInfoSchema, RetryInfoSchema } from "./gen/google/rpc/error_details_pb.js";

/** One schema or input problem, from google.rpc.BadRequest. */
export interface FieldViolation {
  /** JSON pointer (or field path) of the offending value, e.g. `/spec/replicas`. */
  readonly field: string;
  /** What is wrong with it. */
  readonly description: string;
  /** Machine-readable cause, when the server gives one. */
  readonly reason: string;
}

/**
 * A failed converge call. Every error the thin client's helpers throw is one
 * of these; {@link ConvergeError.from} converts any error a raw service client
 * threw.
 */
export class ConvergeError extends Error {
  override readonly name = "ConvergeError";
  /** The gRPC status code. */
  readonly code: Code;
  /** UPPER_SNAKE reason of the google.rpc.ErrorInfo (e.g. `RESOURCE_NOT_FOUND`); empty if none. */
  readonly reason: string;
  /** Domain of the ErrorInfo (`converge.dev` for converge's own errors); empty if none. */
  readonly domain: string;
  /** ErrorInfo metadata (e.g. the kind and name concerned). */
  readonly metadata: Readonly<Record<string, string>>;
  /** Field violations of a google.rpc.BadRequest (schema violations: one per JSON pointer). */
  readonly fieldViolations: readonly FieldViolation[];
  /** How long the server asks the client to wait before retrying (google.rpc.RetryInfo), if it says. */
  readonly retryDelayMs: number | undefined;

  private constructor(source: ConnectError) {
    super(source.rawMessage, { cause: source });
    this.code = source.code;
    const info = source.findDetails(ErrorInfoSchema)[0];
    this.reason = info?.reason ?? "";
    this.domain = info?.domain ?? "";
    this.metadata = { ...info?.metadata };
    this.fieldViolations = source
      .findDetails(BadRequestSchema)
      .flatMap((bad) =>
        bad.fieldViolations.map((v) => ({ field: v.field, description: v.description, reason: v.reason })),
      );
    const retry = source.findDetails(RetryInfoSchema)[0]?.retryDelay;
    this.retryDelayMs = retry === undefined ? undefined : durationMs(retry);
  }

  /** The code's name, e.g. `NotFound`. */
  get codeName(): string {
    return Code[this.code];
  }

  /**
   * Converts what a call threw: a ConvergeError is returned as is, a
   * ConnectError is decoded, anything else becomes an `Unknown` error.
   */
  static from(err: unknown): ConvergeError {
    if (err instanceof ConvergeError) {
      return err;
    }
    return new ConvergeError(ConnectError.from(err));
  }
}

/** Runs a call and rethrows its failure as a {@link ConvergeError}. */
export async function decodeErrors<T>(call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    throw ConvergeError.from(err);
  }
}
