/**
 * Debian's Chromium, headless, driven by playwright-core: no sandbox (the tests run as
 * root), no GPU, no network chatter, a fresh profile directory per launch.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { type BrowserContext, chromium } from "playwright-core";

/** Where the browser is (WEBFPM_CHROMIUM overrides). */
export const CHROMIUM_PATH = process.env.WEBFPM_CHROMIUM ?? "/usr/bin/chromium";

/** The flags every launch uses. */
export const CHROMIUM_ARGS = [
  "--headless",
  "--no-sandbox",
  "--disable-gpu",
  "--disable-quic",
  "--no-first-run",
  "--disable-background-networking",
  "--disable-component-update",
  "--disable-sync",
];

/** Runs `body` with a fresh browser context; closes it and removes its profile after. */
export async function withChromium<T>(body: (context: BrowserContext) => Promise<T>): Promise<T> {
  const profile = mkdtempSync(join(tmpdir(), "webfpm-chromium-"));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM_PATH,
    headless: true,
    args: CHROMIUM_ARGS,
    viewport: { width: 1280, height: 900 },
  });
  try {
    return await body(context);
  } finally {
    await context.close();
    rmSync(profile, { recursive: true, force: true });
  }
}
