// converge's API errors, decoded: the gRPC code plus the google.rpc details
// the server attaches (ErrorInfo, BadRequest, RetryInfo).

import { durationMs } from "@bufbuild/protobuf/wkt";
import { Code, ConnectError } from "@connectrpc/connect";

import { ErrorReason } from "./gen/converge/v1/error_reason_pb.js";
import { BadRequestSchema, ErrorInfoSchema, RetryInfoSchema } from "./gen/google/rpc/error_details_pb.js";

export { ErrorReason } from "./gen/converge/v1/error_reason_pb.js";

/**
 * The reason the server sends for `reason` (google.rpc.ErrorInfo carries a
 * string): the name of the converge.v1.ErrorReason value without its
 * `ERROR_REASON_` prefix, which is the generated enum's member name
 * (`reasonName(ErrorReason.RESOURCE_NOT_FOUND)`). Empty for UNSPECIFIED and
 * numbers the enum does not define.
 */
export function reasonName(reason: ErrorReason): string {
  const name: unknown = (ErrorReason as unknown as Record<number, unknown>)[reason];
  return typeof name === "string" && reason !== ErrorReason.UNSPECIFIED ? name : "";
}

/**
 * The {@link ErrorReason} of a reason as sent; `ErrorReason.UNSPECIFIED` for
 * an empty one and for reasons this SDK does not know (a newer server's).
 */
export function parseReason(reason: string): ErrorReason {
  if (reason === "" || reason === "UNSPECIFIED" || !Object.hasOwn(ErrorReason, reason)) {
    return ErrorReason.UNSPECIFIED;
  }
  const value: unknown = (ErrorReason as unknown as Record<string, unknown>)[reason];
  return typeof value === "number" ? (value as ErrorReason) : ErrorReason.UNSPECIFIED;
}

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
  /**
   * The google.rpc.ErrorInfo reason as sent; empty if none. Compare
   * {@link ConvergeError.errorReason} (or use {@link hasReason}) instead of
   * this string; it is for display and for reasons newer than this SDK.
   */
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

  /** The reason as an {@link ErrorReason}; `UNSPECIFIED` if none, or one this SDK does not know. */
  get errorReason(): ErrorReason {
    return parseReason(this.reason);
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

/**
 * Whether what a call threw (a {@link ConvergeError}, or a ConnectError from a
 * raw service client, also as the `cause` of another error) carries `reason`:
 * `hasReason(err, ErrorReason.RESOURCE_NOT_FOUND)`. Always false for
 * `ErrorReason.UNSPECIFIED`.
 */
export function hasReason(err: unknown, reason: ErrorReason): boolean {
  if (reason === ErrorReason.UNSPECIFIED) {
    return false;
  }
  let seen: unknown = err;
  for (let depth = 0; depth < 32 && seen !== undefined && seen !== null; depth++) {
    if (seen instanceof ConvergeError) {
      return seen.errorReason === reason;
    }
    if (seen instanceof ConnectError) {
      return parseReason(seen.findDetails(ErrorInfoSchema)[0]?.reason ?? "") === reason;
    }
    seen = seen instanceof Error ? seen.cause : undefined;
  }
  return false;
}

/** Runs a call and rethrows its failure as a {@link ConvergeError}. */
export async function decodeErrors<T>(call: () => Promise<T>): Promise<T> {
  try {
    return await call();
  } catch (err) {
    throw ConvergeError.from(err);
  }
}
