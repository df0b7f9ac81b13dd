package jobs

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
