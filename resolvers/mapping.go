package resolvers

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"erp/db"
	"erp/graph/model"
)

// orderSources maps the GraphQL OrderSource enum to sales_orders.source.
var orderSources = map[model.OrderSource]string{
	model.OrderSourceShop: db.SourceShop,
	model.OrderSourceCrm:  db.SourceCRM,
}

// sourcesOf maps OrderSource enums to sales_orders.source values.
func sourcesOf(in []model.OrderSource) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = orderSources[s]
	}
	return out
}

// moveKinds maps the GraphQL MoveKind enum to wh_moves.kind.
var moveKinds = map[model.MoveKind]string{
	model.MoveKindReceipt:           db.MoveReceipt,
	model.MoveKindIssueToProduction: db.MoveIssueToProduction,
	model.MoveKindShipment:          db.MoveShipment,
}

// pageArgs is a connection's first and after as package db takes them:
// the default page size and "" (the first page) when not given.
func pageArgs(first *int, after *string) (int, string) {
	n, cursor := defaultPageSize, ""
	if first != nil {
		n = *first
	}
	if after != nil {
		cursor = *after
	}
	return n, cursor
}

// orNil turns a by-id lookup into the nullable GraphQL answer: ErrNotFound
// is null, not an error.
func orNil[T any](v T, err error) (*T, error) {
	if errors.Is(err, db.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &v, nil
}

func int32Ptr(v *int) *int32 {
	if v == nil {
		return nil
	}
	n := int32(min(max(*v, -1<<31), 1<<31-1))
	return &n
}

// deliveryFilter maps the GraphQL filter to db's; nil matches everything.
func deliveryFilter(f *model.DeliveryFilter) db.DeliveryFilter {
	if f == nil {
		return db.DeliveryFilter{}
	}
	out := db.DeliveryFilter{Subscriber: f.Subscriber, EventID: f.EventID}
	if f.Status != nil {
		s := strings.ToLower(string(*f.Status))
		out.Status = &s
	}
	return out
}

func (r *Resolver) deliveryPage(ctx context.Context, f db.DeliveryFilter, first *int, after *string) (*model.DeliveryConnection, error) {
	n, cursor := defaultPageSize, ""
	if first != nil {
		n = *first
	}
	if after != nil {
		cursor = *after
	}
	if f.Subscriber != nil {
		// A misspelt name is a mistake, not an empty page.
		if _, err := db.SubscriberByName(ctx, r.Pool, *f.Subscriber); err != nil {
			return nil, err
		}
	}
	visible, err := eventFilterOf(ctx, db.EventFilter{})
	if err != nil {
		return nil, err
	}
	f.HiddenEntities = visible.HiddenEntities
	page, err := db.ListDeliveries(ctx, r.Pool, f, n, cursor)
	if err != nil {
		return nil, err
	}
	conn := &model.DeliveryConnection{
		Edges:    make([]model.DeliveryEdge, len(page.Deliveries)),
		PageInfo: &model.PageInfo{HasNextPage: page.HasNextPage},
	}
	for i := range page.Deliveries {
		conn.Edges[i] = model.DeliveryEdge{Cursor: page.Deliveries[i].Cursor(), Node: &page.Deliveries[i]}
	}
	if len(conn.Edges) > 0 {
		end := conn.Edges[len(conn.Edges)-1].Cursor
		conn.PageInfo.EndCursor = &end
	}
	return conn, nil
}

// enumOf maps a stored lowercase value (users.role, subscribers.kind,
// deliveries.status) to its GraphQL enum; what names is "user 3's role" in
// the error of a value the schema does not know.
func enumOf[E interface {
	~string
	IsValid() bool
}](stored, what string) (E, error) {
	e := E(strings.ToUpper(stored))
	if !e.IsValid() {
		return "", fmt.Errorf("%s has unknown value %q", what, stored)
	}
	return e, nil
}

// formatOf is a webhook format as package db stores it (lower case), nil
// for none given.
func formatOf(f *model.WebhookFormat) *string {
	if f == nil {
		return nil
	}
	s := strings.ToLower(string(*f))
	return &s
}
