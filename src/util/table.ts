/**
 * Plain-text table with right-aligned numbers, for CLI output.
 *
 * ```ts
 * console.log(formatTable(["kernel", "µs"], [["rmsnorm", "12.5"]]));
 * ```
 */
export function formatTable(
  header: readonly string[],
  rows: readonly (readonly string[])[],
): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const numeric = header.map((_, i) =>
    rows.length > 0 && rows.every((r) => /^[-+0-9.eNa%x]*$/.test(r[i] ?? ""))
  );
  const line = (cells: readonly string[]) =>
    cells.map((c, i) => (numeric[i] ? c.padStart(widths[i]) : c.padEnd(widths[i]))).join("  ")
      .trimEnd();
  return [line(header), line(widths.map((w) => "-".repeat(w))), ...rows.map(line)].join("\n");
}
