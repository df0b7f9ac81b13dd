package db

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"time"
)

// sampleEvent is a processed doc.created event as the feed reads it, with
// its own allocations.
func sampleEvent(i int64) *Event {
	now := time.Now()
	seq, actor := i, int64(1)
	login, name := strings.Clone(AdminLogin), strings.Clone(AdminDisplayName)
	return &Event{
		ID: i, Type: strings.Clone(EventDocCreated), Entity: strings.Clone(EntitySalesOrders), EntityID: i,
		Payload:   json.RawMessage(fmt.Sprintf(`{"id": %d, "no": "ЗК-2026-%06d", "entity": "sales_order"}`, i, i)),
		CreatedAt: now, ProcessedAt: &now, FeedSeq: &seq,
		ActorID: &actor, ActorLogin: &login, ActorName: &name,
	}
}

func liveHeap() uint64 {
	runtime.GC()
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// BenchmarkFeedStalledSubscriberMemory measures what a subscriber that
// stopped reading costs: B/subscriber is its full buffer of 1024 events
// (the events themselves are shared by all subscribers), B/event one
// event, which a stalled subscriber keeps alive until it is dropped. The
// worst case per stalled subscriber is B/subscriber + 1024 × B/event.
func BenchmarkFeedStalledSubscriberMemory(b *testing.B) {
	const subscribers, buffer = 100, 1024
	for b.Loop() {
		before := liveHeap()
		events := make([]*Event, buffer)
		for i := range events {
			events[i] = sampleEvent(int64(i + 1))
		}
		withEvents := liveHeap()
		f := NewFeed(nil, slog.New(slog.DiscardHandler))
		subs := make([]*FeedSubscription, subscribers)
		for i := range subs {
			subs[i] = f.Subscribe(EventFilter{}, buffer)
		}
		for _, ev := range events {
			f.publish(ev)
		}
		full := liveHeap()
		if f.Subscribers() != subscribers {
			b.Fatalf("%d subscribers left, want %d", f.Subscribers(), subscribers)
		}
		b.ReportMetric(float64(full-withEvents)/subscribers, "B/subscriber")
		b.ReportMetric(float64(withEvents-before)/buffer, "B/event")
		runtime.KeepAlive(subs)
		runtime.KeepAlive(events)
	}
}

// A subscription's queue grows with its backlog up to the buffer, is
// dropped one event past it, and an idle or drained one holds no buffer.
func TestFeedQueueGrowsOnDemandAndDropsPastBuffer(t *testing.T) {
	t.Parallel()
	const buffer = 1000
	f := NewFeed(nil, slog.New(slog.DiscardHandler))
	s := f.Subscribe(EventFilter{}, buffer)
	steady := f.Subscribe(EventFilter{}, 100)
	if cap(s.queue) != 0 {
		t.Fatalf("idle subscription holds a queue of %d", cap(s.queue))
	}
	ctx := t.Context()
	for i := range int64(buffer) {
		f.publish(sampleEvent(i + 1))
		// steady keeps up, with a backlog of at most one: its array must
		// not grow however many events pass.
		if ev, ok := steady.Next(ctx); !ok || ev.ID != i+1 {
			t.Fatalf("steady got %v, %v; want event %d", ev, ok, i+1)
		}
	}
	if got := cap(steady.queue); got > smallQueue {
		t.Errorf("steady subscriber's queue capacity %d, want at most %d", got, smallQueue)
	}
	if f.Subscribers() != 2 || s.Overflowed() {
		t.Fatalf("a full buffer is not overflow yet")
	}
	for i := range int64(10) {
		ev, ok := s.Next(ctx)
		if !ok || ev.ID != i+1 {
			t.Fatalf("got %v, %v; want event %d in order", ev, ok, i+1)
		}
	}
	for i := range int64(11) {
		f.publish(sampleEvent(buffer + i + 1))
	}
	if !s.Overflowed() || f.Subscribers() != 1 {
		t.Fatalf("overflowed %v, %d subscribers: want the subscriber dropped one past its buffer", s.Overflowed(), f.Subscribers())
	}
	if cap(s.queue) > buffer {
		t.Errorf("queue capacity %d exceeds the buffer %d", cap(s.queue), buffer)
	}
	if _, ok := s.Next(ctx); ok {
		t.Fatal("a dropped subscription yields nothing more")
	}
	for range 11 {
		if _, ok := steady.Next(ctx); !ok {
			t.Fatal("steady subscription ended")
		}
	}
	steady.Close()
	if _, ok := steady.Next(ctx); ok {
		t.Fatal("a closed subscription yields nothing")
	}
}
