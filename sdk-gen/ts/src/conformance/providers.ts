// The conformance kinds (conformance/README.md), implemented on the worker
// runtime: what each handler does is decided by the resource's spec.

import { setTimeout as sleep } from "node:timers/promises";

import {
  type ChildSpec,
  type Condition,
  type WorkerEvent,
  type DepEdge,
  type JsonObject,
  type JsonValue,
  type Outcome,
  type Provider,
  type ReactionRequest,
  TerminalError,
  TransientError,
  defineProvider,
} from "../worker/index.js";

/** The events a conf-leaf spec asks the worker to report (`spec.events`). */
function askedEvents(value: JsonValue | undefined): WorkerEvent[] {
  if (!Array.isArray(value)) {
    return [];
  }
  return value.flatMap((item): WorkerEvent[] => {
    if (item === null || typeof item !== "object" || Array.isArray(item)) {
      return [];
    }
    const text = (field: string): string => {
      const v = item[field];
      return typeof v === "string" ? v : "";
    };
    return [
      {
        category: text("category"),
        type: text("type") === "Warning" ? "Warning" : "Normal",
        reason: text("reason"),
        message: text("message"),
      },
    ];
  });
}

/** The `language` every status and log line of this SDK names. */
export const LANGUAGE = "typescript";

export const LEAF_KIND = "conf-leaf";
export const COMPOSITE_KIND = "conf-composite";

/** Receives one JSON log line per handler start/end and teardown. */
export type ConformanceLog = (line: JsonObject) => void;

function logLine(event: string, request: ReactionRequest): JsonObject {
  return {
    event,
    kind: request.kind.kind,
    name: request.resource.name,
    reaction: request.reaction,
    generation: request.generation,
    attempt: request.attempt,
    plan: request.plan,
    language: LANGUAGE,
  };
}

function num(value: JsonValue | undefined): number {
  return typeof value === "number" && Number.isFinite(value) ? value : 0;
}

function obj(value: JsonValue | undefined): JsonObject | undefined {
  return typeof value === "object" && value !== null && !Array.isArray(value) ? value : undefined;
}

/** Waits until the signal aborts, then throws its reason. */
function untilAborted(signal: AbortSignal): Promise<never> {
  return new Promise<never>((_, reject) => {
    if (signal.aborted) {
      reject(signal.reason);
      return;
    }
    signal.addEventListener("abort", () => reject(signal.reason), { once: true });
  });
}

/** A sleep the signal cuts short with its reason. */
async function cancellableSleep(ms: number, signal: AbortSignal): Promise<void> {
  try {
    await sleep(ms, undefined, { signal });
  } catch {
    throw signal.reason;
  }
}

async function work(request: ReactionRequest, log: ConformanceLog): Promise<Outcome> {
  const spec = request.resource.spec;
  log(logLine("start", request));
  if (spec["panic"] === true) {
    // Deliberately escapes the handler (no end line): the runtime must isolate it.
    throw new Error("conformance: panic requested by the spec");
  }
  try {
    if (spec["hang"] === true) {
      await untilAborted(request.signal);
    }
    const sleepMs = num(spec["sleepMs"]);
    if (sleepMs > 0) {
      await cancellableSleep(sleepMs, request.signal);
    }
    if (request.attempt <= num(spec["failTransient"])) {
      throw new TransientError(`conformance: transient failure at attempt ${request.attempt}`, {
        reason: "ConformanceTransient",
      });
    }
    if (spec["failTerminal"] === true) {
      throw new TerminalError("conformance: terminal failure", { reason: "ConformanceTerminal" });
    }
    const stored = request.resource.status;
    const status: JsonObject = {
      observedGeneration: request.generation,
      attempt: request.attempt,
      language: LANGUAGE,
      value: spec["value"] ?? null,
      config: request.effectiveConfig() ?? null,
      bundle: bundleText(request.effectiveBundle()),
      trigger: request.trigger,
    };
    if (stored?.["requeuedGeneration"] !== undefined) {
      status["requeuedGeneration"] = stored["requeuedGeneration"];
    }
    const requeueMs = num(spec["requeueMs"]);
    if (requeueMs > 0 && stored?.["requeuedGeneration"] !== request.generation) {
      return { status: { ...status, requeuedGeneration: request.generation }, requeueAfterMs: requeueMs };
    }
    const conditions: Condition[] = [{ type: "Ready", status: "True", reason: "Conformed" }];
    const livenessMs = num(spec["livenessMs"]);
    if (livenessMs > 0) {
      conditions.push({ type: "Reachable", status: "True", reason: "Probed", livenessMs });
    }
    return { status, conditions, events: askedEvents(spec["events"]) };
  } finally {
    log(logLine("end", request));
  }
}

