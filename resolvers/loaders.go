package resolvers

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/99designs/gqlgen/graphql"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vikstrous/dataloadgen"

	"erp/db"
)

// Loaders is a gqlgen extension that gives each operation (each event of
// a subscription) its own batch loaders, so that a page of 50 events asking for their deliveries costs
// one query, not 50, and so does a page of deliveries asking for their
// events (and another for their subscribers, and another for their
// attempt logs), and the subscribers list asking for each one's lag, and
// a page of the stock ledger asking for each entry's move. They batch only (no cache): a subscription streams
// new events for hours, and each is read once anyway.
type Loaders struct{ Pool *pgxpool.Pool }

var _ interface {
	graphql.HandlerExtension
	graphql.OperationInterceptor
	graphql.ResponseInterceptor
} = Loaders{}

type loadersKey struct{}

// loaderWait is how long a loader gathers keys before it runs its batch.
// gqlgen resolves the fields of a page's items within microseconds of each
// other, so a few milliseconds batch a page; dataloadgen's 16 ms default
// cost the events page 16 ms per level of nesting (deliveries, then their
// subscribers).
const loaderWait = 3 * time.Millisecond

// loaders are one response's batch loaders, made on first use: most
// operations load nothing in batches.
type loaders struct {
	pool *pgxpool.Pool
	once sync.Once

	deliveries  *dataloadgen.Loader[int64, []db.Delivery]
	attempts    *dataloadgen.Loader[db.DeliveryKey, []db.AttemptLog]
	events      *dataloadgen.Loader[int64, db.Event]
	subscribers *dataloadgen.Loader[int64, db.Subscriber]
	lags        *dataloadgen.Loader[int64, db.SubscriberLag]
	moves       *dataloadgen.Loader[int64, db.WarehouseMove]
}

// ExtensionName implements graphql.HandlerExtension.
func (Loaders) ExtensionName() string { return "Loaders" }

// Validate implements graphql.HandlerExtension.
func (Loaders) Validate(graphql.ExecutableSchema) error { return nil }

// InterceptOperation implements graphql.OperationInterceptor: a query or
// a mutation gets its loaders here, for its one response.
func (l Loaders) InterceptOperation(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
	if isSubscription(ctx) {
		return next(ctx)
	}
	return next(context.WithValue(ctx, loadersKey{}, &loaders{pool: l.Pool}))
}

// InterceptResponse implements graphql.ResponseInterceptor: each event of
// a subscription is one response, executed with loaders of its own, so
// that an idle subscription keeps none.
func (l Loaders) InterceptResponse(ctx context.Context, next graphql.ResponseHandler) *graphql.Response {
	if !isSubscription(ctx) {
		return next(ctx)
	}
	return next(context.WithValue(ctx, loadersKey{}, &loaders{pool: l.Pool}))
}

func isSubscription(ctx context.Context) bool {
	oc := graphql.GetOperationContext(ctx)
	return oc.Operation != nil && oc.Operation.Operation == ast.Subscription
}

// loadersOf returns the operation's loaders, made on the first call.
func loadersOf(ctx context.Context) (*loaders, bool) {
	ls, ok := ctx.Value(loadersKey{}).(*loaders)
	if ok {
		ls.once.Do(ls.make)
	}
	return ls, ok
}

func (ls *loaders) make() {
	pool := ls.pool
	ls.deliveries = dataloadgen.NewLoader(func(ctx context.Context, ids []int64) ([][]db.Delivery, []error) {
		byEvent, err := db.DeliveriesOfEvents(ctx, pool, ids)
		out := make([][]db.Delivery, len(ids))
		if err != nil {
			return out, []error{err}
		}
		for i, id := range ids {
			out[i] = byEvent[id]
		}
		return out, nil
	}, dataloadgen.WithoutCache(), dataloadgen.WithWait(loaderWait))
	ls.attempts = dataloadgen.NewLoader(func(ctx context.Context, keys []db.DeliveryKey) ([][]db.AttemptLog, []error) {
		byKey, err := db.AttemptLogs(ctx, pool, keys)
		out := make([][]db.AttemptLog, len(keys))
		if err != nil {
			return out, []error{err}
		}
		for i, k := range keys {
			out[i] = byKey[k]
		}
		return out, nil
	}, dataloadgen.WithoutCache(), dataloadgen.WithWait(loaderWait))
	ls.events = byID(pool, db.EventsByIDs, func(e db.Event) int64 { return e.ID }, "event")
	ls.subscribers = byID(pool, db.SubscribersByIDs, func(s db.Subscriber) int64 { return s.ID }, "subscriber")
	ls.lags = byID(pool, db.SubscriberLagsByIDs, func(s db.SubscriberLag) int64 { return s.SubscriberID }, "subscriber")
	ls.moves = byID(pool, db.WarehouseMovesByIDs, func(m db.WarehouseMove) int64 { return m.ID }, "warehouse move")
}

