// The operator's calls, with ConvergeErrors and paging: why a resource waits
// is `Resources.explain`; the fleet summary and actions on many resources
// (AdminService) are `Fleet`; the reactor deliveries (ReactorBindingService)
// are `Deliveries`.

import type { MessageInitShape } from "@bufbuild/protobuf";
import type { Client } from "@connectrpc/connect";

import {
  type ActOnResourcesRequest,
  type ActOnResourcesRequestSchema,
  type ActOnResourcesResponse,
  AdminService,
  type GetFleetSummaryRequest,
  type GetFleetSummaryRequestSchema,
  type GetFleetSummaryResponse,
} from "./gen/converge/v1/admin_service_pb.js";
import {
  type ListReactorDeliveriesRequest,
  type ListReactorDeliveriesRequestSchema,
  type ReactorDelivery,
  ReactorBindingService,
  type RedriveReactorDeliveriesRequest,
  type RedriveReactorDeliveriesRequestSchema,
  type RedriveReactorDeliveriesResponse,
} from "./gen/converge/v1/reactor_binding_service_pb.js";
import { decodeErrors } from "./errors.js";
import { type CallOptions, callOptions } from "./resources.js";

/** The filters of {@link Fleet.summary}: the GetFleetSummary request fields. */
export type FleetSummaryInput = Exclude<MessageInitShape<typeof GetFleetSummaryRequestSchema>, GetFleetSummaryRequest>;

/** What {@link Fleet.act} and {@link Fleet.actAll} take: the ActOnResources request fields. */
export type ActInput = Exclude<MessageInitShape<typeof ActOnResourcesRequestSchema>, ActOnResourcesRequest>;

/** The filters of {@link Deliveries.list}: every ListReactorDeliveries field except the page cursor. */
export type DeliveryFilter = Omit<
  Exclude<MessageInitShape<typeof ListReactorDeliveriesRequestSchema>, ListReactorDeliveriesRequest>,
  "pageToken"
>;

/**
 * What {@link Deliveries.redrive} and {@link Deliveries.redriveAll} take: the
 * RedriveReactorDeliveries request fields; `target` is
 * `{ case: "deliveryId" | "binding", value: string }` or
 * `{ case: "resources", value: { kind, labelSelector } }`.
 */
export type RedriveInput = Exclude<
  MessageInitShape<typeof RedriveReactorDeliveriesRequestSchema>,
  RedriveReactorDeliveriesRequest
>;

/**
 * The request id of call `page` (from 1) of a paged run whose first call has
 * `requestId`: itself for the first call and "" when it is empty, else
 * `${requestId}/${page}`. The server takes at most 128 bytes, so leave room
 * for the suffix.
 */
export function pageRequestId(requestId: string, page: number): string {
  return requestId === "" || page <= 1 ? requestId : `${requestId}/${page}`;
}

/**
 * Follows a run's continuation: one call per page, each with its own
 * request id, until next_page_token is empty.
 */
async function* pages<I extends { pageToken?: string; requestId?: string }, R extends { nextPageToken: string }>(
  input: I,
  options: CallOptions | undefined,
  call: (page: I) => Promise<R>,
): AsyncGenerator<R, void, undefined> {
  let pageToken = input.pageToken ?? "";
  for (let page = 1; ; page++) {
    if (options?.signal?.aborted) {
      return;
    }
    const response = await call({ ...input, pageToken, requestId: pageRequestId(input.requestId ?? "", page) });
    yield response;
    if (response.nextPageToken === "") {
      return;
    }
    pageToken = response.nextPageToken;
  }
}

/** AdminService calls: the fleet summary and actions on resources, with {@link ConvergeError}s. */
export class Fleet {
  constructor(private readonly client: Client<typeof AdminService>) {}

  /**
   * Counts of resources by kind, kind version and phase, the most common
   * failure reasons, the oldest resource of each unsettled phase and the
   * tasks no connected worker serves.
   */
  async summary(input: FleetSummaryInput = {}, options?: CallOptions): Promise<GetFleetSummaryResponse> {
    return decodeErrors(() => this.client.getFleetSummary(input, callOptions(options)));
  }

  /**
   * One call of ActOnResources: the action on one resource (`name`) or on at
   * most `pageSize` of those the filters match; `nextPageToken` continues
   * the run (see {@link Fleet.actAll}).
   */
  async act(input: ActInput, options?: CallOptions): Promise<ActOnResourcesResponse> {
    return decodeErrors(() => this.client.actOnResources(input, callOptions(options)));
  }

  /**
   * Runs the action on every resource the filters match, one call per
   * `pageSize` resources, following `nextPageToken` until it is empty, and
   * yields each call's answer (`actedCount` and `names` of that page;
   * `matchedCount` on the first). With `requestId` the first call uses it
   * and call n (from 2) `${requestId}/${n}` ({@link pageRequestId}), so
   * running the same loop again replays the pages already done.
   */
  actAll(input: ActInput, options?: CallOptions): AsyncGenerator<ActOnResourcesResponse, void, undefined> {
    return pages(input, options, (page) => this.act(page, options));
  }
}

/** ReactorBindingService delivery calls, with {@link ConvergeError}s and paging. */
export class Deliveries {
  constructor(private readonly client: Client<typeof ReactorBindingService>) {}

  /**
   * Every recorded delivery (pending and given up) matching the filters,
   * oldest first, fetched page by page as the iteration advances.
   */
  async *list(filter: DeliveryFilter = {}, options?: CallOptions): AsyncGenerator<ReactorDelivery, void, undefined> {
    let pageToken = "";
    do {
      if (options?.signal?.aborted) {
        return;
      }
      const page = await decodeErrors(() =>
        this.client.listReactorDeliveries({ ...filter, pageToken }, callOptions(options)),
      );
      yield* page.reactorDeliveries;
      pageToken = page.nextPageToken;
    } while (pageToken !== "");
  }

  /**
   * One call of RedriveReactorDeliveries: at most `limit` given-up deliveries
   * of the target become deliverable again; `nextPageToken` continues (see
   * {@link Deliveries.redriveAll}). One delivery that has not given up fails
   * with `ErrorReason.DELIVERY_NOT_GIVEN_UP`.
   */
  async redrive(input: RedriveInput, options?: CallOptions): Promise<RedriveReactorDeliveriesResponse> {
    return decodeErrors(() => this.client.redriveReactorDeliveries(input, callOptions(options)));
  }

  /**
   * Redrives every given-up delivery of the target, one call per `limit`,
   * following `nextPageToken` until it is empty, and yields each call's
   * answer (`count`, `first`). Request ids are derived per page as in
   * {@link Fleet.actAll}.
   */
  redriveAll(
    input: RedriveInput,
    options?: CallOptions,
  ): AsyncGenerator<RedriveReactorDeliveriesResponse, void, undefined> {
    return pages(input, options, (page) => this.redrive(page, options));
  }
}
