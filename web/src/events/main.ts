// The "Поток событий" page: sign in, the journal newest first with its
// filters in the URL, more rows on scroll, processed events live.

import '../style.css';
import { clearToken, getToken, setToken } from '../session';
import { AuthError, deliveryFields, feedStart, gql, listEvents, type Delivery, type EventFilter, type JournalEvent } from './api';
import { showEvent } from './deliveries';
import { showDocument } from './details';
import { $ } from './dom';
import { timeFormatter } from './format';
import { LiveFeed, type LiveState } from './live';
import { SubscriberPanel } from './subscribers';
import { EventTable } from './table';

const PAGE_SIZE = 50;
/** How often, and for how many of the newest rows, open deliveries are read again. */
const DELIVERY_REFRESH_MS = 3000;
const OPEN_ROWS = 20;

/** What the server tells the page (GET /config.json). */
interface Config {
  timeZone: string;
}

const signInForm = $<HTMLFormElement>('#sign-in');
const journalEl = $('#journal');
const filtersForm = $<HTMLFormElement>('#filters');
const liveEl = $('#live');
const moreButton = $<HTMLButtonElement>('#more');
const endNote = $('#end');
const errorEl = $('#journal-error');
const signOutButton = $<HTMLButtonElement>('#sign-out');
const dialog = $<HTMLDialogElement>('#details');

// The filter lives in the URL: ?type=order.received&entity=sales_orders&processed=false
// (type may list several, comma-separated).
function filterFromURL(): EventFilter {
  const q = new URLSearchParams(location.search);
  const f: EventFilter = {};
  const types = (q.get('type') ?? '').split(',').filter(Boolean);
  if (types.length) f.types = types;
  const entity = q.get('entity');
  if (entity) f.entity = entity;
  const processed = q.get('processed');
  if (processed === 'true' || processed === 'false') f.processed = processed === 'true';
  return f;
}

function urlOf(f: EventFilter): string {
  const q = new URLSearchParams();
  if (f.types?.length) q.set('type', f.types.join(','));
  if (f.entity) q.set('entity', f.entity);
  if (f.processed !== undefined) q.set('processed', String(f.processed));
  const s = q.toString();
  return location.pathname + (s ? `?${s}` : '');
}

function filterFromForm(): EventFilter {
  const data = new FormData(filtersForm);
  const f: EventFilter = {};
  const type = String(data.get('type') ?? '');
  if (type) f.types = type.split(',');
  const entity = String(data.get('entity') ?? '');
  if (entity) f.entity = entity;
  const processed = String(data.get('processed') ?? '');
  if (processed) f.processed = processed === 'true';
  return f;
}

/** Shows f in the form, adding an option for a value the form does not list. */
function showFilter(f: EventFilter): void {
  const set = (name: string, value: string) => {
    const select = filtersForm.elements.namedItem(name) as HTMLSelectElement;
    if (value && ![...select.options].some((o) => o.value === value)) select.add(new Option(value, value));
    select.value = value;
  };
  set('type', f.types?.join(',') ?? '');
  set('entity', f.entity ?? '');
  set('processed', f.processed === undefined ? '' : String(f.processed));
}

const liveText: Record<LiveState, string> = {
  connecting: 'подключение…',
  live: 'в эфире',
  down: 'нет связи — переподключение…',
  failed: 'лента остановлена',
};

/** The signed-in journal: the table, its pages and the live feed. */
class Journal {
  private table: EventTable;
  private filter: EventFilter = {};
  private live: LiveFeed | undefined;
  /** Bumped on every reload; answers for an older generation are dropped. */
  private generation = 0;
  private endCursor: string | null = null;
  private hasNextPage = false;
  private loading = false;
  /** Smallest id loaded so far; live events below it wait for their page. */
  private oldestId = Infinity;
  /** Live events older than the loaded pages, by id, applied when their page loads. */
  private held = new Map<string, JournalEvent>();
  /** Re-reads the open deliveries of the newest rows (refreshOpenDeliveries). */
  private deliveryTimer: number;
  /** Whether the token is an admin's, who alone may read attempt logs and last errors; asked once. */
  private admin: Promise<boolean>;

