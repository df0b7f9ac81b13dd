package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/99designs/gqlgen/graphql/handler"
	"github.com/99designs/gqlgen/graphql/handler/extension"
	"github.com/99designs/gqlgen/graphql/handler/lru"
	"github.com/99designs/gqlgen/graphql/handler/transport"
	"github.com/rs/cors"
	"github.com/vektah/gqlparser/v2/ast"

	"erp/app/config"
	"erp/app/httpapi"
	"erp/db"
	"erp/db/catalog"
	"erp/graph"
	"erp/graph/model"
	"erp/graph/wsgorilla"
	"erp/resolvers"
	"erp/web"
)

// routes are the endpoints. Websockets run on ws, which checks the
// Origin before the upgrade and owns the socket rules (init timeout 4408,
// duplicate id 4409, dead peers, keepalive of each subprotocol, 1001 at
// shutdown); wsgorilla.Transport speaks both subprotocols over it, one
// goroutine a socket, and pushes the live feed (eventProcessed) to it.
// GraphQL over SSE (POST with Accept: text/event-stream) is gqlgen's
// transport.SSE inside a.streams (write deadlines, cut, shutdown), one
// operation a stream, authenticated and watched like a socket.
//
// Every answer refuses to be framed (httpapi.DenyFraming); /graphql and
// River UI refuse a client that sent too many bad tokens (AuthLimit.Guard).
//
// Operations: /healthz (the process is up), /readyz (see ready; its body
// names the database mode and the pools' sizes, db.Database.Mode and
// PoolSizing), and scrape at /metrics (Prometheus, this app's own
// registry) unless it is nil, served on METRICS_ADDR instead.
func (a *App) routes(opts config.Config, page web.Config, scrape http.Handler) http.Handler {
	ws, res := a.ws, a.res
	cfg := graph.Config{
		Resolvers:  res,
		Directives: graph.DirectiveRoot{Allow: res.Allow},
	}
	// A page costs its size times what each row selects, so that many
	// aliases of events(first: 500) add up against maxComplexity.
	perPage := func(child int, first *int) int {
		n := 50
		if first != nil {
			n = max(*first, 1)
		}
		return 1 + child*n
	}
	cfg.Complexity.Query.Events = func(child int, _ *db.EventFilter, first *int, _ *string) int { return perPage(child, first) }
	cfg.Complexity.Query.SalesOrders = func(child int, _ *model.SalesOrderFilter, first *int, _ *string) int { return perPage(child, first) }
	cfg.Complexity.Query.ProductionOrders = func(child int, _ *model.ProductionOrderFilter, first *int, _ *string) int {
		return perPage(child, first)
	}
	cfg.Complexity.Query.PurchaseOrders = func(child int, _ *model.PurchaseOrderFilter, first *int, _ *string) int { return perPage(child, first) }
	cfg.Complexity.Query.WarehouseMoves = func(child int, _ *model.WarehouseMoveFilter, first *int, _ *string) int { return perPage(child, first) }
	cfg.Complexity.Query.Deliveries = func(child int, _ *model.DeliveryFilter, first *int, _ *string) int { return perPage(child, first) }
	cfg.Complexity.Query.DeadDeliveries = func(child int, _ *string, first *int, _ *string) int { return perPage(child, first) }
	schema := graph.NewExecutableSchema(cfg)
	gql := handler.New(schema)
	readLimit := int64(wsReadLimit)
	gql.AddTransport(wsgorilla.Transport{
		Implementation:   ws,
		InitFunc:         a.auth.WebsocketInit,
		OnClose:          a.auth.WebsocketClose,
		PayloadReadLimit: &readLimit,
		MaxOperations:    wsMaxOperations,
	})
	gql.AddTransport(transport.Options{})
	// Before GraphQLHTTP, which would take the POST too.
	gql.AddTransport(httpapi.SSE{SSE: transport.SSE{KeepAlivePingInterval: a.keepAlive}})
	gql.AddTransport(httpapi.GraphQLHTTP{})
	gql.SetValidationRulesFn(httpapi.ValidationRules)
	gql.SetQueryCache(lru.New[*ast.QueryDocument](1000))
	gql.SetParserTokenLimit(maxQueryTokens)
	gql.Use(&httpapi.ComplexityLimit{Max: maxComplexity})
	gql.Use(httpapi.ShapeLimit{MaxDepth: maxDepth, MaxFields: maxFields, MaxIntrospectionFields: maxIntrospectionFields})
	gql.Use(httpapi.RolesUpfront{Schema: schema.Schema()})
	if opts.Introspection {
		gql.Use(extension.Introspection{})
	}
	gql.Use(extension.AutomaticPersistedQuery{Cache: lru.New[string](100)})
	gql.Use(httpapi.Observer{Metrics: a.metrics})
	if a.tracer != nil {
		gql.Use(httpapi.Tracing{Tracer: a.tracer})
	}
	// Inside Observer, so that shared payloads still get their request id.
	gql.Use(a.sharedFeed)
	// Inside the shared feed, so that a subscription's event answered with
	// another socket's execution makes no loaders (Loaders makes a
	// subscription's per event).
	gql.Use(resolvers.Loaders{Pool: res.Pool})
	// Innermost, around the execution only: not a frame on the stack of a
	// subscription waiting in the shared feed for its next event.
	gql.Use(httpapi.ResponseLimit{MaxFields: maxResponseFields, MaxBytes: maxResponseBytes})
	gql.SetErrorPresenter(resolvers.ErrorPresenter(res.Logger))
	gql.SetRecoverFunc(resolvers.Recover)

	mux := http.NewServeMux()
	// Inside Authenticate: a key is the user's.
	keys := &httpapi.Idempotency{Pool: a.pool, TTL: opts.IdempotencyTTL, MaxTokens: maxQueryTokens, Logger: a.logger}
	// A client that sent too many bad tokens is refused before anything
	// else (inside CORS, so that a browser can read the 429).
	limit := a.auth.Limit
	api := limit.Guard(ws.Handler(httpapi.GraphQLMethods(httpapi.LimitBody(maxRequestBody, a.streams.Handler(a.auth.Authenticate(keys.Handler(gql)))))))
	if len(opts.AllowedOrigins) > 0 {
		// Browsers on the allowed origins may call the API cross-origin
		// (with a bearer token, never cookies). With no list, no CORS
		// headers at all: browsers then keep to same-origin. (rs/cors reads
		// an empty list as "*", hence the guard.)
		api = cors.New(cors.Options{
			AllowedOrigins: opts.AllowedOrigins,
			AllowedMethods: []string{http.MethodGet, http.MethodPost},
			AllowedHeaders: []string{"Authorization", "Content-Type", "Accept", httpapi.IdempotencyKeyHeader},
			ExposedHeaders: []string{httpapi.ReplayedHeader},
			MaxAge:         600,
		}).Handler(api)
	}
	mux.Handle("/graphql", api)
	web.Register(mux, page) // /events, /playground, /assets/, /config.json
	// The schemas and the AsyncAPI document are the API's contract,
	// readable by any signed-in token like the GraphQL schema.
	mux.Handle("GET /schemas/events/{file}", limit.Guard(a.auth.Authenticate(http.HandlerFunc(serveEventSchema))))
	mux.Handle("GET /asyncapi.json", limit.Guard(a.auth.Authenticate(http.HandlerFunc(serveAsyncAPI))))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
		defer cancel()
		about := "database: " + a.database.Mode() + "\npools: " + a.database.PoolSizing()
		if err := a.ready(ctx); err != nil {
			a.logger.WarnContext(ctx, "not ready", slog.String("error", err.Error()))
			http.Error(w, "not ready: "+err.Error()+"\n"+about, http.StatusServiceUnavailable)
			return
		}
		_, _ = io.WriteString(w, "ok\n"+about+"\n")
	})
	sessions := &httpapi.AdminSessions{Auth: a.auth, Path: riverUIPath, SecureCookie: opts.CookieSecure, Proxies: a.proxies}
	mux.Handle(riverUIPath+"/login", limit.Guard(sessions.Login()))
	mux.Handle("POST "+riverUIPath+"/logout", sessions.Logout())
	mux.Handle(riverUIPath+"/", limit.Guard(sessions.Require(a.riverUI)))
	mux.Handle("GET "+riverUIPath, http.RedirectHandler(riverUIPath+"/", http.StatusFound))
	if scrape != nil {
		mux.Handle("GET /metrics", scrape)
	}
	mux.Handle("GET /{$}", http.RedirectHandler("/events", http.StatusFound))
	// No page of this server may be framed by another (clickjacking).
	return httpapi.DenyFraming(mux)
}

// serveEventSchema answers GET /schemas/events/<type>.json with
// catalog.EventSchema of the type (application/schema+json), or 404 when
// the catalog has no such type.
func serveEventSchema(w http.ResponseWriter, r *http.Request) {
	name, ok := strings.CutSuffix(r.PathValue("file"), ".json")
	b, err := catalog.EventSchema(name)
	if !ok || err != nil {
		http.Error(w, fmt.Sprintf("no event type %q: GET /schemas/events/<type>.json with a type of the eventTypes query", r.PathValue("file")), http.StatusNotFound)
		return
	}
	w.Header().Set("Content-Type", "application/schema+json")
	_, _ = w.Write(b)
}

// serveAsyncAPI answers GET /asyncapi.json with catalog.AsyncAPI, the
// AsyncAPI 3.0.0 document of the webhook, live feed and NATS channels.
func serveAsyncAPI(w http.ResponseWriter, _ *http.Request) {
	b, err := catalog.AsyncAPI()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(b)
}
