/**
 * A small shape checker for the JSON messages ranks exchange: each check returns
 * `null` when the value fits, or a phrase saying what is wrong ("must be an integer
 * >= 0"). Objects are strict: a field that is not in the shape is an error.
 */

/** A value check: `null` when it fits, else the problem, e.g. `"must be a boolean"`. */
export type Check = (value: unknown) => string | null;

/** A strict object shape: every field required, no other field allowed. */
export type Shape = Readonly<Record<string, Check>>;

/**
 * An integer at least `min`.
 *
 * @example
 * ```ts
 * integer(1)(0); // "must be an integer >= 1"
 * ```
 */
export function integer(min = 0): Check {
  return (v) =>
    typeof v === "number" && Number.isSafeInteger(v) && v >= min
      ? null
      : `must be an integer >= ${min}`;
}

/** A finite number at least `min`. */
export function finite(min = 0): Check {
  return (v) =>
    typeof v === "number" && Number.isFinite(v) && v >= min ? null : `must be a number >= ${min}`;
}

/** A boolean. */
export function boolean(v: unknown): string | null {
  return typeof v === "boolean" ? null : "must be a boolean";
}

/** A non-empty string of at most `maxLength` characters. */
export function text(maxLength = 4096): Check {
  return (v) =>
    typeof v === "string" && v.length > 0 && v.length <= maxLength
      ? null
      : `must be a non-empty string of at most ${maxLength} characters`;
}

/** One of the given literals. */
export function oneOf(...values: readonly (string | number)[]): Check {
  return (v) =>
    values.includes(v as string | number)
      ? null
      : `must be one of ${values.map((x) => JSON.stringify(x)).join(", ")}`;
}

/** `null` or a value that passes `check`. */
export function nullable(check: Check): Check {
  return (v) => {
    if (v === null) return null;
    const problem = check(v);
    return problem === null ? null : `${problem} or null`;
  };
}

/** An array of at least `minLength` and at most `maxLength` items, each passing `check`. */
export function arrayOf(check: Check, minLength = 0, maxLength = 1 << 16): Check {
  return (v) => {
    if (!Array.isArray(v) || v.length < minLength || v.length > maxLength) {
      return `must be an array of ${minLength}..${maxLength} items`;
    }
    for (let i = 0; i < v.length; i++) {
      const problem = check(v[i]);
      if (problem !== null) return `[${i}] ${problem}`;
    }
    return null;
  };
}

/** A strict object of the given shape. */
export function object(shape: Shape): Check {
  return (v) => checkObject(v, shape);
}

/** An object with 1..`maxKeys` keys of the given pattern, every value passing `check`. */
export function recordOf(check: Check, maxKeys = 64, keyPattern = /^[a-z][a-z0-9_]*$/): Check {
  return (v) => {
    if (!isPlainObject(v)) return "must be an object";
    const keys = Object.keys(v);
    if (keys.length === 0 || keys.length > maxKeys) return `must have 1..${maxKeys} fields`;
    for (const key of keys) {
      if (!keyPattern.test(key)) {
        return `has a field name '${key}' that does not match ${keyPattern}`;
      }
      const problem = check(v[key]);
      if (problem !== null) return `.${key} ${problem}`;
    }
    return null;
  };
}

/** Any JSON value except `undefined`. */
export function json(v: unknown): string | null {
  return v === undefined ? "is missing" : null;
}

/**
 * Checks `value` against a strict object shape.
 *
 * @example
 * ```ts
 * checkObject({ seq: -1 }, { seq: integer() }); // "field 'seq' must be an integer >= 0"
 * ```
 */
export function checkObject(value: unknown, shape: Shape): string | null {
  if (!isPlainObject(value)) return "must be a JSON object";
  for (const key of Object.keys(value)) {
    if (!(key in shape)) return `has an unexpected field '${key}'`;
  }
  for (const [key, check] of Object.entries(shape)) {
    if (!(key in value)) return `lacks the field '${key}'`;
    const problem = check(value[key]);
    if (problem !== null) return `field '${key}' ${problem}`;
  }
  return null;
}

function isPlainObject(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}
