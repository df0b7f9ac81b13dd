package jobs

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"erp/db"
)

// Subscriber is a built-in subscriber: code in this process called for
// every event its filter takes. Handle runs inside the delivery's
// transaction, so its writes commit together with the delivery record:
// its effect happens exactly once, however often the event is redelivered
// after a crash. Events it journals are returned and dispatched in that same
// transaction. An error rolls its writes back and is retried with backoff;
// wrap it with Permanent to go straight to the dead letters.
type Subscriber interface {
	// Name identifies the subscriber (subscribers.name): lowercase,
	// stable across releases.
	Name() string
	// Filter is the events it takes, declared as a webhook's are: types
	// AND entities AND an optional CEL condition (see Filters.Compile).
	Filter() FilterSpec
	// Handle processes one event in tx and returns the events it journaled.
	Handle(ctx context.Context, tx pgx.Tx, ev db.Event) ([]db.Event, error)
}

// BatchSubscriber is a Subscriber that can also take several events of
// one dispatch together, with set-based statements instead of a round
// trip per event. HandleBatch gets events of distinct documents, in
// journal order, and must do in tx what Handle would do for each in turn,
// returning written[i], the events journaled for evs[i]. The dispatcher
// runs it in one savepoint; on any error it undoes the batch and calls
// Handle event by event instead, so one bad event never fails the others
// and its own error is the one recorded.
type BatchSubscriber interface {
	Subscriber
	HandleBatch(ctx context.Context, tx pgx.Tx, evs []db.Event) (written [][]db.Event, err error)
}

type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks a subscriber error as one no retry can fix: the delivery
// goes straight to dead.
func Permanent(err error) error { return permanentError{err} }

func isPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}

// OrderAcceptance accepts every sales order received from an integration:
// on order.received it moves the order (sales_orders, the event's entity)
// from status "new" to "accepted" and journals doc.status_changed with no
// actor (the system), in the delivery's transaction. A redelivery finds
// the order no longer new and writes nothing, so the transition happens
// once; an order cancelled before it was accepted stays cancelled.
type OrderAcceptance struct{}

// Name implements Subscriber.
func (OrderAcceptance) Name() string { return "order_acceptance" }

// Filter implements Subscriber: order.received of sales orders.
func (OrderAcceptance) Filter() FilterSpec {
	return FilterSpec{EventTypes: []string{db.EventOrderReceived}, Entities: []string{db.EntitySalesOrders}}
}

// Handle implements Subscriber.
func (OrderAcceptance) Handle(ctx context.Context, tx pgx.Tx, ev db.Event) ([]db.Event, error) {
	if ev.Entity != db.EntitySalesOrders {
		return nil, Permanent(fmt.Errorf("order.received %d is about %s, want sales_orders", ev.ID, ev.Entity))
	}
	return db.AcceptSalesOrder(ctx, tx, ev.EntityID)
}

// HandleBatch implements BatchSubscriber (db.AcceptSalesOrders).
func (OrderAcceptance) HandleBatch(ctx context.Context, tx pgx.Tx, evs []db.Event) ([][]db.Event, error) {
	ids, err := salesOrderIDs(evs)
	if err != nil {
		return nil, err
	}
	return db.AcceptSalesOrders(ctx, tx, ids)
}

// salesOrderIDs is the sales order each event is about; an event about
// anything else is an error (its Handle says how).
func salesOrderIDs(evs []db.Event) ([]int64, error) {
	ids := make([]int64, len(evs))
	for i, ev := range evs {
		if ev.Entity != db.EntitySalesOrders {
			return nil, fmt.Errorf("event %d is about %s, want sales_orders", ev.ID, ev.Entity)
		}
		ids[i] = ev.EntityID
	}
	return ids, nil
}