  constructor(
    private token: string,
    private time: (rfc3339: string) => string,
    private timeSeconds: (rfc3339: string) => string,
    private signedOut: (message: string) => void,
  ) {
    this.table = new EventTable($<HTMLTableSectionElement>('.events tbody'), time);
    this.deliveryTimer = window.setInterval(() => void this.refreshOpenDeliveries(), DELIVERY_REFRESH_MS);
    this.admin = gql<{ me: { role: string } }>(token, '{ me { role } }').then(
      (d) => d.me.role === 'ADMIN',
      () => false,
    );
  }

  async load(filter: EventFilter): Promise<void> {
    const generation = ++this.generation;
    this.live?.stop();
    this.live = undefined;
    this.filter = filter;
    this.table.clear();
    this.held.clear();
    this.endCursor = null;
    this.hasNextPage = false;
    this.oldestId = Infinity;
    errorEl.textContent = '';
    try {
      // The feed's start is read before the list: see feedStart.
      const start = await feedStart(this.token);
      const admin = await this.admin;
      const page = await listEvents(this.token, filter, PAGE_SIZE, null, admin);
      if (generation !== this.generation) return;
      this.addPage(page.events, page.hasNextPage, page.endCursor);
      this.goLive(start, admin);
    } catch (err) {
      this.fail(err);
    }
  }

  async more(): Promise<void> {
    if (this.loading || !this.hasNextPage) return;
    this.loading = true;
    const generation = this.generation;
    try {
      const page = await listEvents(this.token, this.filter, PAGE_SIZE, this.endCursor, await this.admin);
      if (generation === this.generation) this.addPage(page.events, page.hasNextPage, page.endCursor);
    } catch (err) {
      this.fail(err);
    } finally {
      this.loading = false;
    }
  }

  stop(): void {
    this.generation++;
    this.live?.stop();
    this.live = undefined;
    window.clearInterval(this.deliveryTimer);
  }

  /**
   * Reads again the deliveries of the newest rows with one still open: an
   * event is processed before its webhooks answer, so a row that arrived
   * live learns here that a delivery failed or went dead.
   */
  private async refreshOpenDeliveries(): Promise<void> {
    const ids = this.table.openIds(OPEN_ROWS);
    if (!ids.length) return;
    const generation = this.generation;
    const selection = deliveryFields(await this.admin);
    const fields = ids.map((id, i) => `e${i}: event(id: ${JSON.stringify(id)}) { id deliveries { ${selection} } }`);
    let data: Record<string, { id: string; deliveries: Delivery[] } | null>;
    try {
      data = await gql(this.token, `{ ${fields.join(' ')} }`);
    } catch {
      return; // the next tick tries again
    }
    if (generation !== this.generation) return;
    for (const ev of Object.values(data)) if (ev) this.table.updateDeliveries(ev.id, ev.deliveries);
  }

  openObject(entity: string, id: string): void {
    void showDocument(dialog, this.token, entity, id, this.time);
  }

  async openEvent(id: string): Promise<void> {
    await showEvent(dialog, this.token, id, this.timeSeconds, await this.admin);
  }

  private addPage(events: JournalEvent[], hasNextPage: boolean, endCursor: string | null): void {
    for (const ev of events) {
      const later = this.held.get(ev.id);
      this.held.delete(ev.id);
      this.table.upsert(later && !ev.processedAt ? later : ev);
      this.oldestId = Math.min(this.oldestId, Number(ev.id));
    }
    this.hasNextPage = hasNextPage;
    this.endCursor = endCursor;
    moreButton.hidden = !hasNextPage;
    endNote.hidden = hasNextPage;
    endNote.textContent = this.table.size ? `Всего событий: ${this.table.size}.` : 'Событий нет.';
  }

