package demo

import (
	"context"
	"fmt"
	"slices"
)

// versioned is a document as the lifecycle mutations need it: each
// transition names the version its client read (optimistic concurrency).
type versioned struct {
	ID      string `json:"id"`
	Number  string `json:"number"`
	Status  string `json:"status"`
	Version int    `json:"version"`
}

// connection is the edges and page info of a list query's answer.
type connection[T any] struct {
	Edges []struct {
		Node T `json:"node"`
	} `json:"edges"`
	PageInfo struct {
		HasNextPage bool    `json:"hasNextPage"`
		EndCursor   *string `json:"endCursor"`
	} `json:"pageInfo"`
}

// afternoon acts out Day.Afternoon on this run's documents, in the order a
// plant works: the delivery comes in; each production order is released,
// its material issue posted and the order completed into the finished
// goods warehouse; an order whose goods were just made is shipped,
// another cancelled; the delivery is found booked in error and reversed.
// The documents are the ones this run made (its purchase orders, its shop
// orders), found through the API from the ids its mutations returned, so a
// second run on the same database acts on its own. It waits until this
// run's events are processed.
func (r *replay) afternoon(ctx context.Context) error {
	a := r.day.Afternoon
	sum := &r.sum.Afternoon
	head, err := r.c.newestEventID(ctx)
	if err != nil {
		return fmt.Errorf("afternoon: read journal head: %w", err)
	}
	r.afternoonAfter = head

	delivery, err := r.receipt(ctx, a.Receipt)
	if err != nil {
		return fmt.Errorf("afternoon: %w", err)
	}
	sum.Receipt = delivery.Number
	sum.Created["ПР"]++

	for _, pos := range a.Production.ShopOrders {
		if err := r.produce(ctx, r.shopOrders[pos-1], a.Production.ToWarehouse); err != nil {
			return fmt.Errorf("afternoon: %w", err)
		}
	}
	if err := r.ship(ctx, r.shopOrders[a.Shipment.ShopOrder-1], a.Shipment.FromWarehouse); err != nil {
		return fmt.Errorf("afternoon: %w", err)
	}
	if err := r.cancel(ctx, r.shopOrders[a.Cancellation.ShopOrder-1], a.Cancellation.Reason); err != nil {
		return fmt.Errorf("afternoon: %w", err)
	}
	if err := r.reverse(ctx, delivery, a.ReversalReason); err != nil {
		return fmt.Errorf("afternoon: %w", err)
	}
	return r.c.waitProcessed(ctx, r.baseline, r.drain)
}

// produce releases every production order planned for sales order so,
// oldest first, posts its material issue (the draft ВЦ the planning chain
// made) and completes it into warehouse to, which receives the finished
// goods (a ПР).
func (r *replay) produce(ctx context.Context, so doc, to string) error {
	res, err := call[struct{ ProductionOrders connection[versioned] }](ctx, r.c,
		`query($so: ID!) { productionOrders(filter: {salesOrderId: $so}, first: 50) {
			edges { node { id number status version } } pageInfo { hasNextPage endCursor } } }`,
		map[string]any{"so": so.ID})
	if err != nil {
		return fmt.Errorf("list production orders of %s: %w", so.Number, err)
	}
	if len(res.ProductionOrders.Edges) == 0 {
		return fmt.Errorf("sales order %s has no production order to release", so.Number)
	}
	edges := res.ProductionOrders.Edges
	slices.Reverse(edges) // the list is newest first
	for _, e := range edges {
		po := e.Node
		released, err := call[struct{ ReleaseProductionOrder versioned }](ctx, r.c,
			`mutation($id: ID!, $v: Int!) { releaseProductionOrder(id: $id, version: $v) { id number status version } }`,
			map[string]any{"id": po.ID, "v": po.Version})
		if err != nil {
			return fmt.Errorf("release production order %s (%s, version %d): %w", po.Number, po.Status, po.Version, err)
		}
		issue, err := r.draftIssue(ctx, po)
		if err != nil {
			return err
		}
		if err := r.c.exec(ctx, `mutation($id: ID!, $v: Int!) { postWarehouseMove(id: $id, version: $v) { id } }`,
			map[string]any{"id": issue.ID, "v": issue.Version}); err != nil {
			return fmt.Errorf("post material issue %s of %s: %w", issue.Number, po.Number, err)
		}
		r.sum.Afternoon.Issued = append(r.sum.Afternoon.Issued, issue.Number)
		rel := released.ReleaseProductionOrder
		if err := r.c.exec(ctx, `mutation($id: ID!, $v: Int!, $to: String!) { completeProductionOrder(id: $id, version: $v, toWarehouse: $to) { id } }`,
			map[string]any{"id": rel.ID, "v": rel.Version, "to": to}); err != nil {
			return fmt.Errorf("complete production order %s into %s: %w", po.Number, to, err)
		}
		r.sum.Afternoon.Completed = append(r.sum.Afternoon.Completed, po.Number)
		r.sum.Afternoon.Created["ПР"]++
	}
	r.sum.Afternoon.Produced = append(r.sum.Afternoon.Produced, so.Number)
	return nil
}

// issueSearchPage is how many draft issues draftIssue reads per page: the
// run's own are the newest, on the first page unless another client is
// issuing materials at the same time.
const issueSearchPage = 100

