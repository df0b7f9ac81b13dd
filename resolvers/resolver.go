// Package resolvers implements the GraphQL schema: it authorizes (@allow),
// maps GraphQL arguments to package db's inputs and errors to GraphQL error
// codes, and leaves every rule about documents to db and jobs. Who is
// calling comes in the context (WithUser), set by the HTTP layer
// (package app/httpapi).
package resolvers

import (
	"log/slog"

	"github.com/jackc/pgx/v5/pgxpool"

	"erp/db"
	"erp/jobs"
)

// DefaultFeedBuffer is how many processed events a live subscription may
// fall behind before the feed drops it and it reads on from the journal,
// unless Resolver.FeedBuffer says otherwise.
const DefaultFeedBuffer = 1024

// DefaultFeedMaxLag bounds a subscriber catching up from the journal
// after it fell behind (Resolver.FeedMaxLag), in events: past it its
// socket is closed with CloseSlowConsumer.
const DefaultFeedMaxLag = 100_000

// defaultPageSize applies when a client sends first: null.
const defaultPageSize = 50

// Resolver holds the dependencies of every resolver.
type Resolver struct {
	Pool       *pgxpool.Pool
	Outbox     *jobs.Outbox
	Dispatcher *jobs.Dispatcher
	Feed       *db.Feed
	Logger     *slog.Logger
	// Tokens re-checks a websocket's token for every operation and is
	// told to forget cached owners by revokeToken and setUserRole.
	Tokens Tokens
	// FeedBuffer is the live feed's buffer per subscription, in events,
	// and the back-fill's page size; 0 means DefaultFeedBuffer.
	FeedBuffer int
	// FeedMaxLag (events behind the feed) bounds a live subscriber that
	// fell behind its buffer and reads on from the journal; 0 means
	// DefaultFeedMaxLag.
	FeedMaxLag int
}

func (r *Resolver) feedMaxLag() int64 {
	if r.FeedMaxLag > 0 {
		return int64(r.FeedMaxLag)
	}
	return DefaultFeedMaxLag
}

func (r *Resolver) feedBuffer() int {
	if r.FeedBuffer > 0 {
		return r.FeedBuffer
	}
	return DefaultFeedBuffer
}

// exampleLogLength is how many examples Subscriber.exampleLog lists.
const exampleLogLength = 20
