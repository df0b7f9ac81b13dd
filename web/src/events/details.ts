// The document behind an event's object cell, in a dialog: its fields,
// its lines and its status history from the journal.

import { gql, listEvents, type JournalEvent } from './api';
import { claimDialog, h } from './dom';
import { EVENT_CREATED, EVENT_STATUS_CHANGED, NONE, named, type StatusChangedPayload } from './format';

interface Line {
  lineNo: number;
  sku: string;
  itemName: string;
  unit: string;
  quantity: string;
  price: string | null;
}

interface Doc {
  id: string;
  number: string;
  status: string;
  createdAt: string;
  lines?: Line[];
  [field: string]: unknown;
}

const LINES = 'lines { lineNo sku itemName unit quantity price }';

/** Per table: the query field, its selection, the title and the fields shown (label, key). */
const documents: Record<string, { field: string; select: string; title: string; fields: [string, string][] }> = {
  sales_orders: {
    field: 'salesOrder',
    select: `customer source externalId ${LINES}`,
    title: 'Заказ клиента',
    fields: [['Клиент', 'customer'], ['Источник', 'source'], ['Внешний номер', 'externalId']],
  },
  plan_prod_orders: {
    field: 'productionOrder',
    select: 'sku itemName unit quantity salesOrderId',
    title: 'Производственный заказ',
    fields: [['Изделие', 'itemName'], ['Артикул', 'sku'], ['Количество', 'quantity'], ['Ед.', 'unit'], ['Заказ клиента (id)', 'salesOrderId']],
  },
  wh_moves: {
    field: 'warehouseMove',
    select: `kind fromWarehouse toWarehouse purchaseOrderId productionOrderId salesOrderId reversalOfId ${LINES}`,
    title: 'Складское движение',
    fields: [
      ['Вид', 'kind'],
      ['Со склада', 'fromWarehouse'],
      ['На склад', 'toWarehouse'],
      ['Заказ поставщику (id)', 'purchaseOrderId'],
      ['Производственный заказ (id)', 'productionOrderId'],
      ['Заказ клиента (id)', 'salesOrderId'],
      ['Сторнирует движение (id)', 'reversalOfId'],
    ],
  },
  wh_purchase_orders: {
    field: 'purchaseOrder',
    select: `supplier ${LINES}`,
    title: 'Заказ поставщику',
    fields: [['Поставщик', 'supplier']],
  },
};

/** Events of one document read per request; the API's most. */
const HISTORY_PAGE = 500;

/** Loads the document entity #id with its status history and shows it in dialog. */
export async function showDocument(
  dialog: HTMLDialogElement,
  token: string,
  entity: string,
  id: string,
  time: (rfc3339: string) => string,
): Promise<void> {
  const current = claimDialog(dialog);
  const body = dialog.querySelector('.body')!;
  const kind = documents[entity];
  if (!kind) {
    body.replaceChildren(h('p', {}, `Нет карточки для таблицы ${entity}.`));
    dialog.showModal();
    return;
  }
  body.replaceChildren(h('p', { class: 'loading' }, 'Загрузка…'));
  dialog.showModal();
  // Asked for together with the document; its failure only costs the history.
  const history = historyOf(token, entity, id).catch((err: Error) => err);
  let doc: Doc | null;
  try {
    const data = await gql<Record<string, Doc | null>>(
      token,
      `query Document($id: ID!) { doc: ${kind.field}(id: $id) { id number status createdAt ${kind.select} } }`,
      { id },
    );
    doc = data.doc;
  } catch (err) {
    if (current()) body.replaceChildren(h('p', { class: 'error' }, `Не удалось загрузить: ${(err as Error).message}`));
    return;
  }
  if (!current()) return;
  if (!doc) {
    body.replaceChildren(h('p', {}, `${entity} #${id} не найден.`));
    return;
  }
  const rows: [string, string][] = [
    ['Статус', named('status', doc.status)],
    ['Создан', time(doc.createdAt)],
    ...kind.fields.map(([label, key]): [string, string] => [label, named(key, doc[key])]),
  ];
  const historyEl = h('section', { class: 'status-history' }, h('h3', {}, 'История статусов'), h('p', { class: 'loading' }, 'Загрузка…'));
  body.replaceChildren(
    h('h2', {}, `${kind.title} `, h('span', { class: 'doc-number' }, doc.number)),
    h('p', { class: 'object-ref' }, `${entity} #${doc.id}`),
    h('dl', {}, ...rows.flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])),
    historyEl,
  );
  if (doc.lines?.length) historyEl.before(linesTable(doc.lines));
  const events = await history;
  if (!current()) return;
  historyEl.lastElementChild!.replaceWith(
    events instanceof Error
      ? h('p', { class: 'error' }, `Не удалось загрузить историю: ${events.message}`)
      : historyTable(events, doc.status, time),
  );
}

/**
 * The document's doc.created and doc.status_changed events, oldest first,
 * every page of them: the journal lists newest first.
 */
async function historyOf(token: string, entity: string, id: string): Promise<JournalEvent[]> {
  const filter = { types: [EVENT_CREATED, EVENT_STATUS_CHANGED], entity, entityId: id };
  const events: JournalEvent[] = [];
  let after: string | null = null;
  do {
    const page = await listEvents(token, filter, HISTORY_PAGE, after);
    events.push(...page.events);
    after = page.hasNextPage ? page.endCursor : null;
  } while (after);
  return events.reverse();
}

/**
 * One row per event: from → to, reason, who, when. doc.created carries no
 * status, so its row shows the one the document was created in: the first
 * change's "from", or the current status when it never changed.
 */
function historyTable(events: JournalEvent[], current: string, time: (rfc3339: string) => string): HTMLElement {
  if (!events.length) return h('p', {}, 'В журнале нет событий этого документа.');
  const changes = events.filter((ev) => ev.type === EVENT_STATUS_CHANGED);
  const initial = (changes[0]?.payload as StatusChangedPayload | undefined)?.from ?? current;
  return h(
    'table',
    { class: 'history' },
    h('thead', {}, h('tr', {}, ...['Было', 'Стало', 'Причина', 'Кто', 'Когда'].map((t) => h('th', {}, t)))),
    h(
      'tbody',
      {},
      ...events.map((ev) => {
        const p = ev.payload as Partial<StatusChangedPayload>;
        const created = ev.type === EVENT_CREATED;
        return h(
          'tr',
          { 'data-id': ev.id, 'data-type': ev.type },
          h('td', { class: created ? 'created' : undefined }, created ? 'создан' : named('status', p.from)),
          h('td', {}, named('status', created ? initial : p.to)),
          h('td', {}, p.reason ?? NONE),
          h('td', {}, ev.actor?.displayName ?? NONE),
          h('td', { class: 'time' }, time(ev.createdAt)),
        );
      }),
    ),
  );
}

function linesTable(lines: Line[]): HTMLTableElement {
  return h(
    'table',
    { class: 'lines' },
    h('thead', {}, h('tr', {}, ...['№', 'Артикул', 'Наименование', 'Количество', 'Ед.', 'Цена'].map((t) => h('th', {}, t)))),
    h(
      'tbody',
      {},
      ...lines.map((l) =>
        h(
          'tr',
          {},
          h('td', { class: 'num' }, String(l.lineNo)),
          h('td', {}, l.sku),
          h('td', {}, l.itemName),
          h('td', { class: 'num' }, l.quantity),
          h('td', {}, l.unit),
          h('td', { class: 'num' }, l.price ?? NONE),
        ),
      ),
    ),
  );
}