// draftIssue finds the draft material issue ВЦ the planning chain made for
// production order po among the draft issues, newest first.
func (r *replay) draftIssue(ctx context.Context, po versioned) (versioned, error) {
	type issue struct {
		versioned
		ProductionOrderID *string `json:"productionOrderId"`
	}
	vars := map[string]any{"first": issueSearchPage}
	for {
		res, err := call[struct{ WarehouseMoves connection[issue] }](ctx, r.c,
			`query($first: Int, $after: String) {
				warehouseMoves(filter: {kinds: [ISSUE_TO_PRODUCTION], statuses: ["draft"]}, first: $first, after: $after) {
				edges { node { id number status version productionOrderId } } pageInfo { hasNextPage endCursor } } }`, vars)
		if err != nil {
			return versioned{}, fmt.Errorf("find the material issue of %s: %w", po.Number, err)
		}
		for _, e := range res.WarehouseMoves.Edges {
			if e.Node.ProductionOrderID != nil && *e.Node.ProductionOrderID == po.ID {
				return e.Node.versioned, nil
			}
		}
		page := res.WarehouseMoves.PageInfo
		if !page.HasNextPage || page.EndCursor == nil {
			return versioned{}, fmt.Errorf("production order %s has no draft material issue", po.Number)
		}
		vars["after"] = *page.EndCursor
	}
}

// ship sends every line of sales order so to its customer from warehouse
// from (a shipment ОТ, posted); covering the order, it ships it.
func (r *replay) ship(ctx context.Context, so doc, from string) error {
	read, err := call[struct {
		SalesOrder *struct {
			Lines []Line `json:"lines"`
		} `json:"salesOrder"`
	}](ctx, r.c, `query($id: ID!) { salesOrder(id: $id) { lines { sku quantity } } }`, map[string]any{"id": so.ID})
	if err != nil {
		return fmt.Errorf("read sales order %s to ship: %w", so.Number, err)
	}
	if read.SalesOrder == nil {
		return fmt.Errorf("sales order %s to ship not found", so.Number)
	}
	res, err := call[struct{ CreateWarehouseMove doc }](ctx, r.c,
		`mutation($in: WarehouseMoveInput!) { createWarehouseMove(input: $in) { id number } }`,
		map[string]any{"in": map[string]any{
			"kind": "SHIPMENT", "fromWarehouse": from, "salesOrderId": so.ID, "lines": read.SalesOrder.Lines,
		}})
	if err != nil {
		return fmt.Errorf("ship sales order %s from %s: %w", so.Number, from, err)
	}
	r.sum.Afternoon.Shipped, r.sum.Afternoon.Shipment = so.Number, res.CreateWarehouseMove.Number
	r.sum.Afternoon.Created["ОТ"]++
	return nil
}

// cancel cancels sales order so, at the version it reads, for reason.
func (r *replay) cancel(ctx context.Context, so doc, reason string) error {
	read, err := call[struct{ SalesOrder *versioned }](ctx, r.c,
		`query($id: ID!) { salesOrder(id: $id) { id number status version } }`, map[string]any{"id": so.ID})
	if err != nil {
		return fmt.Errorf("read sales order %s to cancel: %w", so.Number, err)
	}
	if read.SalesOrder == nil {
		return fmt.Errorf("sales order %s to cancel not found", so.Number)
	}
	cur := *read.SalesOrder
	if err := r.c.exec(ctx, `mutation($id: ID!, $v: Int!, $why: String!) { cancelSalesOrder(id: $id, version: $v, reason: $why) { id } }`,
		map[string]any{"id": cur.ID, "v": cur.Version, "why": reason}); err != nil {
		return fmt.Errorf("cancel sales order %s (%s, version %d): %w", cur.Number, cur.Status, cur.Version, err)
	}
	r.sum.Afternoon.Cancelled = cur.Number
	return nil
}

// reverse takes back receipt mv, at the version it reads, for reason: mv
// goes reversed and a reversal ПР, posted, negates its stock.
func (r *replay) reverse(ctx context.Context, mv doc, reason string) error {
	read, err := call[struct{ WarehouseMove *versioned }](ctx, r.c,
		`query($id: ID!) { warehouseMove(id: $id) { id number status version } }`, map[string]any{"id": mv.ID})
	if err != nil {
		return fmt.Errorf("read receipt %s to reverse: %w", mv.Number, err)
	}
	if read.WarehouseMove == nil {
		return fmt.Errorf("receipt %s to reverse not found", mv.Number)
	}
	cur := *read.WarehouseMove
	res, err := call[struct{ ReverseWarehouseMove doc }](ctx, r.c,
		`mutation($id: ID!, $v: Int!, $why: String!) { reverseWarehouseMove(id: $id, version: $v, reason: $why) { id number } }`,
		map[string]any{"id": cur.ID, "v": cur.Version, "why": reason})
	if err != nil {
		return fmt.Errorf("reverse receipt %s (%s, version %d): %w", cur.Number, cur.Status, cur.Version, err)
	}
	r.sum.Afternoon.Reversal = res.ReverseWarehouseMove.Number
	r.sum.Afternoon.Created["ПР"]++
	return nil
}
