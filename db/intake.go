package db

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// MaxIntakeBatch is the most orders InsertReceivedOrders takes: one
// transaction writes them all, numbered at its commit.
const MaxIntakeBatch = 100

// IntakeItem is what InsertReceivedOrders did with one input: received it
// (Received: a new order pending its number, or a duplicate), or refused it
// (Err, an *InputError whose Field is relative to the input, written
// nothing).
type IntakeItem struct {
	Received ReceivedOrder
	Err      error
}

// InsertReceivedOrders is InsertReceivedOrder for up to MaxIntakeBatch
// inputs in one transaction, in input order, for a web shop or CRM
// catching up: each input is received on its own terms (idempotent per
// source and external id, a repeat of an earlier input of the batch a
// duplicate), and an input refused as bad input (an *InputError, checked
// before anything of it is written) is reported in its item while the
// others go on. It returns one item per input and the events of the new
// orders (doc.created and order.received of each), for the caller to
// enqueue. The new orders take their numbers at commit, in input order;
// until then they and their repeats in the batch carry a placeholder
// (SalesOrderNumbers reads the numbers after commit).
// Any other error (the database's) fails the whole batch.
func InsertReceivedOrders(ctx context.Context, tx pgx.Tx, actorID *int64, ins []ReceiveOrderInput) ([]IntakeItem, []Event, error) {
	if len(ins) > MaxIntakeBatch {
		return nil, nil, inputErr("", "at most %d orders in one batch, got %d", MaxIntakeBatch, len(ins))
	}
	items := make([]IntakeItem, len(ins))
	var events []Event
	for i, in := range ins {
		r, evs, err := InsertReceivedOrder(ctx, tx, actorID, in)
		var bad *InputError
		switch {
		case errors.As(err, &bad):
			items[i].Err = err
		case err != nil:
			return nil, nil, fmt.Errorf("receive order %d of %d: %w", i+1, len(ins), err)
		default:
			items[i].Received = r
			events = append(events, evs...)
		}
	}
	return items, events, nil
}

// SalesOrderNumbers returns the number of each sales order of ids, by id,
// in one statement; an unknown id is left out. After a batch's commit it
// gives the numbers the commit took, for the new orders and for repeats of
// them in the same batch, which were read before it.
func SalesOrderNumbers(ctx context.Context, q Querier, ids []int64) (map[int64]string, error) {
	rows, err := queries.SalesOrderListNumbers(ctx, q, ids)
	if err != nil {
		return nil, fmt.Errorf("read numbers of %d sales orders: %w", len(ids), translate(err))
	}
	numbers := make(map[int64]string, len(rows))
	for _, r := range rows {
		numbers[r.ID] = r.Number
	}
	return numbers, nil
}
