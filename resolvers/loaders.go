package resolvers

import (
	"context"

	"github.com/99designs/gqlgen/graphql"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/vikstrous/dataloadgen"

	"erp/db"
)

// Loaders is a gqlgen extension that gives each operation its own batch
// loaders, so that a page of 50 events asking for their deliveries costs
// one query, not 50. They batch only (no cache): a subscription streams
// new events for hours, and each is read once anyway.
type Loaders struct{ Pool *pgxpool.Pool }

var _ interface {
	graphql.HandlerExtension
	graphql.OperationInterceptor
} = Loaders{}

type loadersKey struct{}

type loaders struct {
	deliveries *dataloadgen.Loader[int64, []db.Delivery]
}

// ExtensionName implements graphql.HandlerExtension.
func (Loaders) ExtensionName() string { return "Loaders" }

// Validate implements graphql.HandlerExtension.
func (Loaders) Validate(graphql.ExecutableSchema) error { return nil }

// InterceptOperation implements graphql.OperationInterceptor.
func (l Loaders) InterceptOperation(ctx context.Context, next graphql.OperationHandler) graphql.ResponseHandler {
	ls := &loaders{
		deliveries: dataloadgen.NewLoader(func(ctx context.Context, ids []int64) ([][]db.Delivery, []error) {
			byEvent, err := db.DeliveriesOfEvents(ctx, l.Pool, ids)
			out := make([][]db.Delivery, len(ids))
			if err != nil {
				return out, []error{err}
			}
			for i, id := range ids {
				out[i] = byEvent[id]
			}
			return out, nil
		}, dataloadgen.WithoutCache()),
	}
	return next(context.WithValue(ctx, loadersKey{}, ls))
}

// deliveriesOf returns an event's deliveries, batched when the operation
// has loaders.
func (r *Resolver) deliveriesOf(ctx context.Context, eventID int64) ([]db.Delivery, error) {
	if ls, ok := ctx.Value(loadersKey{}).(*loaders); ok {
		return ls.deliveries.Load(ctx, eventID)
	}
	return db.DeliveriesOfEvent(ctx, r.Pool, eventID)
}
