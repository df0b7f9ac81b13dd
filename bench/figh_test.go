package main

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The reference publishes what ours stored: the same payload and headers
// on its own subjects, under message ids of its own, so that its stream
// takes none for a duplicate; the stored messages stay as they were for
// the next loop.
func TestRefMsgs(t *testing.T) {
	stored := []*jetstream.RawStreamMsg{{
		Subject: "erp.journal.sales_orders.42.doc.created",
		Header: nats.Header{
			jetstream.MsgIDHeader:          {"dlv_7_1"},
			jetstream.ExpectedStreamHeader: {hStream},
			"Erp-Event-Id":                 {"7"},
			"Content-Type":                 {"application/json"},
		},
		Data: []byte(`{"id":"7"}`),
	}}
	syncMsgs, asyncMsgs := refMsgs(stored, "s0_"), refMsgs(stored, "a0_")
	m := syncMsgs[0]
	if got, want := m.Subject, "ref.journal.sales_orders.42.doc.created"; got != want {
		t.Errorf("subject = %q, want %q", got, want)
	}
	if got, want := m.Header.Get(jetstream.MsgIDHeader), "s0_dlv_7_1"; got != want {
		t.Errorf("Nats-Msg-Id = %q, want %q", got, want)
	}
	if got := asyncMsgs[0].Header.Get(jetstream.MsgIDHeader); got != "a0_dlv_7_1" {
		t.Errorf("the second loop's Nats-Msg-Id = %q, want a0_dlv_7_1", got)
	}
	if got := m.Header.Get(jetstream.ExpectedStreamHeader); got != "" {
		t.Errorf("Nats-Expected-Stream = %q, want none (the publish's option sets the reference's)", got)
	}
	if m.Header.Get("Erp-Event-Id") != "7" || m.Header.Get("Content-Type") != "application/json" || string(m.Data) != `{"id":"7"}` {
		t.Errorf("headers %v and data %s, want ours'", m.Header, m.Data)
	}
	if got := stored[0].Header.Get(jetstream.MsgIDHeader); got != "dlv_7_1" {
		t.Errorf("the stored message's Nats-Msg-Id became %q", got)
	}
}