  private goLive(start: string | null, admin: boolean): void {
    // Processed events only come live, so "unprocessed only" takes the feed
    // unfiltered by state and drops the rows that get processed.
    const { types, entity } = this.filter;
    this.live = new LiveFeed(this.token, { types, entity }, start, {
      event: (ev) => this.arrived(ev),
      state: (s, detail) => {
        liveEl.hidden = false;
        liveEl.dataset.state = s;
        liveEl.textContent = detail ? `${liveText[s]}: ${detail}` : liveText[s];
      },
      unauthorized: () => this.signedOut('Токен больше не принимается — войдите снова.'),
      resync: () => void this.load(this.filter),
    }, admin);
    this.live.start();
  }

  private arrived(ev: JournalEvent): void {
    if (this.filter.processed === false) {
      this.table.remove(ev.id);
      return;
    }
    if (this.table.has(ev.id) || !this.hasNextPage || Number(ev.id) > this.oldestId) {
      this.table.upsert(ev, true);
    } else {
      this.held.set(ev.id, ev);
    }
    endNote.textContent = `Всего событий: ${this.table.size}.`;
  }

  private fail(err: unknown): void {
    if (err instanceof AuthError) {
      this.signedOut('Токен не принят — войдите снова.');
      return;
    }
    errorEl.textContent = `Ошибка: ${(err as Error).message}`;
  }
}

async function main(): Promise<void> {
  const config: Config = await fetch('/config.json').then((r) => r.json());
  const time = timeFormatter(config.timeZone);
  const timeSeconds = timeFormatter(config.timeZone, true);
  document.documentElement.dataset.timeZone = config.timeZone;
  let journal: Journal | undefined;
  let panel: SubscriberPanel | undefined;

  const signedOut = (message: string) => {
    journal?.stop();
    journal = undefined;
    panel?.stop();
    panel = undefined;
    clearToken();
    journalEl.hidden = true;
    liveEl.hidden = true;
    signOutButton.hidden = true;
    signInForm.hidden = false;
    $('.error', signInForm).textContent = message;
  };

  const signedIn = (token: string) => {
    signInForm.hidden = true;
    journalEl.hidden = false;
    signOutButton.hidden = false;
    journal = new Journal(token, time, timeSeconds, signedOut);
    panel = new SubscriberPanel(token, time);
    panel.start();
    const f = filterFromURL();
    showFilter(f);
    void journal.load(f);
  };

  signInForm.addEventListener('submit', async (e) => {
    e.preventDefault();
    const token = String(new FormData(signInForm).get('token') ?? '').trim();
    const errEl = $('.error', signInForm);
    errEl.textContent = '';
    try {
      await gql(token, '{ events(first: 1) { pageInfo { hasNextPage } } }');
    } catch (err) {
      errEl.textContent = err instanceof AuthError ? 'Токен не принят.' : `Ошибка: ${(err as Error).message}`;
      return;
    }
    setToken(token);
    signInForm.reset();
    signedIn(token);
  });

  signOutButton.addEventListener('click', () => signedOut(''));

  filtersForm.addEventListener('change', () => {
    const f = filterFromForm();
    history.pushState(null, '', urlOf(f));
    void journal?.load(f);
  });

  window.addEventListener('popstate', () => {
    const f = filterFromURL();
    showFilter(f);
    void journal?.load(f);
  });

  $('.events tbody').addEventListener('click', (e) => {
    const button = (e.target as Element).closest<HTMLButtonElement>('button.link');
    if (!button) return;
    if (button.dataset.eventId) void journal?.openEvent(button.dataset.eventId);
    else journal?.openObject(button.dataset.entity!, button.dataset.entityId!);
  });

  moreButton.addEventListener('click', () => void journal?.more());
  new IntersectionObserver((entries) => {
    if (entries.some((e) => e.isIntersecting)) void journal?.more();
  }, { rootMargin: '400px' }).observe(moreButton);

  const token = getToken();
  if (token) signedIn(token);
  else signedOut('');
}

void main();