// byID is a batch loader of rows by id from fetch (one query per batch);
// an id fetch does not return is db.ErrNotFound, as the single-row getters
// report it.
func byID[T any](pool *pgxpool.Pool, fetch func(context.Context, db.Querier, []int64) ([]T, error), idOf func(T) int64, what string) *dataloadgen.Loader[int64, T] {
	return dataloadgen.NewLoader(func(ctx context.Context, ids []int64) ([]T, []error) {
		rows, err := fetch(ctx, pool, ids)
		out := make([]T, len(ids))
		if err != nil {
			return out, []error{err}
		}
		found := make(map[int64]T, len(rows))
		for _, r := range rows {
			found[idOf(r)] = r
		}
		errs := make([]error, len(ids))
		for i, id := range ids {
			r, ok := found[id]
			if !ok {
				errs[i] = fmt.Errorf("get %s %d: %w", what, id, db.ErrNotFound)
				continue
			}
			out[i] = r
		}
		return out, errs
	}, dataloadgen.WithoutCache(), dataloadgen.WithWait(loaderWait))
}

// eventOf returns event id (a delivery's), batched when the operation has
// loaders.
func (r *Resolver) eventOf(ctx context.Context, id int64) (db.Event, error) {
	if ls, ok := loadersOf(ctx); ok {
		return ls.events.Load(ctx, id)
	}
	return db.EventByID(ctx, r.Pool, id)
}

// subscriberOf returns subscriber id (a delivery's), batched when the
// operation has loaders.
func (r *Resolver) subscriberOf(ctx context.Context, id int64) (db.Subscriber, error) {
	if ls, ok := loadersOf(ctx); ok {
		return ls.subscribers.Load(ctx, id)
	}
	return db.SubscriberByID(ctx, r.Pool, id)
}

// deliveriesOf returns an event's deliveries, batched when the operation
// has loaders.
func (r *Resolver) deliveriesOf(ctx context.Context, eventID int64) ([]db.Delivery, error) {
	if ls, ok := loadersOf(ctx); ok {
		return ls.deliveries.Load(ctx, eventID)
	}
	return db.DeliveriesOfEvent(ctx, r.Pool, eventID)
}

// lagOf returns subscriber id's lag, batched when the operation has
// loaders.
func (r *Resolver) lagOf(ctx context.Context, id int64) (db.SubscriberLag, error) {
	if ls, ok := loadersOf(ctx); ok {
		return ls.lags.Load(ctx, id)
	}
	lags, err := db.SubscriberLagsByIDs(ctx, r.Pool, []int64{id})
	if err != nil {
		return db.SubscriberLag{}, err
	}
	if len(lags) == 0 {
		return db.SubscriberLag{}, fmt.Errorf("get lag of subscriber %d: %w", id, db.ErrNotFound)
	}
	return lags[0], nil
}

// moveOf returns warehouse move id (a stock ledger entry's), batched when
// the operation has loaders.
func (r *Resolver) moveOf(ctx context.Context, id int64) (db.WarehouseMove, error) {
	if ls, ok := loadersOf(ctx); ok {
		return ls.moves.Load(ctx, id)
	}
	return db.WarehouseMoveByID(ctx, r.Pool, id)
}

// attemptLogOf returns the attempt log of live delivery k, newest first,
// batched when the operation has loaders.
func (r *Resolver) attemptLogOf(ctx context.Context, k db.DeliveryKey) ([]db.AttemptLog, error) {
	if ls, ok := loadersOf(ctx); ok {
		return ls.attempts.Load(ctx, k)
	}
	logs, err := db.AttemptLogs(ctx, r.Pool, []db.DeliveryKey{k})
	return logs[k], err
}
