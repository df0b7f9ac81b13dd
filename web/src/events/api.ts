// GraphQL over HTTP and the shapes the page reads.

import { authHeaders } from '../session';

/** A failed or dead delivery of an event to one subscriber. */
export interface Delivery {
  status: 'PENDING' | 'DELIVERED' | 'FAILED' | 'DEAD';
  attempts: number;
  /** Admins only (it quotes the receiver's answer): absent for other roles. */
  lastError?: string | null;
  nextAttemptAt: string | null;
  subscriber: { name: string };
}

/** One journal row, as the page selects it (eventFields). */
export interface JournalEvent {
  id: string;
  type: string;
  entity: string;
  entityId: string;
  object: string;
  payload: unknown;
  createdAt: string;
  processedAt: string | null;
  actor: { displayName: string } | null;
  cursor: string;
  deliveries: Delivery[];
}

/** The fields of a Delivery the page selects; lastError only for an admin, whom alone the server lets read it. */
export function deliveryFields(admin: boolean): string {
  return `status attempts ${admin ? 'lastError ' : ''}nextAttemptAt subscriber { name }`;
}

/** The fields of an Event the page selects (JournalEvent). */
export function eventFields(admin: boolean): string {
  return `
  id type entity entityId object payload createdAt processedAt cursor
  actor { displayName }
  deliveries { ${deliveryFields(admin)} }`;
}

/** The variables of EventFilter. */
export interface EventFilter {
  types?: string[];
  entity?: string;
  /** Row id in entity's table; the server refuses it without entity. */
  entityId?: string;
  processed?: boolean;
}

/** The token was refused: sign in again. */
export class AuthError extends Error {}

interface GraphQLError {
  message: string;
  extensions?: { code?: string };
}

/** Runs one query or mutation as the holder of token and returns its data. */
export async function gql<T>(token: string, query: string, variables: Record<string, unknown> = {}): Promise<T> {
  const res = await fetch('/graphql', {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Accept: 'application/json', ...authHeaders(token) },
    body: JSON.stringify({ query, variables }),
  });
  let body: { data?: T; errors?: GraphQLError[] };
  try {
    body = await res.json();
  } catch {
    throw new Error(`сервер ответил ${res.status} без JSON`);
  }
  const code = body.errors?.[0]?.extensions?.code;
  if (res.status === 401 || code === 'UNAUTHENTICATED') {
    throw new AuthError(body.errors?.[0]?.message ?? 'неверный токен');
  }
  if (body.errors?.length) {
    throw new Error(body.errors.map((e) => e.message).join('; '));
  }
  if (!res.ok || body.data === undefined) {
    throw new Error(`сервер ответил ${res.status}`);
  }
  return body.data;
}

export interface EventPage {
  events: JournalEvent[];
  hasNextPage: boolean;
  endCursor: string | null;
}

/** One page of the journal, newest first; with admin, the deliveries' last errors too. */
export async function listEvents(
  token: string,
  filter: EventFilter,
  first: number,
  after: string | null,
  admin = false,
): Promise<EventPage> {
  const data = await gql<{
    events: { edges: { node: JournalEvent }[]; pageInfo: { hasNextPage: boolean; endCursor: string | null } };
  }>(
    token,
    `query Journal($filter: EventFilter, $first: Int, $after: String) {
      events(filter: $filter, first: $first, after: $after) {
        edges { node { ${eventFields(admin)} } }
        pageInfo { hasNextPage endCursor }
      }
    }`,
    { filter, first, after },
  );
  return {
    events: data.events.edges.map((e) => e.node),
    hasNextPage: data.events.pageInfo.hasNextPage,
    endCursor: data.events.pageInfo.endCursor,
  };
}

/**
 * The cursor of the newest processed event of the whole journal, or null on
 * a journal with none. Taken before the page's first listEvents, it is a
 * safe start for eventProcessed(after:): whatever was processed before it
 * committed before it and is in the list; whatever came after is replayed.
 */
export async function feedStart(token: string): Promise<string | null> {
  const data = await gql<{ events: { edges: { cursor: string }[] } }>(
    token,
    `query FeedStart { events(first: 1, filter: { processed: true }) { edges { cursor } } }`,
  );
  return data.events.edges[0]?.cursor ?? null;
}
