package jobs

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"erp/db"
)

// Subscriber is called for every event whose type it accepts. Handle runs
// inside the dispatch transaction, so a built-in subscriber's own writes
// commit together with the event being marked processed: its effect happens
// exactly once. Returning an error rolls the dispatch back; it is retried.
type Subscriber interface {
	// Name identifies the subscriber in logs and (later) delivery records.
	Name() string
	// Accepts reports whether the subscriber wants events of this type.
	Accepts(eventType string) bool
	// Handle processes one event in tx.
	Handle(ctx context.Context, tx pgx.Tx, ev db.Event) error
}

// OrderAcceptance accepts every sales order received from an integration:
// on order.received it moves the order (sales_orders, the event's entity)
// from status "new" to "accepted". A repeat is a no-op.
type OrderAcceptance struct{}

// Name implements Subscriber.
func (OrderAcceptance) Name() string { return "order_acceptance" }

// Accepts implements Subscriber: order.received only.
func (OrderAcceptance) Accepts(eventType string) bool { return eventType == db.EventOrderReceived }

// Handle implements Subscriber.
func (OrderAcceptance) Handle(ctx context.Context, tx pgx.Tx, ev db.Event) error {
	if ev.Entity != db.EntitySalesOrders {
		return fmt.Errorf("order.received %d is about %s, want sales_orders", ev.ID, ev.Entity)
	}
	_, err := db.AcceptSalesOrder(ctx, tx, ev.EntityID)
	return err
}
