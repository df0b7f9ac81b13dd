// The journal table: rows keyed by event id, newest (highest id) first,
// updated in place when an event comes again (processed, redelivered).

import type { Delivery, JournalEvent } from './api';
import { h } from './dom';
import { NONE, deliveryStatus, payloadSummary, prettyJSON } from './format';

export class EventTable {
  private rows = new Map<string, { ev: JournalEvent; tr: HTMLTableRowElement }>();

  constructor(
    private tbody: HTMLTableSectionElement,
    private time: (rfc3339: string) => string,
  ) {}

  clear(): void {
    this.rows.clear();
    this.tbody.replaceChildren();
  }

  has(id: string): boolean {
    return this.rows.has(id);
  }

  get size(): number {
    return this.rows.size;
  }

  /**
   * Adds ev or replaces its row. fresh marks a row that arrived live. A row
   * goes before the first row with a smaller id, so the table stays newest
   * first whatever order events come in.
   */
  upsert(ev: JournalEvent, fresh = false): void {
    const tr = this.render(ev);
    if (fresh) tr.classList.add('fresh');
    const old = this.rows.get(ev.id);
    if (old) {
      // Keep the reader's expanded payload expanded.
      const wasOpen = old.tr.querySelector('details')?.open;
      if (wasOpen) tr.querySelector('details')!.open = true;
      old.tr.replaceWith(tr);
    } else {
      const id = Number(ev.id);
      let before: HTMLTableRowElement | null = null;
      for (const r of this.tbody.rows) {
        if (Number(r.dataset.id) < id) {
          before = r;
          break;
        }
      }
      this.tbody.insertBefore(tr, before);
    }
    this.rows.set(ev.id, { ev, tr });
  }

  /**
   * Ids of up to limit rows, newest first, with a delivery still open
   * (pending or failed): a webhook's outcome comes after its event is
   * processed, so these rows are read again (updateDeliveries).
   */
  openIds(limit: number): string[] {
    const ids: string[] = [];
    for (const r of this.tbody.rows) {
      const row = this.rows.get(r.dataset.id ?? '');
      if (row?.ev.deliveries.some((d) => d.status === 'PENDING' || d.status === 'FAILED')) ids.push(row.ev.id);
      if (ids.length >= limit) break;
    }
    return ids;
  }

  /** Shows event id's deliveries as read now, if its row is still here. */
  updateDeliveries(id: string, deliveries: Delivery[]): void {
    const row = this.rows.get(id);
    if (row) this.upsert({ ...row.ev, deliveries });
  }

  remove(id: string): void {
    this.rows.get(id)?.tr.remove();
    this.rows.delete(id);
  }

  private render(ev: JournalEvent): HTMLTableRowElement {
    return h(
      'tr',
      { 'data-id': ev.id, 'data-type': ev.type },
      h('td', { class: 'num' }, h('button', { type: 'button', class: 'link', 'data-event-id': ev.id, title: 'Доставки события' }, ev.id)),
      h('td', { class: 'type' }, ev.type),
      h(
        'td',
        { class: 'object' },
        h('button', { type: 'button', class: 'link', 'data-entity': ev.entity, 'data-entity-id': ev.entityId }, ev.object),
      ),
      h(
        'td',
        { class: 'payload' },
        h('details', {}, h('summary', {}, payloadSummary(ev.type, ev.payload)), h('pre', {}, prettyJSON(ev.payload))),
        this.problems(ev),
      ),
      h('td', { class: 'time' }, this.time(ev.createdAt)),
      h('td', { class: 'time processed' }, ev.processedAt ? this.time(ev.processedAt) : NONE),
      h('td', { class: 'actor' }, ev.actor?.displayName ?? NONE),
    );
  }

  /**
   * Failed and dead deliveries, and while the event is unprocessed the
   * pending ones it waits for; the last error in full as tooltip.
   */
  private problems(ev: JournalEvent): HTMLElement | null {
    const shown: Delivery['status'][] = ev.processedAt ? ['FAILED', 'DEAD'] : ['PENDING', 'FAILED', 'DEAD'];
    const bad = ev.deliveries.filter((d) => shown.includes(d.status));
    if (!bad.length) return null;
    return h(
      'ul',
      { class: 'deliveries' },
      ...bad.map((d) => {
        let title = d.lastError ?? '';
        if (d.status === 'FAILED' && d.nextAttemptAt) title += `\nследующая попытка ${this.time(d.nextAttemptAt)}`;
        return h(
          'li',
          { class: d.status.toLowerCase(), title: title.trim() || undefined },
          `${d.subscriber.name}: ${deliveryStatus[d.status]}, попыток ${d.attempts}`,
          d.lastError ? h('span', { class: 'last-error' }, ` — ${d.lastError}`) : null,
        );
      }),
    );
  }
}
