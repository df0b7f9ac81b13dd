package resolvers

import (
	"cmp"
	"context"
	"fmt"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"erp/db"
	"erp/graph/model"
)

// maxIntake is the most inputs one receiveOrders call takes.
const maxIntake = 1000

// receiveInput maps a receiveOrder input to db's.
func receiveInput(in model.ReceiveOrderInput) db.ReceiveOrderInput {
	return db.ReceiveOrderInput{
		Source:     orderSources[in.Source],
		ExternalID: in.ExternalID,
		Customer:   in.Customer,
		Lines:      in.Lines,
	}
}

// answerIntake fills out[at[i]] for each committed item i of one
// receiveOrders transaction: the order, with the number its commit gave it
// (new orders and repeats of them in the batch were read before), or the
// item's error. Should the read fail, the answers are that error: the
// orders are written, and sending them again answers them as duplicates.
func (r *mutationResolver) answerIntake(ctx context.Context, at []int, items []db.IntakeItem, out []*model.ReceiveOrderResult) {
	var ids []int64
	var answered []int
	for i, it := range items {
		switch {
		case it.Err != nil:
			intakeError(ctx, at[i], it.Err)
			continue
		case it.Received.Duplicate:
			out[at[i]] = &model.ReceiveOrderResult{Order: &it.Received.Existing, Duplicate: true}
		default:
			so := it.Received.Pending.Order()
			out[at[i]] = &model.ReceiveOrderResult{Order: &so}
		}
		ids, answered = append(ids, out[at[i]].Order.ID), append(answered, at[i])
	}
	numbers, err := db.SalesOrderNumbers(ctx, r.Pool, ids)
	for _, i := range answered {
		id := out[i].Order.ID
		no, ok := numbers[id]
		if err != nil || !ok {
			out[i] = nil
			intakeError(ctx, i, cmp.Or(err, fmt.Errorf("read number of sales order %d: %w", id, db.ErrNotFound)))
			continue
		}
		out[i].Order.Number = no
	}
}

// intakeError reports err as the error of input i of receiveOrders: at
// path receiveOrders.i, its field under inputs.i.
func intakeError(ctx context.Context, i int, err error) {
	path := append(graphql.GetPath(ctx), ast.PathIndex(i))
	graphql.AddError(ctx, gqlerror.WrapPath(path, inArg(fmt.Sprintf("inputs.%d", i), err)))
}
