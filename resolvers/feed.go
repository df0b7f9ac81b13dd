package resolvers

import (
	"context"
	"errors"
	"log/slog"

	"github.com/99designs/gqlgen/graphql/handler/transport"

	"erp/db"
	"erp/graph/wsgorilla"
)

// CloseSlowConsumer is the websocket close code for a subscriber that fell
// more than its feed buffer (Resolver.FeedBuffer) behind the live feed: the server drops it
// rather than buffer without bound, and the client resumes with
// eventProcessed(after: <its last cursor>). Not 4429, which
// graphql-transport-ws uses for repeated connection_init and which the
// graphql-ws client treats as fatal; 4503 makes it reconnect.
const CloseSlowConsumer = 4503

// closeReasonSlowConsumer tells the client what to do (at most 123 bytes).
const closeReasonSlowConsumer = "slow consumer: resume with eventProcessed(after: <last cursor>)"

// feedStream is one eventProcessed subscription: the back-fill from the
// journal, then the live feed, with last the feed sequence of the last
// event handed on, so that the hand-over neither repeats nor skips one.
type feedStream struct {
	r      *Resolver
	filter db.EventFilter
	out    chan<- *db.Event
	sub    *db.FeedSubscription
	last   int64
}

// liveEvents implements eventProcessed: with after, every processed event
// past that cursor matching f, from the journal, then the live ones. It
// subscribes to the feed before reading the journal, so nothing processed
// in between is lost; what arrives twice is skipped by feed sequence. A
// cursor of an unprocessed event or of another journal is an
// *db.InputError.
func (r *Resolver) liveEvents(ctx context.Context, f db.EventFilter, after *string) (<-chan *db.Event, error) {
	var from *int64
	if after != nil {
		seq, err := r.feedPosition(ctx, *after)
		if err != nil {
			return nil, err
		}
		from = &seq
	}
	out := make(chan *db.Event)
	s := &feedStream{r: r, filter: f, out: out, sub: r.Feed.Subscribe(f, r.feedBuffer())}
	go func() {
		defer close(out)
		defer func() { s.sub.Close() }() // s.sub may be replaced
		if from != nil {
			s.last = *from
			if !s.backfill(ctx) {
				return
			}
		}
		s.live(ctx)
	}()
	return out, nil
}

// feedPosition returns the feed sequence of a cursor taken from the
// journal this server reads: a cursor the server never gave out, of an
// event not processed yet, or from another database is refused rather than
// silently streaming nothing.
func (r *Resolver) feedPosition(ctx context.Context, cursor string) (int64, error) {
	c, err := db.ParseCursor("after", cursor)
	if err != nil {
		return 0, err
	}
	if c.FeedSeq == nil {
		return 0, &db.InputError{Field: "after", Msg: "the cursor is of an event that was not processed yet; resume from a processed event's cursor"}
	}
	ev, err := db.EventByID(ctx, r.Pool, c.ID)
	if errors.Is(err, db.ErrNotFound) || (err == nil && (ev.FeedSeq == nil || *ev.FeedSeq != *c.FeedSeq)) {
		return 0, &db.InputError{Field: "after", Msg: "the cursor is of no event in this journal"}
	}
	if err != nil {
		return 0, err
	}
	return *c.FeedSeq, nil
}

// backfill hands on the journal's processed events past s.last, page by
// page, until it has caught up with the live subscription. Live events
// that arrive meanwhile wait in the subscription; when more than its
// buffer arrive (a long back-fill on a busy system), the feed drops it and
// the back-fill takes a new one and reads on from the journal, so a client
// catching up is not mistaken for a slow one. It reports false when the
// stream must end.
func (s *feedStream) backfill(ctx context.Context) bool {
	// Until the feed listens, the journal may hold events the feed will
	// never publish (it starts from the journal's end): read after that.
	select {
	case <-s.r.Feed.Ready():
	case <-ctx.Done():
		return false
	}
	for {
		events, err := db.EventsProcessedAfter(ctx, s.r.Pool, s.filter, s.last, s.r.feedBuffer())
		if err != nil {
			if ctx.Err() == nil {
				s.r.Logger.ErrorContext(ctx, "event feed back-fill", slog.String("error", err.Error()))
				transport.AddSubscriptionError(ctx, gqlErrorWithCode("internal error", codeInternal))
			}
			return false
		}
		for i := range events {
			select {
			case s.out <- &events[i]:
				s.last = *events[i].FeedSeq
			case <-ctx.Done():
				return false
			}
		}
		if len(events) == s.r.feedBuffer() {
			continue
		}
		if !s.sub.Overflowed() {
			return true
		}
		s.sub.Close()
		s.sub = s.r.Feed.Subscribe(s.filter, s.r.feedBuffer())
	}
}

// live hands on the feed's events past s.last until ctx ends or the feed
// drops the subscription.
func (s *feedStream) live(ctx context.Context) {
	for {
		select {
		case ev, ok := <-s.sub.C:
			if !ok {
				s.dropped(ctx)
				return
			}
			if *ev.FeedSeq <= s.last {
				continue // back-filled already
			}
			select {
			case s.out <- ev:
				s.last = *ev.FeedSeq
			case <-s.sub.Done():
				// Dropped while gqlgen was still busy writing earlier
				// events: the client is not reading.
				s.dropped(ctx)
				return
			case <-ctx.Done():
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// dropped ends a subscription the feed ended: a slow subscriber's socket
// is closed with CloseSlowConsumer, and when the feed itself stopped (the
// server is going down) with 1001, so the client reconnects and resumes
// instead of taking the end of the stream for a normal completion.
func (s *feedStream) dropped(ctx context.Context) {
	code, reason := wsgorilla.CloseGoingAway, "server shutting down"
	if s.sub.Overflowed() {
		code, reason = CloseSlowConsumer, closeReasonSlowConsumer
		s.r.Logger.WarnContext(ctx, "live subscriber fell behind, closing its socket",
			slog.Int("buffer", s.r.feedBuffer()), slog.Int64("last_feed_seq", s.last))
	}
	if !wsgorilla.CloseSocket(ctx, code, reason) {
		transport.AddSubscriptionError(ctx, gqlErrorWithCode(reason, codeInternal))
	}
}
