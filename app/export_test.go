package app

// WSReadLimit is wsReadLimit for the tests of package app_test.
const WSReadLimit = wsReadLimit

// WSMaxOperations is wsMaxOperations for the tests of package app_test.
const WSMaxOperations = wsMaxOperations

// SharedFeedStats is the live events executed and shared by the app's
// SharedFeedPayloads, for the tests of package app_test.
func (a *App) SharedFeedStats() (executed, shared int64) { return a.sharedFeed.Stats() }

// WatchedSockets is the app's httpapi.Auth.WatchedSockets, for the tests
// of package app_test.
func (a *App) WatchedSockets() int { return a.auth.WatchedSockets() }

// SSEMaxStreams is sseMaxStreams for the tests of package app_test.
const SSEMaxStreams = sseMaxStreams
