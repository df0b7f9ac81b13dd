package jobs

import (
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// GroupQueued is how many WriteGrouped calls wait for a shared
// transaction.
func GroupQueued(o *Outbox) int {
	o.group.mu.Lock()
	defer o.group.mu.Unlock()
	return len(o.group.queue)
}

// TxAttempts is how many times Write runs a transaction PostgreSQL keeps
// failing to let concurrent ones go on.
const TxAttempts = txAttempts

// SetNatsTimeout sets how long p waits for NATS to answer a JetStream
// request that has no deadline of its own (5 s by default).
func SetNatsTimeout(p *NatsPublisher, d time.Duration) {
	js, err := jetstream.New(p.nc, jetstream.WithDefaultTimeout(d))
	if err != nil {
		panic(err)
	}
	p.js = js
}
