// The live feed: eventProcessed over graphql-ws, resumed from the cursor of
// the last event received after any drop, so nothing is missed.

import { createClient, type Client } from 'graphql-ws';
import { authHeaders, wsURL } from '../session';
import { eventFields, type EventFilter, type JournalEvent } from './api';

/** The server's close code for a refused token (before connection_ack). */
const CLOSE_UNAUTHORIZED = 4403;
/** Ping the server this often (ms) and give up on the socket when its pong is this late. */
const PING_EVERY = 10_000;
const PONG_WITHIN = 5_000;
/** Reconnect backoff (ms): doubling from the first to the cap. */
const RETRY_FIRST = 500;
const RETRY_CAP = 10_000;

/** The feed's operation; with admin, the deliveries' last errors too. */
function subscription(admin: boolean): string {
  return `subscription Live($filter: EventFilter, $after: String) {
  eventProcessed(filter: $filter, after: $after) { ${eventFields(admin)} }
}`;
}

export type LiveState = 'connecting' | 'live' | 'down' | 'failed';

export interface LiveHandlers {
  event(ev: JournalEvent): void;
  state(s: LiveState, detail?: string): void;
  unauthorized(): void;
  /**
   * The socket is back after a drop, but there is no cursor to resume from
   * (nothing had been processed yet): what happened meanwhile is only in a
   * fresh read of the journal.
   */
  resync(): void;
}

export class LiveFeed {
  private client: Client;
  private stopped = false;
  private retries = 0;
  private dropped = false;
  private retryTimer: ReturnType<typeof setTimeout> | undefined;
  private unsubscribe: (() => void) | undefined;

  /**
   * cursor is where to resume: events processed after it are replayed
   * before the feed goes live; null starts at "now". admin: the token is
   * an admin's, whose events carry their deliveries' last errors.
   */
  constructor(
    token: string,
    private filter: EventFilter,
    private cursor: string | null,
    private on: LiveHandlers,
    private admin = false,
  ) {
    let socket: WebSocket | undefined;
    let pongTimer: ReturnType<typeof setTimeout> | undefined;
    this.client = createClient({
      url: wsURL(),
      connectionParams: authHeaders(token),
      lazy: true,
      // Reconnecting is ours (resubscribe): graphql-ws would resend the
      // first subscribe message, with a stale cursor.
      retryAttempts: 0,
      keepAlive: PING_EVERY,
      on: {
        connected: (s) => {
          socket = s as WebSocket;
          this.retries = 0;
          this.on.state('live');
          if (this.dropped && this.cursor === null) this.on.resync();
          this.dropped = false;
        },
        ping: (received) => {
          if (received) return;
          pongTimer = setTimeout(() => {
            if (socket?.readyState === WebSocket.OPEN) socket.close(4408, 'pong timeout');
          }, PONG_WITHIN);
        },
        pong: (received) => {
          if (received) clearTimeout(pongTimer);
        },
        closed: () => {
          clearTimeout(pongTimer);
          if (!this.stopped) this.on.state('down');
        },
      },
    });
  }

  start(): void {
    this.on.state('connecting');
    this.subscribe();
  }

  stop(): void {
    this.stopped = true;
    clearTimeout(this.retryTimer);
    this.unsubscribe?.();
    void this.client.dispose();
  }

  private subscribe(): void {
    this.unsubscribe = this.client.subscribe<{ eventProcessed: JournalEvent }>(
      { query: subscription(this.admin), variables: { filter: this.filter, after: this.cursor } },
      {
        next: ({ data }) => {
          const ev = data?.eventProcessed;
          if (!ev) return;
          this.cursor = ev.cursor;
          this.on.event(ev);
        },
        error: (err) => this.failed(err),
        // The server ends subscriptions when it shuts down: come back.
        complete: () => this.failed(null),
      },
    );
  }

  private failed(err: unknown): void {
    if (this.stopped) return;
    if (err instanceof CloseEvent && err.code === CLOSE_UNAUTHORIZED) {
      this.stop();
      this.on.unauthorized();
      return;
    }
    if (Array.isArray(err)) {
      // GraphQL errors (a refused filter or cursor): retrying cannot help.
      this.stop();
      this.on.state('failed', err.map((e: { message?: string }) => e.message).join('; '));
      return;
    }
    this.on.state('down');
    this.dropped = true;
    const wait = Math.min(RETRY_FIRST * 2 ** this.retries, RETRY_CAP) * (0.75 + Math.random() / 2);
    this.retries++;
    this.retryTimer = setTimeout(() => this.subscribe(), wait);
  }
}
