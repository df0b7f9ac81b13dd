// The document behind an event's object cell, in a dialog.

import { gql } from './api';
import { h } from './dom';
import { NONE } from './format';

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
    select: `kind fromWarehouse toWarehouse purchaseOrderId productionOrderId ${LINES}`,
    title: 'Складское движение',
    fields: [['Вид', 'kind'], ['Со склада', 'fromWarehouse'], ['На склад', 'toWarehouse'], ['Заказ поставщику (id)', 'purchaseOrderId'], ['Производственный заказ (id)', 'productionOrderId']],
  },
  wh_purchase_orders: {
    field: 'purchaseOrder',
    select: `supplier ${LINES}`,
    title: 'Заказ поставщику',
    fields: [['Поставщик', 'supplier']],
  },
};

/** Russian names of the API's codes, by field; an unknown code shows as it is. */
const names: Record<string, Record<string, string>> = {
  status: { new: 'новый', accepted: 'принят', planned: 'запланирован', posted: 'проведён', open: 'открыт' },
  source: { manual: 'вручную', shop: 'интернет-магазин', crm: 'CRM' },
  kind: { RECEIPT: 'приход (ПР)', ISSUE_TO_PRODUCTION: 'выдача в цех (ВЦ)' },
};

function show(key: string, v: unknown): string {
  if (v == null) return NONE;
  return names[key]?.[String(v)] ?? String(v);
}

/** Loads the document entity #id and shows it in dialog. */
export async function showDocument(
  dialog: HTMLDialogElement,
  token: string,
  entity: string,
  id: string,
  time: (rfc3339: string) => string,
): Promise<void> {
  const body = dialog.querySelector('.body')!;
  const kind = documents[entity];
  if (!kind) {
    body.replaceChildren(h('p', {}, `Нет карточки для таблицы ${entity}.`));
    dialog.showModal();
    return;
  }
  body.replaceChildren(h('p', { class: 'loading' }, 'Загрузка…'));
  dialog.showModal();
  let doc: Doc | null;
  try {
    const data = await gql<Record<string, Doc | null>>(
      token,
      `query Document($id: ID!) { doc: ${kind.field}(id: $id) { id number status createdAt ${kind.select} } }`,
      { id },
    );
    doc = data.doc;
  } catch (err) {
    body.replaceChildren(h('p', { class: 'error' }, `Не удалось загрузить: ${(err as Error).message}`));
    return;
  }
  if (!doc) {
    body.replaceChildren(h('p', {}, `${entity} #${id} не найден.`));
    return;
  }
  const rows: [string, string][] = [
    ['Статус', show('status', doc.status)],
    ['Создан', time(doc.createdAt)],
    ...kind.fields.map(([label, key]): [string, string] => [label, show(key, doc[key])]),
  ];
  body.replaceChildren(
    h('h2', {}, `${kind.title} `, h('span', { class: 'doc-number' }, doc.number)),
    h('p', { class: 'object-ref' }, `${entity} #${doc.id}`),
    h('dl', {}, ...rows.flatMap(([k, v]) => [h('dt', {}, k), h('dd', {}, v)])),
  );
  if (doc.lines?.length) body.append(linesTable(doc.lines));
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
