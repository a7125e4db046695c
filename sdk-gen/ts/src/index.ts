// A thin client over the generated converge service descriptors (protobuf-es) and
// Connect's gRPC transport (HTTP/2, talks to the tonic server).
//
//   const converge = createConvergeClient("127.0.0.1:50051");
//   const v = await converge.cluster.getVersion({});
//   for await (const r of converge.resources.list({ kind: "x" })) console.log(r.name);
//   converge.close();
//
// Generated messages live under ./gen (e.g. "@converge/sdk/gen/converge/v1/resource_pb");
// the worker runtime under ./worker ("@converge/sdk/worker").

import { type Client, ConnectError, type Transport, createClient } from "@connectrpc/connect";
import { Http2SessionManager, createGrpcTransport } from "@connectrpc/connect-node";

import { ClusterService } from "./gen/converge/v1/cluster_service_pb.js";
import { KindService } from "./gen/converge/v1/kind_service_pb.js";
import { OperationService } from "./gen/converge/v1/operation_service_pb.js";
import { ProviderConfigService } from "./gen/converge/v1/provider_config_service_pb.js";
import { ReactorBindingService } from "./gen/converge/v1/reactor_binding_service_pb.js";
import { AdminService } from "./gen/converge/v1/admin_service_pb.js";
import { ResourceService } from "./gen/converge/v1/resource_service_pb.js";
import { WorkerService } from "./gen/converge/worker/v1/worker_pb.js";
import { type ErrorInfo, ErrorInfoSchema } from "./gen/google/rpc/error_details_pb.js";
import { Deliveries, Fleet } from "./operator.js";
import { Resources } from "./resources.js";

export { Code, ConnectError } from "@connectrpc/connect";
export type { ErrorInfo } from "./gen/google/rpc/error_details_pb.js";
export { ConvergeError, ErrorReason, type FieldViolation, hasReason, parseReason, reasonName } from "./errors.js";
export {
  type ActInput,
  Deliveries,
  type DeliveryFilter,
  Fleet,
  type FleetSummaryInput,
  pageRequestId,
  type RedriveInput,
} from "./operator.js";
export {
  type ApplyInput,
  type CallOptions,
  type DeleteOptions,
  type ListFilter,
  Resources,
  type WatchInput,
  type WatchOptions,
} from "./resources.js";

/** Domain of the google.rpc.ErrorInfo that converge attaches to its errors. */
export const ERROR_DOMAIN = "converge.dev";

/** Typed clients for every converge service, sharing one transport. */
export interface ConvergeClient {
  readonly resource: Client<typeof ResourceService>;
  readonly operation: Client<typeof OperationService>;
  readonly kind: Client<typeof KindService>;
  readonly providerConfig: Client<typeof ProviderConfigService>;
  readonly reactorBinding: Client<typeof ReactorBindingService>;
  readonly admin: Client<typeof AdminService>;
  readonly cluster: Client<typeof ClusterService>;
  readonly worker: Client<typeof WorkerService>;
  /**
   * ResourceService conveniences: apply, get, explain, paginated list,
   * resuming watch, delete, with {@link ConvergeError}s.
   */
  readonly resources: Resources;
  /** AdminService conveniences: the fleet summary and actions on resources, paging through a run. */
  readonly fleet: Fleet;
  /** ReactorBindingService delivery conveniences: paginated list, redrive, paging through a redrive. */
  readonly deliveries: Deliveries;
  /** Closes the HTTP/2 connection this client opened (no-op for a caller's transport). */
  close(): void;
}

/**
 * Creates a client. `address` is "host:port" (plaintext HTTP/2) or a base URL
 * ("http://host:port", "https://host:port" for TLS). Pass a Transport instead to
 * control the connection yourself (interceptors, TLS options, ...).
 */
export function createConvergeClient(address: string | Transport): ConvergeClient {
  let transport: Transport;
  let close = () => {};
  if (typeof address === "string") {
    const baseUrl = /^https?:\/\//.test(address) ? address : `http://${address}`;
    const sessionManager = new Http2SessionManager(baseUrl);
    transport = createGrpcTransport({ baseUrl, sessionManager });
    close = () => sessionManager.abort();
  } else {
    transport = address;
  }
  const resource = createClient(ResourceService, transport);
  const admin = createClient(AdminService, transport);
  const reactorBinding = createClient(ReactorBindingService, transport);
  return {
    resource,
    operation: createClient(OperationService, transport),
    kind: createClient(KindService, transport),
    providerConfig: createClient(ProviderConfigService, transport),
    reactorBinding,
    admin,
    cluster: createClient(ClusterService, transport),
    worker: createClient(WorkerService, transport),
    resources: new Resources(resource),
    fleet: new Fleet(admin),
    deliveries: new Deliveries(reactorBinding),
    close,
  };
}

/**
 * The google.rpc.ErrorInfo (reason, domain, metadata) carried by a failed call
 * (from the grpc-status-details-bin trailer), or undefined.
 */
export function errorInfo(err: unknown): ErrorInfo | undefined {
  if (!(err instanceof ConnectError)) {
    return undefined;
  }
  return err.findDetails(ErrorInfoSchema)[0];
}
