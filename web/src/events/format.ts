// How the seed screens (demo/testdata) write things: 13.11.2026 17:20, {"lines": 1, "source": "shop"};
// and the Russian names of the API's codes.

/**
 * Formats RFC 3339 times as "13.11.2026 17:20" in one IANA time zone, or
 * with seconds as "13.11.2026 17:20:05" (attempts of a delivery come
 * seconds apart).
 */
export function timeFormatter(timeZone: string, seconds = false): (rfc3339: string) => string {
  const fmt = new Intl.DateTimeFormat('ru-RU', {
    timeZone,
    day: '2-digit',
    month: '2-digit',
    year: 'numeric',
    hour: '2-digit',
    minute: '2-digit',
    second: seconds ? '2-digit' : undefined,
    hourCycle: 'h23',
  });
  return (rfc3339) => {
    const parts: Record<string, string> = {};
    for (const p of fmt.formatToParts(new Date(rfc3339))) parts[p.type] = p.value;
    const time = `${parts.day}.${parts.month}.${parts.year} ${parts.hour}:${parts.minute}`;
    return seconds ? `${time}:${parts.second}` : time;
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

/** The events a document's status history is made of (the dialog; the Данные cell reads the second). */
export const EVENT_CREATED = 'doc.created';
export const EVENT_STATUS_CHANGED = 'doc.status_changed';

/** What a doc.status_changed carries; reason only when the transition takes one. */
export interface StatusChangedPayload {
  id: number;
  no: string;
  entity: string;
  from: string;
  to: string;
  reason?: string;
  /** The posted move whose reversal made the change; reason is the reversal's. */
  reversedMove?: string;
}

/**
 * Russian names of the API's codes, by field; an unknown code shows as it
 * is, so a status added to the server later still reads.
 */
export const names: Record<string, Record<string, string>> = {
  status: {
    // Sales orders.
    new: 'новый',
    accepted: 'принят',
    in_production: 'в производстве',
    shipped: 'отгружен',
    cancelled: 'отменён',
    // Production orders.
    planned: 'запланирован',
    released: 'запущен',
    completed: 'выполнен',
    // Purchase orders.
    open: 'открыт',
    partially_received: 'получен частично',
    received: 'получен',
    closed: 'закрыт',
    // Warehouse moves.
    draft: 'черновик',
    posted: 'проведён',
    reversed: 'сторнирован',
  },
  source: { manual: 'вручную', shop: 'интернет-магазин', crm: 'CRM' },
  kind: { RECEIPT: 'приход (ПР)', ISSUE_TO_PRODUCTION: 'выдача в цех (ВЦ)', SHIPMENT: 'отгрузка (ОТ)' },
};

/** The Russian name of code v of field key, v itself when unknown, NONE for null. */
export function named(key: string, v: unknown): string {
  if (v == null) return NONE;
  return names[key]?.[String(v)] ?? String(v);
}

/**
 * The Данные cell's one line: the payload as seedJSON, except that a
 * doc.status_changed reads as "ЗК-2026-000422: принят → отменён, причина:
 * …" — jsonb keeps its keys shortest first, so as JSON it would say "to"
 * before "from", and the codes mean little to a reader. A payload without
 * from and to shows as JSON.
 */
export function payloadSummary(type: string, payload: unknown): string {
  if (type !== EVENT_STATUS_CHANGED) return seedJSON(payload);
  const p = payload as Partial<StatusChangedPayload> | null;
  if (typeof p?.from !== 'string' || typeof p.to !== 'string') return seedJSON(payload);
  const change = `${named('status', p.from)} → ${named('status', p.to)}`;
  const reversal = p.reversedMove ? `, сторно ${p.reversedMove}` : '';
  const reason = p.reason ? `, причина: ${p.reason}` : '';
  return `${p.no ? `${p.no}: ` : ''}${change}${reversal}${reason}`;
}
