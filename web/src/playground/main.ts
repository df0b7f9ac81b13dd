// GraphiQL at /playground, served from the binary (no CDN): queries over
// HTTP, subscriptions over graphql-ws, the Authorization header filled in
// from the events page's sign-in (this tab's sessionStorage).

import 'graphiql/setup-workers/vite';
import 'graphiql/style.css';
import './playground.css';
import { createGraphiQLFetcher, type Fetcher, type Storage } from '@graphiql/toolkit';
import { GraphiQL } from 'graphiql';
import { createElement } from 'react';
import { createRoot } from 'react-dom/client';
import { authHeaders, getToken, wsURL } from '../session';

const token = getToken();
const headers = JSON.stringify(authHeaders(token ?? '<токен со страницы /events или из .data/admin-token>'), null, 2);

// ?query=…&variables=… open a given operation, as GraphiQL links usually do.
const params = new URLSearchParams(location.search);

const defaultQuery = `# Журнал событий ERP. Заголовок Authorization (вкладка Headers внизу)
# подставлен из входа на странице /events.
{
  events(first: 10) {
    edges { node { id type object payload createdAt processedAt actor { displayName } } }
  }
}

# Живая лента — запустите и создайте документ в другой вкладке:
# subscription { eventProcessed { id type object payload processedAt cursor } }
`;

const base = createGraphiQLFetcher({
  url: `${location.origin}/graphql`,
  // The headers editor's JSON becomes the connection_init payload:
  // {"Authorization": "Bearer <token>"}.
  subscriptionUrl: wsURL(),
  enableIncrementalDelivery: false,
});

// GraphiQL loads the schema before the headers editor is up; the signed-in
// token goes with every request unless the headers editor says otherwise.
const fetcher: Fetcher = (params, opts) =>
  base(params, { ...opts, headers: { ...(token ? authHeaders(token) : {}), ...opts?.headers } });

// GraphiQL keeps tabs and history (with their headers, hence the token)
// in storage: this tab's sessionStorage, like the token, never localStorage.
const prefix = 'graphiql:';
const ownKeys = () => Object.keys(sessionStorage).filter((k) => k.startsWith(prefix));
const storage: Storage = {
  getItem: (key) => sessionStorage.getItem(key),
  setItem: (key, value) => sessionStorage.setItem(key, value),
  removeItem: (key) => sessionStorage.removeItem(key),
  get length() {
    return ownKeys().length;
  },
  clear: () => ownKeys().forEach((k) => sessionStorage.removeItem(k)),
};

createRoot(document.getElementById('graphiql')!).render(
  createElement(GraphiQL, {
    fetcher,
    defaultQuery,
    initialQuery: params.get('query') ?? undefined,
    initialVariables: params.get('variables') ?? undefined,
    initialHeaders: headers,
    defaultHeaders: headers,
    storage,
    shouldPersistHeaders: false,
    defaultEditorToolsVisibility: 'headers',
  }),
);
