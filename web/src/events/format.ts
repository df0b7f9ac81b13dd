// How the seed screens (demo/testdata) write things: 13.11.2026 17:20, {"lines": 1, "source": "shop"}.

/** Formats RFC 3339 times as "13.11.2026 17:20" in one IANA time zone. */
export function timeFormatter(timeZone: string): (rfc3339: string) => string {
  const fmt = new Intl.DateTimeFormat('ru-RU', {
    timeZone,
    day: '2-digit',
    month: '2-digit',
    year: 'numeric',
    hour: '2-digit',
    minute: '2-digit',
    hourCycle: 'h23',
  });
  return (rfc3339) => {
    const parts: Record<string, string> = {};
    for (const p of fmt.formatToParts(new Date(rfc3339))) parts[p.type] = p.value;
    return `${parts.day}.${parts.month}.${parts.year} ${parts.hour}:${parts.minute}`;
  };
}

/**
 * One line of JSON spaced as PostgreSQL prints jsonb, as the seed shows
 * payloads: {"id": 46, "no": "ВЦ-2026-000045", "entity": "wh_move"}.
 */
export function seedJSON(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(seedJSON).join(', ')}]`;
  if (v !== null && typeof v === 'object') {
    const fields = Object.entries(v).map(([k, x]) => `${JSON.stringify(k)}: ${seedJSON(x)}`);
    return `{${fields.join(', ')}}`;
  }
  return JSON.stringify(v) ?? 'null';
}

/** Indented JSON for the expanded payload. */
export function prettyJSON(v: unknown): string {
  return JSON.stringify(v, null, 2);
}

/** The system itself, for an event without actor; and a missing time. */
export const NONE = '—';

/** Russian names of delivery statuses. */
export const deliveryStatus: Record<string, string> = {
  PENDING: 'ждёт',
  DELIVERED: 'доставлено',
  FAILED: 'ошибка',
  DEAD: 'не доставлено',
};
