package jobs

// GroupQueued is how many WriteGrouped calls wait for a shared
// transaction.
func GroupQueued(o *Outbox) int {
	o.group.mu.Lock()
	defer o.group.mu.Unlock()
	return len(o.group.queue)
}
