package jobs

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"erp/db"
)

// ProductionPlanning plans production for the orders integrations send: on
// order.received (entity sales_orders) it writes one production order ПЗ
// (plan_prod_orders) per order line whose item has a bill of materials,
// with their doc.created events, as the system (db.PlanSalesOrder). Lines
// planned before are skipped, so a redelivery plans nothing twice.
type ProductionPlanning struct{}

// Name implements Subscriber.
func (ProductionPlanning) Name() string { return "production_planning" }

// Filter implements Subscriber: order.received of sales orders.
func (ProductionPlanning) Filter() FilterSpec {
	return FilterSpec{EventTypes: []string{db.EventOrderReceived}, Entities: []string{db.EntitySalesOrders}}
}

// Handle implements Subscriber. An event about anything but a sales order,
// or about one that does not exist, is a dead letter at once.
func (ProductionPlanning) Handle(ctx context.Context, tx pgx.Tx, ev db.Event) ([]db.Event, error) {
	if ev.Entity != db.EntitySalesOrders {
		return nil, Permanent(fmt.Errorf("order.received %d is about %s, want sales_orders", ev.ID, ev.Entity))
	}
	_, events, err := db.PlanSalesOrder(ctx, tx, ev.EntityID)
	if errors.Is(err, db.ErrNotFound) {
		return nil, Permanent(err)
	}
	return events, err
}

// HandleBatch implements BatchSubscriber (db.PlanSalesOrders).
func (ProductionPlanning) HandleBatch(ctx context.Context, tx pgx.Tx, evs []db.Event) ([][]db.Event, error) {
	ids, err := salesOrderIDs(evs)
	if err != nil {
		return nil, err
	}
	return db.PlanSalesOrders(ctx, tx, ids)
}

// MaterialIssue issues materials to the shop floor for every new
// production order: on doc.created of a plan_prod_orders row it writes one
// warehouse move ВЦ (wh_moves) from the warehouse that supplies production,
// with the components of the item's bill of materials for the ordered
// quantity, and its doc.created event, as the system (db.IssueMaterials).
// The move is a draft, posted later by the warehouse, so a shortage of
// stock never makes the delivery fail.
// The move remembers the event it answers, so a redelivery issues nothing
// twice. A dispatch's production orders are issued together (HandleBatch). Production orders of items without a bill of materials need
// nothing.
//
// With no warehouse marked as supplying production the delivery goes dead
// at once, its error saying so; mark one and redeliver.
type MaterialIssue struct{}

// Name implements Subscriber.
func (MaterialIssue) Name() string { return "material_issue" }

// Filter implements Subscriber: doc.created of production orders only, so
// that other documents' doc.created get no delivery record to it.
func (MaterialIssue) Filter() FilterSpec {
	return FilterSpec{EventTypes: []string{db.EventDocCreated}, Entities: []string{db.EntityProdOrders}}
}

// Handle implements Subscriber.
func (MaterialIssue) Handle(ctx context.Context, tx pgx.Tx, ev db.Event) ([]db.Event, error) {
	if ev.Entity != db.EntityProdOrders { // a redelivery forced by hand
		return nil, nil
	}
	_, events, _, err := db.IssueMaterials(ctx, tx, ev.EntityID, ev.ID)
	switch {
	case errors.Is(err, db.ErrNoBillOfMaterials):
		return nil, nil
	case errors.Is(err, db.ErrNoProductionWarehouse), errors.Is(err, db.ErrNotFound), errors.Is(err, db.ErrQuantityTooLarge):
		return nil, Permanent(err)
	}
	return events, err
}

// HandleBatch implements BatchSubscriber (db.IssueMaterialsMany); an event
// about anything but a production order gets nothing, as in Handle.
func (MaterialIssue) HandleBatch(ctx context.Context, tx pgx.Tx, evs []db.Event) ([][]db.Event, error) {
	var reqs []db.MaterialsRequest
	var at []int // reqs[k] answers evs[at[k]]
	for i, ev := range evs {
		if ev.Entity == db.EntityProdOrders {
			reqs = append(reqs, db.MaterialsRequest{ProdOrderID: ev.EntityID, SourceEventID: ev.ID})
			at = append(at, i)
		}
	}
	issued, err := db.IssueMaterialsMany(ctx, tx, reqs)
	if err != nil {
		return nil, err
	}
	written := make([][]db.Event, len(evs))
	for k, events := range issued {
		written[at[k]] = events
	}
	return written, nil
}
