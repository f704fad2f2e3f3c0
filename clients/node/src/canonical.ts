// The one JSON text of a value, as the Python side writes it
// (`json.dumps(sort_keys=True, separators=(",", ":"), ensure_ascii=True)`): every
// object's keys sorted, no spaces, non-ASCII escaped; a bigint as its digits. Equal
// values give equal text, which graph fingerprints (runner/version.ts) and an
// effect's recorded arguments (effect/effect.ts) both rely on.

function byKey([a]: [string, unknown], [b]: [string, unknown]): number {
  return a < b ? -1 : a > b ? 1 : 0;
}

export function canonical(value: unknown): string {
  const text = JSON.stringify(value, (_key, item: unknown) => {
    if (typeof item === "bigint") {
      return item.toString();
    }
    if (item !== null && typeof item === "object" && !Array.isArray(item)) {
      return Object.fromEntries(Object.entries(item as Record<string, unknown>).sort(byKey));
    }
    return item;
  });
  return (text ?? "null").replace(/[\u007f-\uffff]/g, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`);
}
