// Convenience calls over ResourceService: apply, get, explain, paginated list,
// a resuming watch, delete. Every failure is a ConvergeError.

import type { MessageInitShape } from "@bufbuild/protobuf";
import { Code, type Client } from "@connectrpc/connect";
import { setTimeout as sleep } from "node:timers/promises";

import type { Resource } from "./gen/converge/v1/resource_pb.js";
import {
  type ApplyResourceRequest,
  type ApplyResourceRequestSchema,
  type ExplainResourceResponse,
  type ListResourcesRequest,
  type ListResourcesRequestSchema,
  ResourceService,
  type WatchResourcesRequest,
  type WatchResourcesRequestSchema,
  type WatchResourcesResponse,
} from "./gen/converge/v1/resource_service_pb.js";
import { ConvergeError, decodeErrors } from "./errors.js";
import { Backoff } from "./worker/backoff.js";

/** What {@link Resources.apply} takes: the ApplyResource request fields. */
export type ApplyInput = Exclude<MessageInitShape<typeof ApplyResourceRequestSchema>, ApplyResourceRequest>;

/** The filters of a list: every ListResources field except the page cursor. */
export type ListFilter = Omit<
  Exclude<MessageInitShape<typeof ListResourcesRequestSchema>, ListResourcesRequest>,
  "pageToken"
>;

/** The filters and start position of a watch (WatchResources request fields). */
export type WatchInput = Exclude<MessageInitShape<typeof WatchResourcesRequestSchema>, WatchResourcesRequest>;

/** Per-call options of the helpers. */
export interface CallOptions {
  /** Aborts the call (a list or watch iteration simply ends). */
  signal?: AbortSignal;
  /** Deadline of each unary call in milliseconds (default 10 s). */
  timeoutMs?: number;
}

/** Options of {@link Resources.watch}. */
export interface WatchOptions {
  /** Ends the watch (the iteration returns). */
  signal?: AbortSignal;
  /**
   * Reconnect from the last position received when the stream ends or fails
   * with UNAVAILABLE, RESOURCE_EXHAUSTED or INTERNAL (default true). Other
   * errors, including OUT_OF_RANGE (the position left the retained log: start
   * over without `resourceVersion` for a fresh snapshot), end the watch with
   * a {@link ConvergeError}.
   */
  resume?: boolean;
  /** First reconnect delay (default 200 ms); doubles up to `backoffMaxMs` (default 10 s), reset by each message. */
  backoffBaseMs?: number;
  backoffMaxMs?: number;
}

/** Options of {@link Resources.delete}. */
export interface DeleteOptions extends CallOptions {
  /** Succeed with undefined instead of NOT_FOUND when the resource does not exist. */
  allowMissing?: boolean;
  /** Delete only if the stored etag equals this. */
  etag?: string;
  /** Idempotency key. */
  requestId?: string;
}

const DEFAULT_TIMEOUT_MS = 10_000;

/** Codes after which a watch resumes from its last position. */
const RESUMABLE = new Set([Code.Unavailable, Code.ResourceExhausted, Code.Internal]);

/** The Connect call options of a helper's {@link CallOptions}. */
export function callOptions(options: CallOptions | undefined): { timeoutMs: number; signal?: AbortSignal } {
  return {
    timeoutMs: options?.timeoutMs ?? DEFAULT_TIMEOUT_MS,
    ...(options?.signal === undefined ? {} : { signal: options.signal }),
  };
}

/** ResourceService calls with typed errors, pagination and watch resumption. */
export class Resources {
  constructor(private readonly client: Client<typeof ResourceService>) {}

  /** Creates or updates a resource (declarative; re-applying identical content is a no-op). */
  async apply(input: ApplyInput, options?: CallOptions): Promise<{ resource: Resource; created: boolean }> {
    const response = await decodeErrors(() => this.client.applyResource(input, callOptions(options)));
    return { resource: required(response.resource, "ApplyResource"), created: response.created };
  }

  /** Reads one resource; NOT_FOUND (`ErrorReason.RESOURCE_NOT_FOUND`) when it does not exist. */
  async get(kind: string, name: string, options?: CallOptions): Promise<Resource> {
    const response = await decodeErrors(() => this.client.getResource({ kind, name }, callOptions(options)));
    return required(response.resource, "GetResource");
  }

  /**
   * What holds a resource back from READY (or, while it is deleted, from
   * being removed): `resource`, `waitingFor` (most decisive first),
   * `nextDueTime` and `readTime`. NOT_FOUND when it does not exist.
   */
  async explain(kind: string, name: string, options?: CallOptions): Promise<ExplainResourceResponse> {
    return decodeErrors(() => this.client.explainResource({ kind, name }, callOptions(options)));
  }

  /**
   * Every resource matching the filters, newest created first, fetched page
   * by page as the iteration advances.
   */
  async *list(filter: ListFilter = {}, options?: CallOptions): AsyncGenerator<Resource, void, undefined> {
    let pageToken = "";
    do {
      if (options?.signal?.aborted) {
        return;
      }
      const page = await decodeErrors(() => this.client.listResources({ ...filter, pageToken }, callOptions(options)));
      yield* page.resources;
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
  }

  /**
   * Streams changes to the matching resources (after a snapshot, unless
   * `input` says otherwise). Each message carries a `resourceVersion`; the
   * watch remembers the last one and, after a broken stream, resumes right
   * after it, so no change is missed or repeated. Ends when `signal` aborts.
   */
  async *watch(
    input: WatchInput = {},
    options: WatchOptions = {},
  ): AsyncGenerator<WatchResourcesResponse, void, undefined> {
    const backoff = new Backoff(options.backoffBaseMs ?? 200, options.backoffMaxMs ?? 10_000);
    const resume = options.resume ?? true;
    let position = input.resourceVersion ?? "";
    for (;;) {
      // A resumed watch continues after the position, without a new snapshot.
      const request: WatchInput =
        position === "" ? input : { ...input, resourceVersion: position, sendInitialEvents: undefined };
      let failure: ConvergeError | undefined;
      try {
        const stream = this.client.watchResources(
          request,
          options.signal === undefined ? {} : { signal: options.signal },
        );
        for await (const message of stream) {
          if (message.resourceVersion !== "") {
            position = message.resourceVersion;
          }
          backoff.reset();
          yield message;
        }
      } catch (err) {
        failure = ConvergeError.from(err);
      }
      if (options.signal?.aborted) {
        return;
      }
      if (failure !== undefined && (!resume || !RESUMABLE.has(failure.code))) {
        throw failure;
      }
      if (!resume) {
        return;
      }
      try {
        await sleep(backoff.nextDelayMs(), undefined, options.signal === undefined ? {} : { signal: options.signal });
      } catch {
        return;
      }
    }
  }

  /**
   * Requests deletion (the resource and what it owns are torn down in order).
   * Returns the resource in phase DELETING, or undefined when `allowMissing`
   * was set and it did not exist.
   */
  async delete(kind: string, name: string, options: DeleteOptions = {}): Promise<Resource | undefined> {
    const response = await decodeErrors(() =>
      this.client.deleteResource(
        {
          kind,
          name,
          allowMissing: options.allowMissing ?? false,
          requestId: options.requestId ?? "",
          ...(options.etag === undefined ? {} : { etag: options.etag }),
        },
        callOptions(options),
      ),
    );
    return response.resource;
  }
}

function required(resource: Resource | undefined, method: string): Resource {
  if (resource === undefined) {
    throw ConvergeError.from(new Error(`${method} answered without a resource`));
  }
  return resource;
}