function bundleText(bundle: Uint8Array): string | null {
  return bundle.length === 0 ? null : Buffer.from(bundle).toString("base64");
}

async function teardown(request: ReactionRequest, log: ConformanceLog): Promise<Outcome> {
  const teardownMs = num(request.resource.spec["teardownMs"]);
  if (teardownMs > 0) {
    await cancellableSleep(teardownMs, request.signal);
  }
  log(logLine("teardown", request));
  return {};
}

interface ChildEntry {
  name: string;
  spec: JsonObject;
  dependsOn: string[];
  flows: Array<{ from: string; source: string; field: string }>;
}

function childrenOf(spec: JsonObject): ChildEntry[] {
  const list = Array.isArray(spec["children"]) ? spec["children"] : [];
  return list.flatMap((item) => {
    const child = obj(item);
    if (child === undefined || typeof child["name"] !== "string") {
      return [];
    }
    const dependsOn = Array.isArray(child["dependsOn"])
      ? child["dependsOn"].filter((d): d is string => typeof d === "string")
      : [];
    const flows = (Array.isArray(child["flows"]) ? child["flows"] : []).flatMap((f) => {
      const flow = obj(f);
      return flow !== undefined &&
        typeof flow["from"] === "string" &&
        typeof flow["source"] === "string" &&
        typeof flow["field"] === "string"
        ? [{ from: flow["from"], source: flow["source"], field: flow["field"] }]
        : [];
    });
    return [{ name: child["name"], spec: obj(child["spec"]) ?? {}, dependsOn, flows }];
  });
}

async function compose(request: ReactionRequest, log: ConformanceLog): Promise<Outcome> {
  log(logLine("start", request));
  try {
    if (request.resource.spec["hang"] === true) {
      await untilAborted(request.signal);
    }
    if (!request.plan) {
      // What a real composer does to the world (say, reserving a name),
      // skipped when only planning.
      log(logLine("side-effect", request));
    }
    const entries = childrenOf(request.resource.spec);
    const children: ChildSpec[] = entries.map((c) => ({
      kind: LEAF_KIND,
      kindVersion: 1,
      name: c.name,
      spec: c.spec,
    }));
    const edges: DepEdge[] = entries.flatMap((c) => {
      const targets = [...new Set([...c.dependsOn, ...c.flows.map((f) => f.from)])];
      return targets.map((d) => ({
        dependent: { kind: LEAF_KIND, name: c.name },
        dependency: { kind: LEAF_KIND, name: d },
        valueFlows: c.flows
          .filter((f) => f.from === d)
          .map((f) => ({ dependentField: f.field, sourceField: f.source })),
      }));
    });
    return {
      children,
      edges,
      status: { phase: "composed", children: children.length, language: LANGUAGE },
    };
  } finally {
    log(logLine("end", request));
  }
}

function rollup(request: ReactionRequest, log: ConformanceLog): Outcome {
  log(logLine("start", request));
  try {
    const self = request.resource;
    const descendants = request.input.stage === "rollup" ? request.input.descendants : [];
    const direct = descendants.filter((d) => d.owner?.kind === self.kind && d.owner.name === self.name);
    const ready = direct.filter((d) => d.ready).length;
    const allReady = ready === direct.length;
    return {
      status: {
        phase: allReady ? "ready" : "degraded",
        children: direct.length,
        ready,
        language: LANGUAGE,
      },
      conditions: [
        {
          type: "Ready",
          status: allReady ? "True" : "False",
          reason: allReady ? "ChildrenReady" : "ChildrenNotReady",
        },
      ],
      healthy: allReady,
    };
  } finally {
    log(logLine("end", request));
  }
}

/** The providers of `conf-leaf` v1 and `conf-composite` v1, logging to `log`. */
export function conformanceProviders(log: ConformanceLog): Provider[] {
  return [
    defineProvider({
      kind: { kind: LEAF_KIND, version: 1 },
      reactions: {
        work: (request) => work(request, log),
        teardown: (request) => teardown(request, log),
      },
    }),
    defineProvider({
      kind: { kind: COMPOSITE_KIND, version: 1 },
      reactions: {
        compose: (request) => compose(request, log),
        rollup: (request) => rollup(request, log),
      },
    }),
  ];
}
