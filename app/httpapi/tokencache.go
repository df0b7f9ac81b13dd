package httpapi

import (
	"sync"
	"time"

	"erp/db"
)

// tokenCacheTTL is how long a token's owner, once looked up, answers for
// the token without asking the database again. A token revoked or a role
// changed through this process takes effect here at once (the cache is
// cleared); through another instance sharing the database, within this
// long. An expiry takes effect at its instant either way.
const tokenCacheTTL = time.Second

// tokenCacheMax bounds the cache; past it, stale entries are dropped.
const tokenCacheMax = 4096

// tokenCache remembers, per token key (db.TokenKey), the owner of a valid
// token for tokenCacheTTL, so that a busy client's requests do not each
// cost a database round trip before their own work. Unknown, revoked and
// expired tokens are never cached.
type tokenCache struct {
	mu sync.Mutex
	m  map[string]cachedOwner
	// gen counts clears; an owner looked up before a clear is not stored
	// after it, so a lookup racing a revocation cannot bring it back.
	gen uint64
}

type cachedOwner struct {
	user db.User
	// until is when the entry stops answering: its TTL or the token's
	// expiry, whichever comes first.
	until time.Time
}

// get returns the cached owner of key, if fresh at now.
func (c *tokenCache) get(key string, now time.Time) (db.User, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok {
		return db.User{}, false
	}
	if !now.Before(e.until) {
		delete(c.m, key)
		return db.User{}, false
	}
	return e.user, true
}

// generation is taken before a lookup and passed to put.
func (c *tokenCache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.gen
}

// put stores the owner of key, fetched at now from a lookup started in
// generation gen, unless the cache was cleared since.
func (c *tokenCache) put(gen uint64, key string, u db.User, expires *time.Time, now time.Time) {
	until := now.Add(tokenCacheTTL)
	if expires != nil && expires.Before(until) {
		until = *expires
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if gen != c.gen {
		return
	}
	if c.m == nil {
		c.m = map[string]cachedOwner{}
	}
	if len(c.m) >= tokenCacheMax {
		for k, e := range c.m {
			if !now.Before(e.until) {
				delete(c.m, k)
			}
		}
		if len(c.m) >= tokenCacheMax {
			clear(c.m)
		}
	}
	c.m[key] = cachedOwner{user: u, until: until}
}

// clear forgets every owner: after a revocation or a role change.
func (c *tokenCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	clear(c.m)
	c.gen++
}
