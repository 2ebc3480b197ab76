/**
 * The one wrapper every deno task's entry point goes through: it maps errors to exit
 * codes (2: usage or no adapter, 1: anything else) and messages a user can act on.
 *
 * ```ts
 * await runCli(async () => { ...; return 0; });
 * ```
 */
import process from "node:process";
import { NoAdapterError } from "../gpu/device.ts";
import { WgslCompileError } from "../gpu/wgsl.ts";
import { ModelOptionError } from "../model/model_option_error.ts";
import { UsageError } from "./args.ts";

/** Exit code for bad usage or input rejected before any work, and for a missing adapter. */
export const EXIT_USAGE = 2;

/** Runs `main`, exits with its code or with the code its error maps to. */
export async function runCli(main: () => Promise<number> | number): Promise<never> {
  let code: number;
  try {
    code = await main();
  } catch (err) {
    if (err instanceof UsageError) {
      console.error(`error: ${err.message}\n(--help lists the options)`);
      code = EXIT_USAGE;
    } else if (err instanceof NoAdapterError) {
      console.error(`error: ${err.message}`);
      code = EXIT_USAGE;
    } else if (err instanceof WgslCompileError) {
      console.error(`error: ${err.message}`);
      code = 1;
    } else if (err instanceof InputError || err instanceof ModelOptionError) {
      console.error(`error: ${err.message}`);
      code = EXIT_USAGE;
    } else {
      console.error(err instanceof Error ? err.stack ?? err.message : String(err));
      code = 1;
    }
  }
  process.exit(code);
}

/** Bad input found before any work started (a manifest, a checkpoint): exit code 2. */
export class InputError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "InputError";
  }
}
