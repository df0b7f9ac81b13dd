package sse

// ConnKey is the context key ConnContext keeps a connection under.
var ConnKey = connKey{}
