// The deep merge behind the effective provider config.

import type { JsonObject, JsonValue } from "./types.js";

function isObject(value: JsonValue | undefined): value is JsonObject {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * Deep-merges `override` over `base` and returns a new value: objects merge
 * per key, anything else (arrays included) is replaced by the override.
 * Neither argument is modified.
 */
export function mergeJson(base: JsonValue, override: JsonValue): JsonValue {
  if (!isObject(base) || !isObject(override)) {
    return override;
  }
  const merged: JsonObject = { ...base };
  for (const [key, value] of Object.entries(override)) {
    const existing = merged[key];
    merged[key] = existing === undefined ? value : mergeJson(existing, value);
  }
  return merged;
}
