// An event's deliveries, in the dialog the row's № opens: one row per
// subscriber that takes the event and, for an admin, every attempt of
// each webhook delivery, newest first (Delivery.attemptLog).

import { gql } from './api';
import { claimDialog, h } from './dom';
import { NONE, deliveryStatus } from './format';

/** One attempt of a webhook delivery (DeliveryAttempt). */
interface Attempt {
  attempt: number;
  at: string;
  status: string | null;
  durationMs: number | null;
  responseStatus: number | null;
  responseBody: string | null;
  error: string | null;
}

interface EventDelivery {
  status: 'PENDING' | 'DELIVERED' | 'FAILED' | 'DEAD';
  attempts: number;
  /** Admins only, as attemptLog. */
  lastError?: string | null;
  nextAttemptAt: string | null;
  deliveredAt: string | null;
  subscriber: { name: string; kind: 'BUILTIN' | 'WEBHOOK' };
  /** Admins only: the server refuses the whole query to other roles that ask. */
  attemptLog?: Attempt[];
}

interface EventDeliveries {
  id: string;
  type: string;
  object: string;
  createdAt: string;
  deliveries: EventDelivery[];
}

const QUERY = `query EventDeliveries($id: ID!, $admin: Boolean!) {
  event(id: $id) {
    id type object createdAt
    deliveries {
      status attempts lastError @include(if: $admin) nextAttemptAt deliveredAt subscriber { name kind }
      attemptLog @include(if: $admin) { attempt at status durationMs responseStatus responseBody error }
    }
  }
}`;

/**
 * Loads event #id's deliveries and shows them in dialog; with admin, each
 * webhook delivery's attempt log too. time formats with seconds.
 */
export async function showEvent(
  dialog: HTMLDialogElement,
  token: string,
  id: string,
  time: (rfc3339: string) => string,
  admin: boolean,
): Promise<void> {
  const current = claimDialog(dialog);
  const body = dialog.querySelector('.body')!;
  body.replaceChildren(h('p', { class: 'loading' }, 'Загрузка…'));
  dialog.showModal();
  let ev: EventDeliveries | null;
  try {
    ev = (await gql<{ event: EventDeliveries | null }>(token, QUERY, { id, admin })).event;
  } catch (err) {
    if (current()) body.replaceChildren(h('p', { class: 'error' }, `Не удалось загрузить: ${(err as Error).message}`));
    return;
  }
  if (!current()) return;
  if (!ev) {
    body.replaceChildren(h('p', {}, `Событие #${id} не найдено.`));
    return;
  }
  const logs = ev.deliveries.filter((d) => d.subscriber.kind === 'WEBHOOK' && d.attemptLog);
  body.replaceChildren(
    h('h2', {}, `Событие ${ev.id} `, h('span', { class: 'event-type' }, ev.type)),
    h('p', { class: 'object-ref' }, `${ev.object}, ${time(ev.createdAt)}`),
    ev.deliveries.length ? deliveriesTable(ev.deliveries, time) : h('p', {}, 'Это событие не берёт ни один подписчик.'),
    ...logs.map((d) =>
      h(
        'section',
        { class: 'attempt-log', 'data-subscriber': d.subscriber.name },
        h('h3', {}, `Попытки: ${d.subscriber.name}`),
        d.attemptLog!.length ? attemptsTable(d.attemptLog!, time) : h('p', {}, 'Попыток ещё не было.'),
      ),
    ),
  );
}

function deliveriesTable(deliveries: EventDelivery[], time: (rfc3339: string) => string): HTMLTableElement {
  return h(
    'table',
    { class: 'event-deliveries' },
    h('thead', {}, h('tr', {}, ...['Подписчик', 'Статус', 'Попыток', 'Когда', 'Последняя ошибка'].map((t) => h('th', {}, t)))),
    h(
      'tbody',
      {},
      ...deliveries.map((d) => {
        let when = NONE;
        if (d.deliveredAt) when = time(d.deliveredAt);
        else if (d.status === 'FAILED' && d.nextAttemptAt) when = `следующая попытка ${time(d.nextAttemptAt)}`;
        return h(
          'tr',
          { class: d.status.toLowerCase(), 'data-subscriber': d.subscriber.name },
          h('td', {}, d.subscriber.name, d.subscriber.kind === 'WEBHOOK' ? ' (webhook)' : ''),
          h('td', { class: 'status' }, deliveryStatus[d.status]),
          h('td', { class: 'num' }, String(d.attempts)),
          h('td', { class: 'time' }, when),
          h('td', {}, d.lastError ?? NONE),
        );
      }),
    ),
  );
}

/**
 * One row per attempt, newest first. An attempt without duration has no
 * answer recorded: in flight, or its server stopped or died (the error
 * then says which).
 */
function attemptsTable(log: Attempt[], time: (rfc3339: string) => string): HTMLTableElement {
  return h(
    'table',
    { class: 'attempts' },
    h('thead', {}, h('tr', {}, ...['№', 'Начало', 'Длительность', 'HTTP', 'Ошибка', 'Ответ'].map((t) => h('th', {}, t)))),
    h(
      'tbody',
      {},
      ...log.map((a) =>
        h(
          'tr',
          { class: a.status?.toLowerCase() ?? 'no-answer' },
          h('td', { class: 'num' }, String(a.attempt)),
          h('td', { class: 'time' }, time(a.at)),
          h('td', { class: 'num' }, a.durationMs == null ? NONE : `${a.durationMs} мс`),
          h('td', { class: 'num' }, a.responseStatus == null ? NONE : String(a.responseStatus)),
          h('td', { class: 'error-text' }, a.error ?? (a.durationMs == null ? 'ответа ещё нет' : NONE)),
          h(
            'td',
            { class: 'response' },
            a.responseBody ? h('details', {}, h('summary', {}, a.responseBody.split('\n', 1)[0].slice(0, 200)), h('pre', {}, a.responseBody)) : NONE,
          ),
        ),
      ),
    ),
  );
}
