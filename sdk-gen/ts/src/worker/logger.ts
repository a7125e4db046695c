// The logging seam of the runtime.

/** Structured fields attached to a log line. */
export type LogFields = Readonly<Record<string, unknown>>;

/** Where the runtime reports what it does. Every method must not throw. */
export interface Logger {
  debug(message: string, fields?: LogFields): void;
  info(message: string, fields?: LogFields): void;
  warn(message: string, fields?: LogFields): void;
  error(message: string, fields?: LogFields): void;
}

/** Log levels, least severe first. */
export type LogLevel = keyof Logger;

const LEVELS: readonly LogLevel[] = ["debug", "info", "warn", "error"];

function formatFields(fields: LogFields | undefined): string {
  if (fields === undefined) {
    return "";
  }
  let text = "";
  for (const [key, value] of Object.entries(fields)) {
    const shown =
      typeof value === "string" ? value : typeof value === "bigint" ? value.toString() : JSON.stringify(value);
    text += ` ${key}=${shown}`;
  }
  return text;
}

/**
 * A logger writing one line per record to stderr, dropping records below
 * `level`. The default of a worker is `stderrLogger("warn")`.
 */
export function stderrLogger(level: LogLevel = "info"): Logger {
  const threshold = LEVELS.indexOf(level);
  const write = (at: LogLevel) => (message: string, fields?: LogFields) => {
    if (LEVELS.indexOf(at) >= threshold) {
      process.stderr.write(
        `${new Date().toISOString()} ${at.toUpperCase()} converge-worker: ${message}${formatFields(fields)}\n`,
      );
    }
  };
  return { debug: write("debug"), info: write("info"), warn: write("warn"), error: write("error") };
}
