// The subscribers panel: each subscriber's lag (Subscriber.lag), read
// when the journal loads and every REFRESH_MS after.

import { gql } from './api';
import { $, h } from './dom';
import { NONE } from './format';

const REFRESH_MS = 10_000;

interface SubscriberLag {
  name: string;
  kind: 'BUILTIN' | 'WEBHOOK';
  paused: boolean;
  lag: {
    pending: number;
    oldestPendingAt: string | null;
    failing: number;
    dead: number;
    lastDeliveredAt: string | null;
  };
}

const QUERY = `query SubscriberLag {
  subscribers { name kind paused lag { pending oldestPendingAt failing dead lastDeliveredAt } }
}`;

/** The panel under #subscribers; hidden for a token that may not list subscribers. */
export class SubscriberPanel {
  private timer: number | undefined;
  private root = $('#subscribers');
  private body = $<HTMLTableSectionElement>('tbody', this.root);

  constructor(
    private token: string,
    private time: (rfc3339: string) => string,
  ) {}

  start(): void {
    this.stop();
    void this.refresh();
    this.timer = window.setInterval(() => void this.refresh(), REFRESH_MS);
  }

  stop(): void {
    if (this.timer !== undefined) window.clearInterval(this.timer);
    this.timer = undefined;
  }

  private async refresh(): Promise<void> {
    let subs: SubscriberLag[];
    try {
      subs = (await gql<{ subscribers: SubscriberLag[] }>(this.token, QUERY)).subscribers;
    } catch {
      this.root.hidden = true;
      return;
    }
    this.root.hidden = false;
    const t = (v: string | null) => (v ? this.time(v) : NONE);
    this.body.replaceChildren(
      ...subs.map((s) =>
        h(
          'tr',
          { class: s.lag.failing || s.lag.dead ? 'behind' : undefined, 'data-subscriber': s.name },
          h('td', {}, s.name, s.kind === 'WEBHOOK' ? ' (webhook)' : '', s.paused ? ' — приостановлен' : ''),
          h('td', { class: 'num' }, String(s.lag.pending)),
          h('td', {}, t(s.lag.oldestPendingAt)),
          h('td', { class: 'num' }, String(s.lag.failing)),
          h('td', { class: 'num' }, String(s.lag.dead)),
          h('td', {}, t(s.lag.lastDeliveredAt)),
        ),
      ),
    );
  }
}
