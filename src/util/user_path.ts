/**
 * Resolves a path the user typed against the directory they typed it in: `deno task`
 * runs in the project folder and passes the caller's folder as INIT_CWD; the offline
 * bundle's run script passes it as WEBFPM_CWD.
 *
 * ```ts
 * userPath("results/run.json"); // "/home/me/results/run.json" when called from /home/me
 * ```
 */
import { isAbsolute, resolve } from "node:path";
import process from "node:process";

export function userPath(path: string): string {
  if (isAbsolute(path)) return path;
  return resolve(process.env.WEBFPM_CWD ?? process.env.INIT_CWD ?? process.cwd(), path);
}
