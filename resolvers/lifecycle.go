package resolvers

import (
	"context"

	"github.com/jackc/pgx/v5"

	"erp/db"
	"erp/graph/model"
	"erp/jobs"
)

// transition runs one document transition of package db (fn, given the
// checked version) in one outbox transaction: the status change, its
// doc.status_changed events and their dispatch jobs commit together.
func transition[T any](ctx context.Context, o *jobs.Outbox, version int, fn func(tx pgx.Tx, v int32) (T, []db.Event, error)) (*T, error) {
	v, err := versionArg(version)
	if err != nil {
		return nil, err
	}
	doc, err := jobs.Write(ctx, o, func(tx pgx.Tx) (T, []db.Event, error) { return fn(tx, v) })
	if err != nil {
		return nil, err
	}
	return &doc, nil
}

// pageSize is a list's `first`, defaultPageSize when not given.
func pageSize(first *int) int {
	if first == nil {
		return defaultPageSize
	}
	return *first
}

// deref is s, or "" for nil.
func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// byIDOrNumber reads a document by exactly one of id and number (of kind
// k), nil when there is none; both or neither is BAD_USER_INPUT.
func byIDOrNumber[T any](ctx context.Context, q db.Querier, k *db.DocKind, id *int64, number *string,
	get func(context.Context, db.Querier, int64) (T, error)) (*T, error) {
	if (id == nil) == (number == nil) {
		return nil, &db.InputError{Field: "id", Msg: "give exactly one of id and number"}
	}
	if number != nil {
		n, err := k.IDByNumber(ctx, q, *number)
		if err != nil {
			return orNil(*new(T), err)
		}
		id = &n
	}
	return orNil(get(ctx, q, *id))
}

// pageInfo is the Relay page info of a document list page.
func pageInfo[T any](p db.DocPage[T]) *model.PageInfo {
	info := &model.PageInfo{HasNextPage: p.HasNextPage}
	if n := len(p.Cursors); n > 0 {
		info.EndCursor = &p.Cursors[n-1]
	}
	return info
}
