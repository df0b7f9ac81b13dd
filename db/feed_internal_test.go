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
