// Shared fixtures of the unit tests (not a test file itself).

import { create } from "@bufbuild/protobuf";

import * as pb from "../src/gen/converge/worker/v1/worker_pb.js";
import type { Logger, Provider, WorkerOptions } from "../src/worker/index.js";
import { providersOf, settingsOf } from "../src/worker/options.js";
import { WorkerState } from "../src/worker/state.js";

/** A logger that keeps every record, for assertions and quiet test output. */
export function memoryLogger(): Logger & { lines: string[] } {
  const lines: string[] = [];
  const keep = (level: string) => (message: string) => {
    lines.push(`${level} ${message}`);
  };
  return { lines, debug: keep("debug"), info: keep("info"), warn: keep("warn"), error: keep("error") };
}

/** A worker state for `providers`, with a silent logger unless one is given. */
export function stateFor(providers: Provider[], options: Partial<WorkerOptions> = {}): WorkerState {
  const settings = settingsOf({ logger: memoryLogger(), ...options, providers });
  return new WorkerState(providersOf(providers), settings);
}

let leases = 0;

/** A WORK task for (kind, 1) with a fresh lease token. */
export function workTask(
  kind: string,
  init: { deadlineMs?: number; reaction?: string; spec?: pb.Resource["spec"] } = {},
): pb.StageTask {
  leases += 1;
  return create(pb.StageTaskSchema, {
    stage: pb.Stage.WORK,
    kind,
    kindVersion: 1,
    resource: { uid: `uid-${leases}`, kind, kindVersion: 1, name: `r${leases}`, generation: 1n, spec: init.spec ?? {} },
    generation: 1n,
    reaction: init.reaction ?? "work",
    trigger: pb.Trigger.SPEC_CHANGE,
    leaseToken: `lease-${String(leases).padStart(4, "0")}`,
    claimEpoch: 1n,
    manifestVersion: 5n,
    attempt: 1,
    ...(init.deadlineMs === undefined
      ? {}
      : {
          taskDeadline: {
            seconds: BigInt(Math.floor(init.deadlineMs / 1000)),
            nanos: (init.deadlineMs % 1000) * 1_000_000,
          },
        }),
    input: { case: "workInput", value: {} },
  });
}

/** Resolves with the next `count` results that land in the state's buffer. */
export function results(state: WorkerState, count: number): Promise<pb.StageComplete[]> {
  const got: pb.StageComplete[] = [];
  return new Promise((resolve) => {
    const check = () => {
      got.push(...state.takeResults());
      if (got.length >= count) {
        unsubscribe();
        resolve(got);
      }
    };
    const unsubscribe = state.resultsReady.subscribe(check);
    check();
  });
}

/** A promise and the functions that settle it. */
export function deferred<T = void>(): { promise: Promise<T>; resolve: (value: T) => void } {
  let resolve: (value: T) => void = () => {};
  const promise = new Promise<T>((r) => {
    resolve = r;
  });
  return { promise, resolve };
}
