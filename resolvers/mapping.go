package resolvers

import (
	"errors"

	"erp/db"
	"erp/graph/model"
)

// orderSources maps the GraphQL OrderSource enum to sales_orders.source.
var orderSources = map[model.OrderSource]string{
	model.OrderSourceShop: db.SourceShop,
	model.OrderSourceCrm:  db.SourceCRM,
}

// moveKinds maps the GraphQL MoveKind enum to wh_moves.kind.
var moveKinds = map[model.MoveKind]string{
	model.MoveKindReceipt:           db.MoveReceipt,
	model.MoveKindIssueToProduction: db.MoveIssueToProduction,
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
