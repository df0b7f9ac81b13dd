// The bearer token lives in this tab's sessionStorage only: it is gone when
// the tab closes and never reaches localStorage or a cookie. The events page
// and the playground share it (same origin, same tab).

const key = 'erp.token';

export function getToken(): string | null {
  return sessionStorage.getItem(key);
}

export function setToken(token: string): void {
  sessionStorage.setItem(key, token);
}

export function clearToken(): void {
  sessionStorage.removeItem(key);
}

/** The connection_init payload and HTTP header the server expects. */
export function authHeaders(token: string): { Authorization: string } {
  return { Authorization: `Bearer ${token}` };
}

/** ws(s)://<this host>/graphql */
export function wsURL(): string {
  const proto = location.protocol === 'https:' ? 'wss:' : 'ws:';
  return `${proto}//${location.host}/graphql`;
}
